//! The queue interface driven byte for byte: admin queue setup from the BAR, queue creation
//! order, put/get round trips through shared memory, phase tags across CQ wrap, doorbell wrap,
//! a full CQ holding the device back, permission checks, round-robin arbitration with a burst,
//! and a host and a device on two threads.

use std::collections::HashMap;
use std::sync::Arc;

use ssdlab_uio::layout::{bar, io, Command, Status, CQE_BYTES};
use ssdlab_uio::{Completion, Controller, Host, Perm, Region, Store};

#[derive(Default)]
struct Map(HashMap<Vec<u8>, Vec<u8>>);

impl Store for Map {
    fn put(&mut self, k: &[u8], v: &[u8]) -> Result<(), Status> {
        self.0.insert(k.to_vec(), v.to_vec());
        Ok(())
    }
    fn get(&mut self, k: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        Ok(self.0.get(k).cloned())
    }
}

fn setup(burst: u32) -> (Host, Controller<Map>) {
    let bar_region = Arc::new(Region::new("uio-bar", bar::bytes(64)).unwrap());
    let mem = Arc::new(Region::new("uio-host", 8 << 20).unwrap());
    let host = Host::new(bar_region.clone(), mem.clone(), 8);
    let dev = Controller::enable(bar_region, mem, burst, Map::default()).map_err(|e| e.0).unwrap();
    (host, dev)
}

/// Submit an admin command, let the device run, return its completion.
fn admin(h: &mut Host, d: &mut Controller<Map>, c: Command) -> Completion {
    h.submit(0, &c).unwrap();
    d.poll();
    h.reap(0).expect("an admin completion")
}

/// Create I/O CQ `cqid` and SQ `sqid` of `entries` entries.
fn queues(h: &mut Host, d: &mut Controller<Map>, sqid: u16, cqid: u16, entries: u16, perm: Perm) {
    h.create_io_pair(sqid, cqid, entries, perm, || {
        d.poll();
        true
    })
    .unwrap();
}

fn put(h: &mut Host, qid: u16, k: &[u8], v: &[u8]) -> u16 {
    let ka = h.alloc(k.len() as u64);
    h.mem.write(ka, k);
    let va = h.alloc(v.len() as u64);
    h.mem.write(va, v);
    let cid = h.cid();
    h.submit(qid, &Command::put(cid, (ka, k.len() as u64), (va, v.len() as u64))).unwrap();
    cid
}

fn get(h: &mut Host, qid: u16, k: &[u8], buf_len: u64) -> (u16, u64) {
    let ka = h.alloc(k.len() as u64);
    h.mem.write(ka, k);
    let ba = h.alloc(buf_len.max(1));
    let cid = h.cid();
    h.submit(qid, &Command::get(cid, (ka, k.len() as u64), (ba, buf_len))).unwrap();
    (cid, ba)
}

#[test]
fn put_and_get_round_trip_through_shared_memory() {
    let (mut h, mut d) = setup(4);
    queues(&mut h, &mut d, 1, 1, 16, Perm::default());
    let c1 = put(&mut h, 1, b"apple", b"red fruit");
    let (c2, buf) = get(&mut h, 1, b"apple", 64);
    let (c3, _) = get(&mut h, 1, b"pear", 64);
    let (c4, _) = get(&mut h, 1, b"apple", 4);
    assert_eq!(d.poll(), 4);
    let done: Vec<Completion> = std::iter::from_fn(|| h.reap(1)).collect();
    assert_eq!(done.iter().map(|c| c.cid).collect::<Vec<_>>(), vec![c1, c2, c3, c4]);
    assert_eq!(
        done.iter().map(|c| Status::from_bits(c.status).unwrap()).collect::<Vec<_>>(),
        vec![Status::Success, Status::Success, Status::KeyNotFound, Status::BufferTooSmall]
    );
    assert_eq!((done[1].specific, done[3].specific), (9, 9), "the value's length");
    let mut got = [0u8; 9];
    h.mem.read(buf, &mut got);
    assert_eq!(&got, b"red fruit");
    // SQ head pointers count the commands taken; every completion names SQ 1.
    assert_eq!(done.iter().map(|c| (c.sq_id, c.sq_head)).collect::<Vec<_>>(), vec![(1, 1), (1, 2), (1, 3), (1, 4)]);
}

