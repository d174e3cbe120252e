//! What one module hop of the document's simulator costs on this machine, measured.
//!
//! The UIO document's simulator (its §3.1, §3.4, §4.1.1) ran every device module (command
//! interpreter, DMA, GME, UTL, NET) as a thread; a module handed a request to the next through
//! a Linux message queue, and the simulator programs (one per device) exchanged their NET
//! packets through message queues too, with the storage medium in memory. So one hop costs a
//! System V `msgsnd` plus the `msgrcv` of a thread blocked on the queue, which the kernel wakes.
//!
//! [`measure`] times exactly that: two threads play ping-pong over two private SysV queues,
//! each blocked in `msgrcv` until the other's `msgsnd`; one hop is half a round trip (the median
//! over `rounds` round trips, so a stray descheduling on a shared machine does not move it). The
//! same ping-pong with a full NET packet gives the queue's copy rate, and a memcpy loop and a
//! CRC loop give the rates of the modules' own copies and GME's hash. Nothing here is fitted:
//! [`crate::cluster::Links::document_simulator`] turns these numbers into link costs.

use std::io;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// The measured constants (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MsgqCosts {
    /// Round trips timed per ping-pong.
    pub rounds: u32,
    /// One hop with an 8-byte request (a module's request item): msgsnd + a blocked thread's
    /// wake-up + msgrcv; median of half round trips.
    pub hop_ns: u64,
    /// The same hop carrying `packet_bytes` of payload: hop_ns plus the median, over pairs of
    /// round trips run back to back, of what the payload added.
    pub packet_hop_ns: u64,
    pub packet_bytes: u32,
    /// The queue's copy rate: packet_bytes / (packet_hop_ns - hop_ns).
    pub msgq_bytes_per_s: f64,
    /// A module's memory copy (memcpy of 64 KiB buffers), bytes/s.
    pub memcpy_bytes_per_s: f64,
    /// GME's hash (CRC-32 of 64 KiB), bytes/s.
    pub hash_bytes_per_s: f64,
}

const MTYPE: libc::c_long = 1;
const WORD: usize = std::mem::size_of::<libc::c_long>();

/// A private SysV message queue, removed on drop.
struct Queue(libc::c_int);

