//! What the transports crate's integration tests share.

use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};
use kudurru_transports::runtime::{IO_MEMORY_PER_CORE, RING_DEPTH};

/// Starts `future` on a glommio executor of its own (an unpinned thread), with the I/O memory
/// and ring depth kudurru gives each core.
pub(crate) fn executor<F, T>(future: impl FnOnce() -> F + Send + 'static) -> ExecutorJoinHandle<T>
where
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(IO_MEMORY_PER_CORE)
        .ring_depth(RING_DEPTH)
        .spawn(future)
        .expect("executor starts")
}
