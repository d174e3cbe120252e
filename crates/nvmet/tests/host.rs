//! ssdlab's small NVMe/TCP host (crates/nvmet/src/client.rs), written from the specifications,
//! driving the target over a real TCP connection: connect, identify, queues, reads and writes (in capsule and after R2T), digests,
//! deallocate, and the status codes of bad commands. Real hosts (Linux nvme-tcp, nvme-cli) are
//! tested in tests/test_nvme.py through a guest.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use ssdlab_core::media::presets::preset;
use ssdlab_nbd::BackendOptions;
use ssdlab_nvmet::cmd::Sqe;
use ssdlab_nvmet::pdu::*;
use ssdlab_nvmet::{NvmetOptions, Target, DEFAULT_NQN};

use ssdlab_nvmet::client::{self, set_dw, sqe, Host, Reply};

/// The tests' way of submitting: a transport failure fails the test.
trait Run {
    fn run(&mut self, sqe: Sqe, out: &[u8], inline: bool) -> Reply;
}

impl Run for Host {
    fn run(&mut self, sqe: Sqe, out: &[u8], inline: bool) -> Reply {
        Host::cmd(self, sqe, out, inline).expect("the command's completion")
    }
}

fn connect_cmd(qid: u16, cntlid: u16) -> (Sqe, Vec<u8>) {
    client::connect_cmd(qid, cntlid, DEFAULT_NQN, "nqn.2014-08.org.nvmexpress:uuid:test-host")
}

fn prop(h: &mut Host, set: Option<u32>, ofst: u32, eight: bool) -> Reply {
    let mut s = sqe(0x7F);
    s.0[4] = if set.is_some() { 0 } else { 4 };
    s.0[40] = eight as u8;
    set_dw(&mut s, 11, ofst);
    if let Some(v) = set {
        set_dw(&mut s, 12, v);
    }
    h.run(s, &[], false)
}

fn target() -> (Arc<Target>, std::net::SocketAddr, std::thread::JoinHandle<()>, ssdlab_server::Shutdown) {
    let mut c = preset("tiny").unwrap();
    c.timing.enabled = false;
    target_of(c)
}

fn target_of(c: ssdlab_core::config::Config) -> (Arc<Target>, std::net::SocketAddr, std::thread::JoinHandle<()>, ssdlab_server::Shutdown) {
    let t = ssdlab_nvmet::open(c, &BackendOptions::default(), NvmetOptions::new()).unwrap();
    let server = ssdlab_nvmet::server::bind(&t, None).unwrap();
    let addr = server.local_addr();
    let stop = server.shutdown_handle();
    let j = std::thread::spawn(move || server.run(None).unwrap());
    (t, addr, j, stop)
}

/// Admin queue up and controller enabled: returns the host and its controller id.
fn admin(addr: std::net::SocketAddr, dg: bool) -> (Host, u16) {
    let mut h = Host::connect(addr, dg).unwrap();
    let (s, d) = connect_cmd(0, 0xFFFF);
    let r = h.run(s, &d, true);
    assert!(r.ok(), "{:?}", r.status());
    let cntlid = r.dw0() as u16;
    let cap = prop(&mut h, None, 0, true);
    assert!(cap.ok());
    assert_eq!(cap.dw0() & 0xFFFF, 127, "MQES");
    assert_eq!(prop(&mut h, None, 8, false).dw0(), 0x0002_0000);
    assert!(prop(&mut h, Some(1 | 6 << 16 | 4 << 20), 0x14, false).ok());
    assert_eq!(prop(&mut h, None, 0x1C, false).dw0() & 1, 1, "CSTS.RDY");
    (h, cntlid)
}