impl Queue {
    fn new() -> io::Result<Queue> {
        // SAFETY: msgget with IPC_PRIVATE creates a new queue; no pointers are passed.
        let id = unsafe { libc::msgget(libc::IPC_PRIVATE, libc::IPC_CREAT | 0o600) };
        if id < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Queue(id))
    }

    /// Send `buf` (its first word is the message type, the rest the payload).
    fn send(&self, buf: &[u8]) -> io::Result<()> {
        debug_assert!(buf.len() >= WORD);
        loop {
            // SAFETY: buf holds a c_long type followed by buf.len() - WORD payload bytes.
            let r = unsafe { libc::msgsnd(self.0, buf.as_ptr().cast(), buf.len() - WORD, 0) };
            if r == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Receive into `buf` (blocks until a message arrives); returns its payload length.
    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: buf has room for a c_long type and buf.len() - WORD payload bytes.
            let r = unsafe { libc::msgrcv(self.0, buf.as_mut_ptr().cast(), buf.len() - WORD, 0, 0) };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: IPC_RMID takes no buffer.
        unsafe { libc::msgctl(self.0, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

fn message(payload: usize) -> Vec<u8> {
    let mut b = vec![b'a'; WORD + payload];
    b[..WORD].copy_from_slice(&MTYPE.to_ne_bytes());
    b
}

/// Ping-pong `rounds` pairs of round trips, one with an 8-byte request and one carrying
/// `payload` bytes each way, interleaved so both see the same load. Returns the median half
/// round trip of the small messages and the median, over pairs, of the payload's extra half
/// round trip (at least 1 ns).
fn ping_pong(rounds: u32, payload: usize) -> io::Result<(u64, u64)> {
    let (there, back) = (Queue::new()?, Queue::new()?);
    let (tid, bid) = (there.0, back.0);
    let warm = rounds / 10 + 10; // pairs not timed
    let total = 2 * (rounds + warm);
    let echo = std::thread::spawn(move || -> io::Result<()> {
        let (there, back) = (Queue(tid), Queue(bid));
        let mut buf = message(payload.max(8));
        for _ in 0..total {
            let n = there.recv(&mut buf)?;
            back.send(&buf[..WORD + n])?;
        }
        // The queues belong to the measuring thread.
        std::mem::forget((there, back));
        Ok(())
    });
    let (small, big) = (message(8), message(payload));
    let mut inb = message(payload.max(8));
    let mut halves = Vec::with_capacity(rounds as usize);
    let mut extra = Vec::with_capacity(rounds as usize);
    let mut result = Ok(());
    for i in 0..rounds + warm {
        let mut half = [0u64; 2];
        for (j, out) in [&small, &big].into_iter().enumerate() {
            let t0 = Instant::now();
            if let Err(e) = there.send(out).and_then(|_| back.recv(&mut inb)) {
                result = Err(e);
                break;
            }
            half[j] = t0.elapsed().as_nanos() as u64 / 2;
        }
        if result.is_err() {
            break;
        }
        if i >= warm {
            halves.push(half[0]);
            extra.push(half[1].saturating_sub(half[0]));
        }
    }
    if let Err(e) = result {
        // Unblock the echo thread: removing its queue makes its msgrcv fail.
        drop(there);
        drop(back);
        let _ = echo.join();
        return Err(e);
    }
    echo.join().map_err(|_| io::Error::other("message queue echo thread panicked"))??;
    assert_eq!(halves.len(), rounds as usize);
    halves.sort_unstable();
    extra.sort_unstable();
    Ok((halves[halves.len() / 2].max(1), extra[extra.len() / 2].max(1)))
}

/// Median rate (bytes/s) of `f` run over `bytes` bytes, 15 runs.
fn rate(bytes: usize, mut f: impl FnMut()) -> f64 {
    let mut ns: Vec<u64> = (0..15)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_nanos().max(1) as u64
        })
        .collect();
    ns.sort_unstable();
    bytes as f64 * 1e9 / ns[ns.len() / 2] as f64
}

/// Measure the constants (`rounds` x 2 round trips: 0.1-0.5 s at 10 000 rounds).
/// `packet_bytes`: the NET packet's payload (at most the kernel's msgmax, 8192 by default).
pub fn measure(rounds: u32, packet_bytes: u32) -> io::Result<MsgqCosts> {
    if rounds == 0 || packet_bytes == 0 || packet_bytes > 1 << 16 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "msgq: rounds >= 1 and packet_bytes 1..=65536"));
    }
    let (hop_ns, extra_ns) = ping_pong(rounds, packet_bytes as usize)?;
    let packet_hop_ns = hop_ns + extra_ns;
    let msgq_bytes_per_s = packet_bytes as f64 * 1e9 / extra_ns as f64;
    const BUF: usize = 64 << 10;
    let src = vec![b'a'; BUF];
    let mut dst = vec![0u8; BUF];
    let memcpy_bytes_per_s = rate(BUF * 16, || {
        for i in 0..16u8 {
            dst.copy_from_slice(std::hint::black_box(&src));
            dst[0] = i;
        }
        std::hint::black_box(&dst);
    });
    let hash_bytes_per_s = rate(BUF, || {
        std::hint::black_box(crc32fast::hash(std::hint::black_box(&src)));
    });
    let c = MsgqCosts { rounds, hop_ns, packet_hop_ns, packet_bytes, msgq_bytes_per_s, memcpy_bytes_per_s, hash_bytes_per_s };
    assert!(c.hop_ns > 0 && c.msgq_bytes_per_s > 0.0 && c.memcpy_bytes_per_s > 0.0 && c.hash_bytes_per_s > 0.0);
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hop_is_measured_and_a_packet_costs_more() {
        let c = measure(500, 4096).expect("SysV message queues");
        // A hop through the kernel with a wake-up: more than 100 ns, less than a millisecond.
        assert!((100..1_000_000).contains(&c.hop_ns), "{c:?}");
        assert!(c.packet_hop_ns > c.hop_ns, "{c:?}");
        assert!(c.memcpy_bytes_per_s > 1e8, "{c:?}");
    }
}
