//! Replies released at their due instants: a front-end that emulates a device's latency queues
//! each reply with the wall-clock instant the device finishes the command (NBD's and NVMe/TCP's
//! `--latency emulated`), and one writer task per connection sends them in order of those
//! instants, earliest first, whatever order the commands came in.

use std::collections::BinaryHeap;
use std::io;
use std::time::Instant;

use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Send each reply `(due, sequence, bytes)` when due (earliest first); flush when nothing else is due yet.
/// Sequence numbers rise with each reply queued: replies due at the same instant go in the
/// order they were queued.
pub async fn writer<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<(Instant, u64, Vec<u8>)>,
) -> io::Result<()> {
    let mut heap: BinaryHeap<std::cmp::Reverse<(Instant, u64, Vec<u8>)>> = BinaryHeap::new();
    let mut open = true;
    let mut last_seq: Option<u64> = None;
    // The sender numbers its replies 1, 2, 3, ...; a repeated or older number would order
    // replies due at the same instant by their bytes instead.
    let mut queue = |heap: &mut BinaryHeap<_>, item: (Instant, u64, Vec<u8>)| {
        debug_assert!(last_seq.is_none_or(|l| item.1 > l), "reply {} queued after reply {last_seq:?}", item.1);
        last_seq = Some(item.1);
        heap.push(std::cmp::Reverse(item));
    };
    while open || !heap.is_empty() {
        let now = Instant::now();
        let mut wrote = false;
        while heap.peek().is_some_and(|r| r.0 .0 <= now) {
            let std::cmp::Reverse((_, _, bytes)) = heap.pop().expect("peeked");
            w.write_all(&bytes).await?;
            wrote = true;
        }
        if wrote {
            w.flush().await?;
        }
        let next = heap.peek().map(|r| r.0 .0);
        if !open {
            if let Some(t) = next {
                tokio::time::sleep_until(t.into()).await;
            }
            continue;
        }
        let got = match next {
            Some(t) => tokio::select! {
                m = rx.recv() => Some(m),
                _ = tokio::time::sleep_until(t.into()) => None,
            },
            None => Some(rx.recv().await),
        };
        match got {
            Some(Some(item)) => {
                queue(&mut heap, item);
                while let Ok(item) = rx.try_recv() {
                    queue(&mut heap, item);
                }
            }
            Some(None) => open = false,
            None => {}
        }
    }
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn replies_go_out_in_order_of_their_due_instants_and_ties_in_order_queued() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let out = rt.block_on(async {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let t0 = Instant::now();
            let (late, soon) = (t0 + Duration::from_millis(40), t0 + Duration::from_millis(10));
            // Queued in the order a front-end numbers them; one is already due.
            for (seq, due, bytes) in [(1, late, b"a"), (2, soon, b"b"), (3, soon, b"c"), (4, t0, b"d")] {
                tx.send((due, seq, bytes.to_vec())).unwrap();
            }
            drop(tx);
            let mut out = Vec::new();
            writer(&mut out, rx).await.unwrap();
            assert!(t0.elapsed() >= Duration::from_millis(40), "the last reply went out before it was due");
            out
        });
        assert_eq!(out, b"dbca");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "reply 1 queued after reply Some(2)")]
    fn a_reply_numbered_out_of_order_is_a_sender_bug() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let now = Instant::now();
            tx.send((now, 2, b"b".to_vec())).unwrap();
            tx.send((now, 1, b"a".to_vec())).unwrap();
            drop(tx);
            let _ = writer(Vec::new(), rx).await;
        });
    }
}
