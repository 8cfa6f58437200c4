//! Writes the hostile checkpoints of issue 12 and their variants into a
//! directory, for measuring the loader by hand (`/usr/bin/time -v`):
//!
//! ```text
//! cargo run --release -p tensorfile-pytorch --example make_hostile -- DIR
//! ```
//!
//! The files are the ones the tests build (`tests/common/hostile.rs`), at
//! the issue's sizes: clone bombs of a million Nones applied 2000 times
//! (`bomb_<apply>_<shared>.pt`), one-element views of one deflated GiB of
//! zeros (`deflated_<views>_<start|spread>.pt`), and sixteen (or, exactly
//! at the default total cap, one) stride-0 views of 1 GiB of a 256-byte
//! storage (`expansions_<count>.pt`), and four views of 64 MiB
//! (`expansions_4x64m.pt`, for measuring at a cap set by hand).

use tensorfile_testkit::hostile;

use hostile::{Apply, Shared};

fn main() -> std::io::Result<()> {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: make_hostile DIR");
        std::process::exit(2);
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir)?;
    let write = |name: String, bytes: Vec<u8>| -> std::io::Result<()> {
        println!("{name}: {} bytes", bytes.len());
        std::fs::write(dir.join(name), bytes)
    };
    let applies = [
        (Apply::Reduce, "reduce"),
        (Apply::NewObj, "newobj"),
        (Apply::NewObjEx, "newobj_ex"),
        (Apply::Build, "build"),
    ];
    let shareds = [
        (Shared::Tuple, "tuple"),
        (Shared::TupleArg, "tuple_arg"),
        (Shared::List, "list"),
        (Shared::Dict, "dict"),
    ];
    for (apply, a) in applies {
        for (shared, s) in shareds {
            write(
                format!("bomb_{a}_{s}.pt"),
                hostile::clone_bomb(apply, shared, 1_000_000, 2000),
            )?;
        }
    }
    for views in [10, 128, 1000, 100_000] {
        for (spread, how) in [(false, "start"), (true, "spread")] {
            write(
                format!("deflated_{views}_{how}.pt"),
                hostile::deflated_views(views, 1 << 30, spread),
            )?;
        }
    }
    for count in [1, 16] {
        write(
            format!("expansions_{count}.pt"),
            hostile::expansions(count, 1 << 22),
        )?;
    }
    write(
        "expansions_4x64m.pt".into(),
        hostile::expansions(4, 1 << 18),
    )?;
    Ok(())
}