#[test]
fn an_sq_needs_its_cq_first_and_a_cq_in_use_cannot_go() {
    let (mut h, mut d) = setup(4);
    let sq = h.alloc(16 * 64);
    let cid = h.cid();
    let c = admin(&mut h, &mut d, Command::create_sq(cid, 1, 16, sq, 5, 0));
    assert_eq!(Status::from_bits(c.status), Some(Status::CompletionQueueInvalid));
    assert_eq!((c.sq_id, c.cid), (0, cid));
    let cq = h.alloc(16 * 16);
    let cid = h.cid();
    assert_eq!(admin(&mut h, &mut d, Command::create_cq(cid, 5, 16, cq)).status, 0);
    let cid = h.cid();
    assert_eq!(Status::from_bits(admin(&mut h, &mut d, Command::create_cq(cid, 5, 16, cq)).status), Some(Status::InvalidQueueIdentifier));
    let cid = h.cid();
    assert_eq!(admin(&mut h, &mut d, Command::create_sq(cid, 1, 16, sq, 5, 0)).status, 0);
    let cid = h.cid();
    assert_eq!(Status::from_bits(admin(&mut h, &mut d, Command::delete_cq(cid, 5)).status), Some(Status::InvalidQueueDeletion));
    let cid = h.cid();
    assert_eq!(admin(&mut h, &mut d, Command::delete_sq(cid, 1)).status, 0);
    let cid = h.cid();
    assert_eq!(admin(&mut h, &mut d, Command::delete_cq(cid, 5)).status, 0);
    // Sizes and ids out of range; an unknown admin opcode.
    let cid = h.cid();
    assert_eq!(Status::from_bits(admin(&mut h, &mut d, Command::create_cq(cid, 0, 16, cq)).status), Some(Status::InvalidQueueIdentifier));
    let mut c = Command::create_cq(h.cid(), 2, 16, cq);
    c.cdw[0] = 9000 << 16 | 2;
    assert_eq!(Status::from_bits(admin(&mut h, &mut d, c).status), Some(Status::InvalidQueueSize));
    let c = Command { opcode: 0x7f, cid: h.cid(), ..Default::default() };
    assert_eq!(Status::from_bits(admin(&mut h, &mut d, c).status), Some(Status::InvalidOpcode));
}

#[test]
fn phase_tags_flip_at_every_wrap_and_doorbells_wrap() {
    let (mut h, mut d) = setup(64);
    queues(&mut h, &mut d, 1, 1, 4, Perm::default()); // 4 entries: 3 outstanding at most
    let mut phases = vec![];
    for i in 0..40u32 {
        let k = format!("k{i}");
        put(&mut h, 1, k.as_bytes(), b"v");
        assert_eq!(d.poll(), 1);
        let c = h.reap(1).unwrap();
        assert_eq!(c.status, 0);
        phases.push(c.phase);
        assert_eq!(c.sq_head as u32, (i + 1) % 4, "SQ head wraps with the queue");
        assert!(h.reap(1).is_none(), "one completion per command");
    }
    // The first pass over the 4 entries carries phase 1, the next 0, and so on.
    let want: Vec<bool> = (0..40u32).map(|i| (i / 4) % 2 == 0).collect();
    assert_eq!(phases, want);
    // The doorbells hold the wrapped positions.
    assert_eq!(h.bar.load32(bar::sq_tail(1) as u64), 40 % 4);
    assert_eq!(h.bar.load32(bar::cq_head(1) as u64), 40 % 4);
}

#[test]
fn a_full_cq_holds_the_device_back_until_the_host_reaps() {
    let (mut h, mut d) = setup(64);
    // CQ of 4 entries (3 usable) fed by two SQs of 8.
    let cq = h.alloc(4 * CQE_BYTES as u64);
    let cid = h.cid();
    assert_eq!(admin(&mut h, &mut d, Command::create_cq(cid, 1, 4, cq)).status, 0);
    for sqid in [1u16, 2] {
        let sq = h.alloc(8 * 64);
        let cid = h.cid();
        assert_eq!(admin(&mut h, &mut d, Command::create_sq(cid, sqid, 8, sq, 1, 0)).status, 0);
        h.add_queues(sqid, (sq, 8), 1, (cq, 4));
    }
    for i in 0..5 {
        put(&mut h, 1 + (i % 2) as u16, format!("k{i}").as_bytes(), b"v");
    }
    assert_eq!(d.poll(), 3, "three completions fill the CQ");
    assert_eq!(d.poll(), 0);
    let got: Vec<Completion> = std::iter::from_fn(|| h.reap(1)).collect();
    assert_eq!(got.len(), 3);
    assert_eq!(d.poll(), 2);
    let rest: Vec<Completion> = std::iter::from_fn(|| h.reap(1)).collect();
    assert_eq!(rest.iter().map(|c| (c.sq_id, c.phase)).collect::<Vec<_>>(), vec![(2, true), (2, false)], "the phase flips at the wrap");
}

