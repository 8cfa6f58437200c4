//! Buffers that parallel jobs reuse, one set per thread.

/// Buffers a job reuses: taken from the thread at the start of a job and
/// given back at its end (a job that waits inside may run another job on
/// the same thread, which then finds none and makes its own), so that
/// large buffers are not allocated and zeroed for every job.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Decoded values.
    pub(crate) values: Vec<f32>,
    /// Raw input bytes.
    pub(crate) bytes: Vec<u8>,
    /// Output bytes.
    pub(crate) out: Vec<u8>,
}

thread_local! {
    static SCRATCH: std::cell::Cell<Option<Scratch>> = const { std::cell::Cell::new(None) };
}

impl Scratch {
    /// This thread's buffers (or new ones).
    pub(crate) fn take() -> Scratch {
        SCRATCH.with(|s| s.take()).unwrap_or_default()
    }

    /// Gives the buffers back to this thread.
    pub(crate) fn give(self) {
        SCRATCH.with(|s| s.set(Some(self)));
    }
}

/// `v` made at least `n` long (growing only; old contents kept), its first
/// `n` elements.
pub(crate) fn grown<T: Clone + Default>(v: &mut Vec<T>, n: usize) -> &mut [T] {
    if v.len() < n {
        v.resize(n, T::default());
    }
    &mut v[..n]
}
