//! Two-way parallelism for work that splits into independent halves
//! (casts, reads into memory, quantized rows): the machines this targets
//! have at least two cores.

/// Runs `background` on a scoped thread and `here` on this one, and returns
/// both results. A panic in the background thread is a bug and is resumed
/// here, not turned into a value.
pub(crate) fn both<A: Send, B>(
    background: impl FnOnce() -> A + Send,
    here: impl FnOnce() -> B,
) -> (A, B) {
    std::thread::scope(|scope| {
        let other = scope.spawn(background);
        let mine = here();
        let theirs = other
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (theirs, mine)
    })
}