#[test]
fn a_host_connects_identifies_and_moves_data_both_ways() {
    let (t, addr, j, stop) = target();
    for dg in [false, true] {
        let (mut a, cntlid) = admin(addr, dg);
        let mut id = sqe(0x06);
        set_dw(&mut id, 10, 1);
        set_dw(&mut id, 8, 4096);
        let r = a.run(id, &[], false);
        assert!(r.ok());
        assert_eq!(r.data.len(), 4096);
        assert_eq!(&r.data[24..43], b"ssdlab emulated SSD");
        assert_eq!(u32::from_le_bytes(r.data[516..520].try_into().unwrap()), 1, "one namespace");
        let mut nsid = sqe(0x06);
        set_dw(&mut nsid, 1, 1);
        set_dw(&mut nsid, 8, 4096);
        let ns = a.run(nsid, &[], false);
        let nsze = u64::from_le_bytes(ns.data[0..8].try_into().unwrap());
        assert_eq!(nsze, t.sub.ns().logical_bytes() / 4096);
        // Two I/O queues granted.
        let mut nq = sqe(0x09);
        set_dw(&mut nq, 10, 7);
        set_dw(&mut nq, 11, 1 | 1 << 16);
        let r = a.run(nq, &[], false);
        assert!(r.ok());
        assert_eq!(r.dw0(), 1 | 1 << 16);
        let mut io = Host::connect(addr, dg).unwrap();
        let (s, d) = connect_cmd(1, cntlid);
        assert!(io.run(s, &d, false).ok(), "I/O queue connect with its data after R2T");
        // A third queue was not granted.
        let mut io3 = Host::connect(addr, dg).unwrap();
        let (s, d) = connect_cmd(3, cntlid);
        assert_eq!(io3.run(s, &d, true).status(), (1, 0x82));
        // Writes: 4 KiB in capsule, 300 KiB after R2T; reads back both.
        let small: Vec<u8> = (0..4096u32).map(|i| (i * 7 + dg as u32) as u8).collect();
        let big: Vec<u8> = (0..300 * 1024u32).map(|i| (i / 13) as u8 ^ dg as u8).collect();
        for (lba, data, inline) in [(10u64, &small, true), (100, &big, false)] {
            let mut w = sqe(0x01);
            set_dw(&mut w, 1, 1);
            w.0[40..48].copy_from_slice(&lba.to_le_bytes());
            set_dw(&mut w, 12, (data.len() / 4096 - 1) as u32);
            assert!(io.run(w, data, inline).ok());
            let mut rd = sqe(0x02);
            set_dw(&mut rd, 1, 1);
            rd.0[40..48].copy_from_slice(&lba.to_le_bytes());
            set_dw(&mut rd, 12, (data.len() / 4096 - 1) as u32);
            set_dw(&mut rd, 8, data.len() as u32);
            let r = io.run(rd, &[], false);
            assert!(r.ok());
            assert_eq!(&r.data, data);
        }
        // Deallocate LBA 10: it reads zeros.
        let mut range = vec![0u8; 16];
        range[4..8].copy_from_slice(&1u32.to_le_bytes());
        range[8..16].copy_from_slice(&10u64.to_le_bytes());
        let mut dsm = sqe(0x09);
        set_dw(&mut dsm, 1, 1);
        set_dw(&mut dsm, 11, 1 << 2);
        assert!(io.run(dsm, &range, true).ok());
        let mut rd = sqe(0x02);
        set_dw(&mut rd, 1, 1);
        rd.0[40..48].copy_from_slice(&10u64.to_le_bytes());
        set_dw(&mut rd, 8, 4096);
        assert_eq!(io.run(rd, &[], false).data, vec![0u8; 4096]);
        // Past the end: LBA out of range; unknown namespace; unknown opcode.
        let mut bad = sqe(0x02);
        set_dw(&mut bad, 1, 1);
        bad.0[40..48].copy_from_slice(&nsze.to_le_bytes());
        set_dw(&mut bad, 8, 4096);
        assert_eq!(io.run(bad, &[], false).status(), (0, 0x80));
        set_dw(&mut bad, 1, 2);
        assert_eq!(io.run(bad, &[], false).status(), (0, 0x0B));
        let mut unknown = sqe(0x55);
        set_dw(&mut unknown, 1, 1);
        assert_eq!(io.run(unknown, &[], false).status(), (0, 0x01));
        let mut fl = sqe(0x00);
        set_dw(&mut fl, 1, 1);
        assert!(io.run(fl, &[], false).ok());
    }
    let m = t.metrics();
    assert!(m["nvme"]["counters"]["writes"].as_u64().unwrap() >= 4);
    assert_eq!(m["host_write_bytes"], m["nvme"]["counters"]["write_bytes"], "every write reached the device");
    assert_eq!(m["nvme"]["protocol_errors"], 0);
    stop.trigger();
    j.join().unwrap();
}