#[test]
fn queues_are_served_round_robin_with_a_burst_limit() {
    let (mut h, mut d) = setup(2);
    queues(&mut h, &mut d, 1, 1, 64, Perm::default());
    queues(&mut h, &mut d, 2, 2, 64, Perm::default());
    for i in 0..6 {
        put(&mut h, 1, format!("a{i}").as_bytes(), b"v");
    }
    for i in 0..2 {
        put(&mut h, 2, format!("b{i}").as_bytes(), b"v");
    }
    // One round: at most 2 from each queue.
    assert_eq!(d.poll(), 4);
    assert_eq!(std::iter::from_fn(|| h.reap(1)).count(), 2);
    assert_eq!(std::iter::from_fn(|| h.reap(2)).count(), 2);
    assert_eq!(d.poll(), 2);
    assert_eq!(d.poll(), 2);
    assert_eq!(d.poll(), 0);
}

#[test]
fn each_queue_is_checked_against_its_permissions() {
    let (mut h, mut d) = setup(8);
    queues(&mut h, &mut d, 1, 1, 16, Perm { deny_put: true, deny_get: false });
    queues(&mut h, &mut d, 2, 2, 16, Perm { deny_put: false, deny_get: true });
    let s = |c: Option<Completion>| Status::from_bits(c.unwrap().status).unwrap();
    put(&mut h, 1, b"k", b"v");
    put(&mut h, 2, b"k", b"v");
    d.poll();
    assert_eq!((s(h.reap(1)), s(h.reap(2))), (Status::AccessDenied, Status::Success));
    get(&mut h, 1, b"k", 8);
    get(&mut h, 2, b"k", 8);
    d.poll();
    assert_eq!((s(h.reap(1)), s(h.reap(2))), (Status::Success, Status::AccessDenied));
    // A namespace id (reserved), a key outside host memory, an unknown I/O opcode.
    let mut c = Command::put(h.cid(), (0, 1), (0, 1));
    c.nsid = 1;
    h.submit(1, &c).unwrap();
    let c = Command::put(h.cid(), (u64::MAX - 2, 2), (0, 1));
    h.submit(2, &c).unwrap();
    h.submit(2, &Command { opcode: 0x55, cid: 9, len1: 1, ..Default::default() }).unwrap();
    d.poll();
    assert_eq!(s(h.reap(1)), Status::InvalidNamespace);
    assert_eq!(s(h.reap(2)), Status::InvalidField);
    assert_eq!(s(h.reap(2)), Status::InvalidOpcode);
    assert_eq!(io::PUT, 1);
}

#[test]
fn a_host_and_a_device_on_two_threads() {
    let (mut h, mut d) = setup(16);
    queues(&mut h, &mut d, 1, 1, 256, Perm::default());
    let dev = std::thread::spawn(move || {
        let mut idle = 0;
        while idle < 2_000_000 {
            if d.poll() == 0 {
                idle += 1;
                std::hint::spin_loop();
            } else {
                idle = 0;
            }
            if d.processed >= 2 + 2 * 3000 {
                break;
            }
        }
        d.store.0.len()
    });
    let mut outstanding = 0;
    let mut done = 0;
    let mut bufs = vec![];
    for i in 0..3000u32 {
        while outstanding >= 200 {
            if h.reap(1).is_some() {
                outstanding -= 1;
                done += 1;
            }
        }
        put(&mut h, 1, &i.to_le_bytes(), &(i * 7).to_le_bytes());
        outstanding += 1;
    }
    for i in 0..3000u32 {
        while outstanding >= 200 {
            if let Some(c) = h.reap(1) {
                outstanding -= 1;
                done += 1;
                assert_eq!(c.status, 0);
            }
        }
        let (_, b) = get(&mut h, 1, &i.to_le_bytes(), 4);
        bufs.push((i, b));
        outstanding += 1;
    }
    while done < 6000 {
        if let Some(c) = h.reap(1) {
            assert_eq!(c.status, 0);
            done += 1;
        }
    }
    for (i, b) in bufs {
        let mut v = [0u8; 4];
        h.mem.read(b, &mut v);
        assert_eq!(u32::from_le_bytes(v), i * 7);
    }
    assert!(h.reap(0).is_none(), "nothing pending on the admin queue");
    assert_eq!(dev.join().unwrap(), 3000);
}
