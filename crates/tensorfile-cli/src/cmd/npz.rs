//! The numpy options of `convert` (`.npz` / `.npy` in or out, converted
//! by the library's `convert` operation).

/// Options of `convert` that apply to numpy output only.
#[derive(clap::Args)]
pub struct NpzArgs {
    /// .npz output: deflate the members, as np.savez_compressed does
    /// (without it, stored as np.savez stores them).
    #[arg(long)]
    pub(super) compress: bool,
}