#[test]
fn the_discovery_controller_names_the_subsystem() {
    let (_t, addr, j, stop) = target();
    let mut h = Host::connect(addr, false).unwrap();
    let (s, mut d) = connect_cmd(0, 0xFFFF);
    d[256..512].fill(0);
    let n = b"nqn.2014-08.org.nvmexpress.discovery";
    d[256..256 + n.len()].copy_from_slice(n);
    assert!(h.run(s, &d, true).ok());
    assert!(prop(&mut h, Some(1), 0x14, false).ok());
    let mut lp = sqe(0x02);
    set_dw(&mut lp, 10, 0x70 | ((2048 / 4 - 1) << 16));
    set_dw(&mut lp, 8, 2048);
    let r = h.run(lp, &[], false);
    assert!(r.ok());
    assert_eq!(u64::from_le_bytes(r.data[8..16].try_into().unwrap()), 1);
    assert_eq!(r.data[1024], 3, "TCP");
    assert!(r.data[1024 + 256..].starts_with(DEFAULT_NQN.as_bytes()));
    stop.trigger();
    j.join().unwrap();
}

#[test]
fn broken_pdus_end_the_connection_with_a_termination_request() {
    let (_t, addr, j, stop) = target();
    // A capsule claiming 1 GiB of in-capsule data: refused from its header.
    let mut h = Host::connect(addr, false).unwrap();
    let v = CommonHeader { pdu_type: CAPSULE_CMD, flags: 0, hlen: 72, pdo: 72, plen: 1 << 30 }.encode();
    h.s.write_all(&v).unwrap();
    let (ph, _, _) = h.read_pdu().unwrap();
    assert_eq!(ph.pdu_type, C2H_TERM);
    let mut rest = vec![];
    assert_eq!(h.s.read_to_end(&mut rest).unwrap(), 0, "closed after the termination request");
    // Garbage instead of an ICReq.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&[0xFFu8; 200]).unwrap();
    let mut got = vec![];
    let _ = s.read_to_end(&mut got);
    assert_eq!(got.first(), Some(&C2H_TERM));
    stop.trigger();
    j.join().unwrap();
}

/// The I/O queue of a fresh controller.
fn io_queue(addr: std::net::SocketAddr) -> (Host, Host) {
    let (mut a, cntlid) = admin(addr, false);
    let mut nq = sqe(0x09);
    set_dw(&mut nq, 10, 7);
    assert!(a.run(nq, &[], false).ok());
    let mut io = Host::connect(addr, false).unwrap();
    let (s, d) = connect_cmd(1, cntlid);
    assert!(io.run(s, &d, true).ok());
    (a, io)
}

fn rw(op: u8, lba: u64, blocks: u32) -> Sqe {
    let mut s = sqe(op);
    set_dw(&mut s, 1, 1);
    s.0[40..48].copy_from_slice(&lba.to_le_bytes());
    set_dw(&mut s, 12, blocks - 1);
    set_dw(&mut s, 8, blocks * 4096);
    s
}

