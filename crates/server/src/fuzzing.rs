//! A protocol's session on bytes instead of a socket, for the fuzz targets (fuzz/) and the
//! suite's runs over their corpus: the client's bytes are read from memory (then the end of
//! the stream), what the server writes is kept.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// Keeps what is written to it.
#[derive(Clone, Default)]
pub struct Sink(Arc<Mutex<Vec<u8>>>);

impl tokio::io::AsyncWrite for Sink {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<std::io::Result<usize>> {
        crate::lock(&self.0).extend_from_slice(b);
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The client's side of a session run on bytes: reads `data`, keeps the writes.
pub type Stream = tokio::io::Join<std::io::Cursor<Vec<u8>>, Sink>;

/// Run `session` to its end on a [`Stream`] made of `data` (on a one-thread runtime with time
/// enabled); returns what the server wrote.
pub fn run_session<F: Future>(data: &[u8], session: impl FnOnce(Stream) -> F) -> Vec<u8> {
    let out = Sink::default();
    let stream = tokio::io::join(std::io::Cursor::new(data.to_vec()), out.clone());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(session(stream));
    // The session is over and its stream with it: a task of its still holding the writer
    // (alive on the runtime, never to run again) would cut what it had not written yet from
    // the output the fuzz targets check.
    debug_assert_eq!(Arc::strong_count(&out.0), 1, "the session's stream outlived the session");
    let v = crate::lock(&out.0).clone();
    v
}