/// Many writes in flight on one queue, as Linux keeps them: the target asks for each one's
/// data (some only after others finished, past its R2T budget), whatever command ids the host
/// picked, including ids equal to the transfer tags of other commands in flight.
#[test]
fn many_writes_in_flight_on_one_queue_each_land_where_it_was_sent() {
    let (t, addr, j, stop) = target();
    let (_a, mut io) = io_queue(addr);
    let cids = [5u16, 0, 1, 2, 3, 7, 6, 4, 11, 10, 9, 8, 15, 14, 13, 12];
    let blocks = |i: usize| if i.is_multiple_of(2) { 128u32 } else { 2 };
    let data: Vec<Vec<u8>> =
        (0..cids.len()).map(|i| (0..blocks(i) * 4096).map(|b| (b as usize * 31 + i * 7 + b as usize / 4096) as u8).collect()).collect();
    let lba = |i: usize| 256 * i as u64;
    let writes: Vec<(Sqe, &[u8], bool)> = (0..cids.len())
        .map(|i| {
            let mut w = rw(0x01, lba(i), blocks(i));
            w.0[2..4].copy_from_slice(&cids[i].to_le_bytes());
            (w, data[i].as_slice(), false)
        })
        .collect();
    assert!(data.iter().map(|d| d.len() as u64).sum::<u64>() > ssdlab_nvmet::server::R2T_BYTES_AT_ONCE, "some wait for the budget");
    let done = io.cmds(&writes).expect("every write completes");
    assert!(done.iter().all(|r| r.ok()), "{:?}", done.iter().map(|r| r.status()).collect::<Vec<_>>());
    let reads: Vec<(Sqe, &[u8], bool)> = (0..cids.len())
        .map(|i| {
            let mut r = rw(0x02, lba(i), blocks(i));
            r.0[2..4].copy_from_slice(&cids[i].to_le_bytes());
            (r, &[][..], false)
        })
        .collect();
    let got = io.cmds(&reads).expect("every read completes");
    for (i, r) in got.iter().enumerate() {
        assert!(r.ok() && r.data == data[i], "write {i} (command id {}) reads back", cids[i]);
    }
    assert_eq!(t.metrics()["nvme"]["protocol_errors"], 0);
    stop.trigger();
    j.join().unwrap();
}

#[test]
fn a_zns_device_is_a_zoned_namespace() {
    let mut c = preset("tiny").unwrap();
    c.personality = ssdlab_core::config::Personality::Zns;
    c.timing.enabled = false;
    let (t, addr, j, stop) = target_of(c);
    let zs = t.sub.zone_info().unwrap();
    let (mut a, mut io) = io_queue(addr);
    // The namespace says it is zoned (CSI 2), with the zone size and open/active limits.
    let mut d = sqe(0x06);
    set_dw(&mut d, 1, 1);
    set_dw(&mut d, 10, 3);
    set_dw(&mut d, 8, 4096);
    let r = a.run(d, &[], false);
    assert_eq!((r.data[20], r.data[24]), (0x04, 2), "CSI descriptor: zoned");
    let mut z = sqe(0x06);
    set_dw(&mut z, 1, 1);
    set_dw(&mut z, 10, 5);
    set_dw(&mut z, 11, 2 << 24);
    set_dw(&mut z, 8, 4096);
    let r = a.run(z, &[], false);
    assert!(r.ok());
    assert_eq!(u64::from_le_bytes(r.data[2816..2824].try_into().unwrap()), zs.zone_size);
    assert_eq!(u32::from_le_bytes(r.data[8..12].try_into().unwrap()), zs.max_open - 1);
    // Write at the start of zone 1, then a write that is not at the write pointer.
    let zone1 = zs.zone_size;
    let data = vec![0xA5u8; 8192];
    assert!(io.run(rw(0x01, zone1, 2), &data, true).ok());
    assert_eq!(io.run(rw(0x01, zone1 + 5, 1), &data[..4096], true).status(), (1, 0xBC), "zone invalid write");
    // Zone append: the LBA written comes back in the completion.
    let mut ap = rw(0x7D, zone1, 1);
    ap.0[32..36].copy_from_slice(&4096u32.to_le_bytes());
    let r = io.run(ap, &[7u8; 4096], true);
    assert!(r.ok(), "{:?}", r.status());
    assert_eq!(r.dw0() as u64, zone1 + 2);
    let back = io.run(rw(0x02, zone1, 3), &[], false);
    assert_eq!(&back.data[..8192], &data[..]);
    assert_eq!(&back.data[8192..], &[7u8; 4096][..]);
    // Report zones: zone 1 implicitly open with its write pointer at +3.
    let mut rep = sqe(0x7A);
    set_dw(&mut rep, 1, 1);
    rep.0[40..48].copy_from_slice(&zone1.to_le_bytes());
    set_dw(&mut rep, 12, (64 + 64 * 2) / 4 - 1);
    set_dw(&mut rep, 8, 64 + 64 * 2);
    let r = io.run(rep, &[], false);
    assert!(r.ok());
    assert_eq!(u64::from_le_bytes(r.data[0..8].try_into().unwrap()), zs.zones as u64 - 1, "zones from zone 1 on");
    assert_eq!(r.data[64 + 1] >> 4, 0x2, "implicitly open");
    assert_eq!(u64::from_le_bytes(r.data[64 + 24..64 + 32].try_into().unwrap()), zone1 + 3);
    // Reset zone 1: empty again, and the erase shows in the metrics.
    let erases = t.metrics()["nand_erase_count"].as_u64().unwrap();
    let mut reset = sqe(0x79);
    set_dw(&mut reset, 1, 1);
    reset.0[40..48].copy_from_slice(&zone1.to_le_bytes());
    set_dw(&mut reset, 13, 4);
    assert!(io.run(reset, &[], false).ok());
    assert!(t.metrics()["nand_erase_count"].as_u64().unwrap() > erases, "a reset erases the zone's blocks");
    let r = io.run(rep, &[], false);
    assert_eq!(r.data[64 + 1] >> 4, 0x1, "empty");
    // An invalid transition: finish then open a full zone? Opening a full zone is refused.
    let mut fin = reset;
    set_dw(&mut fin, 13, 2);
    assert!(io.run(fin, &[], false).ok());
    let mut open = reset;
    set_dw(&mut open, 13, 3);
    assert_eq!(io.run(open, &[], false).status(), (1, 0xBF), "invalid zone state transition");
    drop((a, io));
    stop.trigger();
    j.join().unwrap();
}

#[test]
fn an_fdp_device_shows_its_handles_and_places_writes_by_them() {
    let mut c = preset("tiny").unwrap();
    c.timing.enabled = false;
    c.fdp.enabled = true;
    c.fdp.handles = 2;
    c.ftl.spare_factor = 0.2;
    let (t, addr, j, stop) = target_of(c);
    let (mut a, mut io) = io_queue(addr);
    let mut id = sqe(0x06);
    set_dw(&mut id, 10, 1);
    set_dw(&mut id, 8, 4096);
    let r = a.run(id, &[], false);
    assert_ne!(u32::from_le_bytes(r.data[96..100].try_into().unwrap()) & (1 << 19), 0, "CTRATT.FDPS");
    // Get Features FDP of endurance group 1: enabled, configuration 0.
    let mut gf = sqe(0x0A);
    set_dw(&mut gf, 10, 0x1D);
    set_dw(&mut gf, 11, 1);
    let r = a.run(gf, &[], false);
    assert!(r.ok());
    assert_eq!(r.dw0() & 1, 1);
    // FDP configurations log: one configuration, valid, 2 handles.
    let log = |a: &mut Host, lid: u32, len: u32| {
        let mut lp = sqe(0x02);
        set_dw(&mut lp, 1, 0xFFFF_FFFF);
        set_dw(&mut lp, 10, lid | ((len / 4 - 1) << 16));
        set_dw(&mut lp, 11, 1 << 16);
        set_dw(&mut lp, 8, len);
        a.run(lp, &[], false)
    };
    let r = log(&mut a, 0x20, 512);
    assert!(r.ok(), "{:?}", r.status());
    assert_eq!(u16::from_le_bytes([r.data[0], r.data[1]]), 0, "one configuration (0's based)");
    assert_eq!(r.data[16 + 2] & 0x80, 0x80, "valid");
    assert_eq!(u16::from_le_bytes([r.data[16 + 8], r.data[16 + 9]]), 2, "NRUH");
    // Writes tagged with placement handles 0 and 1 (DTYPE 2, DSPEC = placement identifier).
    for (i, pid) in [0u16, 1, 0, 1].into_iter().enumerate() {
        let mut w = rw(0x01, 8 * i as u64, 8);
        set_dw(&mut w, 12, 7 | 2 << 20);
        set_dw(&mut w, 13, (pid as u32) << 16);
        assert!(io.run(w, &vec![pid as u8 + 1; 8 * 4096], false).ok());
    }
    // A placement identifier naming no handle is refused.
    let mut w = rw(0x01, 0, 1);
    set_dw(&mut w, 12, 2 << 20);
    set_dw(&mut w, 13, 9 << 16);
    assert_eq!(io.run(w, &[0u8; 4096], true).status(), (0, 0x02));
    // Usage log: both handles host-specified. RUH status: 16 blocks taken from each RU.
    let r = log(&mut a, 0x21, 64);
    assert_eq!((r.data[8], r.data[16]), (1, 1));
    let mut st = sqe(0x12);
    set_dw(&mut st, 1, 1);
    set_dw(&mut st, 10, 1);
    set_dw(&mut st, 11, (16 + 64) / 4 - 1);
    set_dw(&mut st, 8, 16 + 64);
    let r = io.run(st, &[], false);
    assert!(r.ok(), "{:?}", r.status());
    assert_eq!(u16::from_le_bytes([r.data[14], r.data[15]]), 2);
    let ruamw = |d: &[u8], i: usize| u64::from_le_bytes(d[16 + 32 * i + 8..16 + 32 * i + 16].try_into().unwrap());
    let before = (ruamw(&r.data, 0), ruamw(&r.data, 1));
    // Reclaim unit handle update of handle 1: it gets a fresh RU.
    let mut up = sqe(0x1D);
    set_dw(&mut up, 1, 1);
    set_dw(&mut up, 10, 1);
    assert!(io.run(up, &1u16.to_le_bytes(), true).ok());
    let r = io.run(st, &[], false);
    assert_eq!(ruamw(&r.data, 0), before.0);
    assert!(ruamw(&r.data, 1) > before.1, "handle 1 starts a new reclaim unit");
    let m = t.metrics();
    assert_eq!(m["host_write_bytes"].as_u64().unwrap(), 4 * 8 * 4096);
    let fdp = &m["fdp"];
    // Each handle's writes went to its own reclaim unit: 64 KiB through each, per the device.
    for h in 0..2 {
        assert_eq!(fdp["handles"][h]["host_write_bytes"], 65536, "{fdp}");
    }
    assert_eq!(fdp["events_total"], 1, "the update ended a partly written RU: one event");
    let r = log(&mut a, 0x23, 128);
    assert_eq!(u32::from_le_bytes(r.data[0..4].try_into().unwrap()), 1, "host events log: RU not fully written");
    assert_eq!((r.data[64], u16::from_le_bytes([r.data[66], r.data[67]])), (0x00, 1));
    drop((a, io));
    stop.trigger();
    j.join().unwrap();
}

/// A zoned namespace on an image: zone writes, appends and resets survive a restart (the
/// journal replays them), and a reset zone reads zeros after it.
#[test]
fn a_zoned_namespace_on_an_image_comes_back_as_it_was() {
    let dir = std::env::temp_dir().join(format!("ssdlab-nvmet-zoned-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let image = dir.join("zns.img");
    let mut c = preset("tiny").unwrap();
    c.personality = ssdlab_core::config::Personality::Zns;
    c.timing.enabled = false;
    let start = |c: ssdlab_core::config::Config| {
        let t = ssdlab_nvmet::open(c, &BackendOptions { image: Some(image.clone()), ..Default::default() }, NvmetOptions::new()).unwrap();
        let server = ssdlab_nvmet::server::bind(&t, None).unwrap();
        let addr = server.local_addr();
        let stop = server.shutdown_handle();
        (t, addr, std::thread::spawn(move || server.run(None).unwrap()), stop)
    };
    let report = |io: &mut Host, zslba: u64| {
        let mut rep = sqe(0x7A);
        set_dw(&mut rep, 1, 1);
        rep.0[40..48].copy_from_slice(&zslba.to_le_bytes());
        set_dw(&mut rep, 12, 128 / 4 - 1);
        set_dw(&mut rep, 13, 1 << 16);
        set_dw(&mut rep, 8, 128);
        let r = io.run(rep, &[], false);
        (r.data[65] >> 4, u64::from_le_bytes(r.data[88..96].try_into().unwrap()))
    };
    let (t, addr, j, stop) = start(c.clone());
    let zs = t.sub.zone_info().unwrap().zone_size;
    {
        let (_a, mut io) = io_queue(addr);
        assert!(io.run(rw(0x01, 0, 2), &[1u8; 8192], true).ok());
        assert!(io.run(rw(0x01, zs, 1), &[2u8; 4096], true).ok());
        let mut ap = rw(0x7D, zs, 1);
        ap.0[32..36].copy_from_slice(&4096u32.to_le_bytes());
        assert!(io.run(ap, &[3u8; 4096], true).ok());
        let mut reset = sqe(0x79);
        set_dw(&mut reset, 1, 1);
        set_dw(&mut reset, 13, 4);
        assert!(io.run(reset, &[], false).ok(), "reset zone 0");
    }
    stop.trigger();
    j.join().unwrap();
    drop(t);
    let (_t, addr, j, stop) = start(c);
    {
        let (_a, mut io) = io_queue(addr);
        assert_eq!(report(&mut io, 0), (0x1, 0), "zone 0 empty after its reset");
        assert_eq!(report(&mut io, zs), (0x2, zs + 2), "zone 1 implicitly open, two blocks in");
        let r = io.run(rw(0x02, 0, 2), &[], false);
        assert_eq!(r.data, vec![0u8; 8192], "a reset zone reads zeros");
        let r = io.run(rw(0x02, zs, 2), &[], false);
        assert_eq!(&r.data[..4096], &[2u8; 4096][..]);
        assert_eq!(&r.data[4096..], &[3u8; 4096][..]);
    }
    stop.trigger();
    j.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_live_metrics_come_from_a_vendor_log_page() {
    let (_t, addr, j, stop) = target();
    let (_a, mut io) = io_queue(addr);
    assert!(io.run(rw(0x01, 0, 4), &[5u8; 16384], false).ok());
    let text = client::fetch_metrics(&addr.to_string(), DEFAULT_NQN).unwrap();
    let m: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(m["host_write_bytes"], 16384);
    assert_eq!(m["nvme"]["counters"]["writes"], 1);
    stop.trigger();
    j.join().unwrap();
}

#[test]
#[ignore = "a timing probe, not a test: prints microseconds per 4 KiB write and read over loopback"]
fn probe_latency() {
    let (_t, addr, j, stop) = target();
    let (_a, mut io) = io_queue(addr);
    for (name, op) in [("write", 0x01u8), ("read", 0x02)] {
        let t0 = std::time::Instant::now();
        for i in 0..2000u64 {
            let s = rw(op, i % 1000, 1);
            let r = if op == 1 { io.run(s, &[1u8; 4096], true) } else { io.run(s, &[], false) };
            assert!(r.ok());
        }
        println!("{name}: {:.1} us", t0.elapsed().as_secs_f64() * 1e6 / 2000.0);
    }
    stop.trigger();
    j.join().unwrap();
}
