//! FLAC's semantics: attach shares frames and a write after attach never changes the other
//! side (copy-on-write, both directions, for FLAC buffers, application memory and the space's
//! own view); flush + reopen persists; misses load asynchronously or synchronously; pfree and
//! eviction; reference counts stay exact throughout.

mod common;

use common::*;
use ssdlab_flac::{AttachMode, Flac, Tx};

const P: usize = 4096;

#[test]
fn attach_from_a_buffer_is_copy_on_write_both_ways() {
    let d = tmpdir();
    let f = open(d.path(), 64, 16);
    let mut buf = f.alloc_buffer(16 * P).unwrap();
    let a = pattern(1, 16 * P);
    buf.as_mut_slice().copy_from_slice(&a);
    let dst = f.addr(100);
    let x = f.zcopy_to_flac(dst, buf.as_ptr(), 16 * P).unwrap();
    assert_eq!((x.mapped_bytes, x.copied_bytes), (16 * P as u64, 0), "whole aligned pages are attached, not copied");
    assert_eq!(read_space(&f, dst, 16 * P), a);
    f.check_invariants();

    // The application writes its buffer after the attach: the space keeps the attached data.
    buf.as_mut_slice()[5 * P + 17] = 0xEE;
    buf.as_mut_slice()[..10].fill(0xAB);
    assert_eq!(read_space(&f, dst, 16 * P), a, "a write to the source after attach changed the FLAC space");
    assert!(f.stats().cow_faults >= 2);

    // The space is written (a copy-path write into one page): the buffer keeps its bytes.
    let snapshot = buf.as_slice().to_vec();
    f.zcopy_to_flac(dst + 3 * P + 5, b"space write".as_ptr(), 11).unwrap();
    assert_eq!(buf.as_slice(), &snapshot[..], "a write to the space changed the buffer it was attached from");
    f.check_invariants();
}

#[test]
fn attach_to_a_buffer_and_to_application_memory_is_copy_on_write() {
    let d = tmpdir();
    let f = open(d.path(), 64, 16);
    let a = pattern(2, 8 * P);
    let src = f.addr(0);
    f.copy_to_flac(src, a.as_ptr(), 8 * P).unwrap();

    // Into a FLAC buffer.
    let mut b = f.alloc_buffer(8 * P).unwrap();
    let x = f.zcopy_from_flac(b.as_ptr(), src, 8 * P, AttachMode::Cow).unwrap();
    assert_eq!(x.mapped_bytes, 8 * P as u64);
    assert_eq!(b.as_slice(), &a[..]);
    b.as_mut_slice()[P..2 * P].fill(9);
    assert_eq!(read_space(&f, src, 8 * P), a, "a write to the destination buffer changed the space");
    // A later write to the space leaves the buffer's untouched pages as they were.
    let before = b.as_slice().to_vec();
    f.copy_to_flac(src, pattern(3, 8 * P).as_ptr(), 8 * P).unwrap();
    assert_eq!(b.as_slice(), &before[..], "a write to the space changed a buffer attached from it");

    // Into the application's own memory (private mappings: the kernel copies on write).
    let m = Anon::new(8 * P);
    let now = read_space(&f, src, 8 * P);
    let x = f.zcopy_from_flac(m.ptr, src, 8 * P, AttachMode::Cow).unwrap();
    assert_eq!(x.mapped_bytes, 8 * P as u64);
    assert_eq!(m.slice(), &now[..]);
    m.slice()[7 * P..].fill(1);
    assert_eq!(read_space(&f, src, 8 * P), now, "a write to application memory changed the space");
    let mine = m.slice().to_vec();
    f.copy_to_flac(src, pattern(4, 8 * P).as_ptr(), 8 * P).unwrap();
    assert_eq!(m.slice(), &mine[..], "a write to the space changed application memory attached from it");

    // Unaligned transfers are copied.
    let mut v = vec![0u8; 3 * P];
    let x = f.zcopy_from_flac(v.as_mut_ptr().wrapping_add(1), src + 2, 2 * P, AttachMode::Cow).unwrap();
    assert_eq!(x.mapped_bytes, 0);
    assert_eq!(&v[1..1 + 2 * P], &read_space(&f, src + 2, 2 * P)[..]);
    f.check_invariants();
}

#[test]
fn space_to_space_attach_and_the_view() {
    let d = tmpdir();
    let f = open(d.path(), 64, 16);
    let a = pattern(5, 4 * P);
    f.copy_to_flac(f.addr(10), a.as_ptr(), 4 * P).unwrap();
    f.attach(f.addr(50), f.addr(10), 4 * P, AttachMode::Cow).unwrap();
    assert_eq!(read_space(&f, f.addr(50), 4 * P), a);
    // Direct access through the view: loads see the data; a store copies the page first.
    f.use_view();
    // SAFETY: the space is mapped on demand; 4 pages from vpn 50 exist.
    let view = unsafe { std::slice::from_raw_parts_mut(f.addr(50) as *mut u8, 4 * P) };
    assert_eq!(view, &a[..]);
    view[P] = 0x42;
    assert_eq!(read_space(&f, f.addr(10), 4 * P), a, "a store through the view changed the attach source");
    assert_eq!(read_space(&f, f.addr(50), 2 * P)[P], 0x42);
    // A hole reads as zeros through the view.
    // SAFETY: as above.
    let hole = unsafe { std::slice::from_raw_parts(f.addr(2000) as *const u8, P) };
    assert!(hole.iter().all(|&b| b == 0));
    f.check_invariants();
}

#[test]
fn flush_commits_data_and_metadata_and_survives_reopen() {
    let d = tmpdir();
    let a = pattern(6, 600 * P);
    {
        let f = open(d.path(), 64, 16);
        f.copy_to_flac(f.addr(512), a.as_ptr(), 600 * P).unwrap();
        assert_eq!(f.dirty_pages(), 600);
        let mut h = f.pflush_handle();
        assert_eq!(f.pflush_add(&mut h, f.addr(512), 600 * P).unwrap(), 600);
        let mut meta = Tx::new();
        meta.put(b"file/a", b"600 pages");
        f.pflush_commit(h, &meta).unwrap();
        assert_eq!(f.dirty_pages(), 0);
        f.check_invariants();
        // Dirty data not committed is lost with the process (a crash).
        f.copy_to_flac(f.addr(5000), a.as_ptr(), P).unwrap();
    }
    let f = open(d.path(), 64, 16);
    assert_eq!(f.pm.kv_get(b"file/a").unwrap(), b"600 pages");
    assert_eq!(read_space(&f, f.addr(512), 600 * P), a);
    assert!(read_space(&f, f.addr(5000), P).iter().all(|&b| b == 0));
    // The 512-page aligned run went to one 2 MiB-aligned run of PM frames.
    let mapped = f.pm.ppt_mapped();
    let first = mapped.iter().find(|&&(v, _)| v == 512).unwrap().1;
    assert_eq!(first % 512, 0);
    f.check_invariants();
}

fn reopened_with_data(d: &std::path::Path, async_load: bool, a: &[u8]) -> std::sync::Arc<Flac> {
    {
        let f = open(d, 64, 16);
        f.copy_to_flac(f.addr(0), a.as_ptr(), a.len()).unwrap();
        let mut h = f.pflush_handle();
        f.pflush_add(&mut h, f.addr(0), a.len()).unwrap();
        f.pflush_commit(h, &Tx::new()).unwrap();
    }
    let mut cfg = config(d, 64, 16);
    cfg.async_load = async_load;
    Flac::init(cfg).unwrap()
}

#[test]
fn misses_load_asynchronously_then_hit() {
    let d = tmpdir();
    let a = pattern(7, 64 * P);
    let f = reopened_with_data(d.path(), true, &a);
    let mut b = f.alloc_buffer(64 * P).unwrap();
    let x = f.zcopy_from_flac(b.as_ptr(), f.addr(0), 64 * P, AttachMode::Cow).unwrap();
    assert_eq!(x.pm_pages, 64, "first read maps the PM frames");
    assert_eq!(b.as_slice(), &a[..]);
    f.wait_loads();
    let s = f.stats();
    assert_eq!(s.loads_async, 64);
    let x = f.zcopy_from_flac(b.as_ptr(), f.addr(0), 64 * P, AttachMode::Cow).unwrap();
    assert_eq!(x.pm_pages, 0, "after the background load the pages are in DRAM");
    assert_eq!(b.as_slice(), &a[..]);
    b.as_mut_slice()[0] ^= 1;
    assert_eq!(read_space(&f, f.addr(0), 64 * P), a);
    f.check_invariants();
}

#[test]
fn misses_load_synchronously_when_configured() {
    let d = tmpdir();
    let a = pattern(8, 32 * P);
    let f = reopened_with_data(d.path(), false, &a);
    let b = f.alloc_buffer(32 * P).unwrap();
    let x = f.zcopy_from_flac(b.as_ptr(), f.addr(0), 32 * P, AttachMode::Cow).unwrap();
    assert_eq!(x.pm_pages, 0, "synchronous load: the destination gets DRAM frames");
    assert_eq!(b.as_slice(), &a[..]);
    assert_eq!(f.stats().loads_sync, 32);
    f.check_invariants();
}

#[test]
fn pfree_and_eviction() {
    let d = tmpdir();
    // 4 MiB of DRAM (1024 frames) for 8 MiB of committed data: reading it all evicts.
    let a = pattern(9, 2048 * P);
    {
        let f = open(d.path(), 64, 16);
        f.copy_to_flac(f.addr(0), a.as_ptr(), 2048 * P).unwrap();
        let mut h = f.pflush_handle();
        f.pflush_add(&mut h, f.addr(0), 2048 * P).unwrap();
        f.pflush_commit(h, &Tx::new()).unwrap();
    }
    let f = open(d.path(), 64, 4);
    let mut out = vec![0u8; 2048 * P];
    f.copy_from_flac(out.as_mut_ptr(), f.addr(0), 2048 * P).unwrap();
    f.wait_loads();
    assert_eq!(out, a);
    f.copy_from_flac(out.as_mut_ptr(), f.addr(0), 2048 * P).unwrap();
    f.wait_loads();
    assert_eq!(out, a);
    assert!(f.stats().evictions > 0, "{:?}", f.stats());
    f.check_invariants();
    let used = f.pm.ppt_mapped().len();
    let mut meta = Tx::new();
    meta.del(b"nothing");
    f.pfree(f.addr(0), 1024 * P, &meta).unwrap();
    assert_eq!(f.pm.ppt_mapped().len(), used - 1024);
    assert!(read_space(&f, f.addr(0), P).iter().all(|&b| b == 0));
    assert_eq!(read_space(&f, f.addr(1024), P), a[1024 * P..1025 * P]);
    f.check_invariants();
}

#[test]
fn lent_pages_attach_back_without_copying() {
    // A page read into application memory and written out unchanged is attached, not copied
    // (needs physical frame numbers from /proc/self/pagemap: root).
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let d = tmpdir();
    let f = open(d.path(), 64, 16);
    let a = pattern(10, 4 * P);
    f.copy_to_flac(f.addr(0), a.as_ptr(), 4 * P).unwrap();
    let m = Anon::new(4 * P);
    f.zcopy_from_flac(m.ptr, f.addr(0), 4 * P, AttachMode::Cow).unwrap();
    // Touch every page (the kernel maps them on access; black_box keeps an optimised build
    // from dropping reads whose sum nobody uses).
    std::hint::black_box(m.slice().iter().map(|&b| b as u64).sum::<u64>());
    m.slice()[P] = 1; // page 1 is now the application's own copy
    let x = f.zcopy_to_flac(f.addr(100), m.ptr, 4 * P).unwrap();
    assert_eq!((x.mapped_bytes, x.copied_bytes), (3 * P as u64, P as u64));
    let mut want = a.clone();
    want[P] = 1;
    assert_eq!(read_space(&f, f.addr(100), 4 * P), want);
    f.check_invariants();
}

#[test]
fn a_frame_is_persisted_once_however_many_pages_share_it() {
    let d = tmpdir();
    let a = pattern(11, 64 * P);
    {
        let f = open(d.path(), 64, 16);
        let mut b = f.alloc_buffer(64 * P).unwrap();
        b.as_mut_slice().copy_from_slice(&a);
        for (k, vpn) in [0u64, 1000, 2000].into_iter().enumerate() {
            f.zcopy_to_flac(f.addr(vpn), b.as_ptr(), 64 * P).unwrap();
            let mut h = f.pflush_handle();
            f.pflush_add(&mut h, f.addr(vpn), 64 * P).unwrap();
            f.pflush_commit(h, &Tx::new()).unwrap();
            assert_eq!(f.stats().flush_copies, 64, "flush {k}: only the first copies the frames to PM");
        }
        let (_, pm) = f.frames_in_use();
        assert_eq!(pm, 64, "three files share 64 PM frames");
        // The application changes its buffer: the pages copied on that write (the faulting
        // one and the copy-on-write window after it) are new frames, persisted anew.
        b.as_mut_slice()[0] ^= 0xFF;
        f.zcopy_to_flac(f.addr(3000), b.as_ptr(), 64 * P).unwrap();
        let mut h = f.pflush_handle();
        f.pflush_add(&mut h, f.addr(3000), 64 * P).unwrap();
        f.pflush_commit(h, &Tx::new()).unwrap();
        assert_eq!(f.stats().flush_copies, 64 + f.config().cow_window_pages as u64);
        f.check_invariants();
    }
    let f = open(d.path(), 64, 16);
    for vpn in [0u64, 1000, 2000] {
        assert_eq!(read_space(&f, f.addr(vpn), 64 * P), a);
    }
    let mut changed = a.clone();
    changed[0] ^= 0xFF;
    assert_eq!(read_space(&f, f.addr(3000), 64 * P), changed);
    f.check_invariants();
}

/// Closing an image releases it even while a child forked in the meantime still holds copies
/// of the descriptor and the mappings: a program that forks workers can reopen its image (and
/// another process can open it) without waiting for those children to exit.
#[test]
fn a_closed_image_is_released_while_a_forked_child_lives() {
    let d = tmpdir();
    let f = open(d.path(), 64, 16);
    // SAFETY: the child only waits to be killed (pause is async-signal-safe).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        loop {
            // SAFETY: see above.
            unsafe { libc::pause() };
        }
    }
    assert!(pid > 0, "fork: {}", std::io::Error::last_os_error());
    drop(f);
    let again = Flac::init(config(d.path(), 64, 16));
    // SAFETY: our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    again.expect("the closed image opens again while the forked child lives");
}

/// A page zeroed while a flush of it is in flight (between `pflush_add` and `pflush_commit`:
/// a file truncated beside the lock-free flush) stays zero after the commit, in memory and
/// once committed again, and does not come back with the flushed data.
#[test]
fn a_page_zeroed_during_its_flush_stays_zero() {
    let d = tmpdir();
    let a = pattern(12, 4 * P);
    {
        let f = open(d.path(), 64, 16);
        f.copy_to_flac(f.addr(0), a.as_ptr(), 4 * P).unwrap();
        let mut h = f.pflush_handle();
        assert_eq!(f.pflush_add(&mut h, f.addr(0), 4 * P).unwrap(), 4);
        // Pages 2 and 3 become holes while the flush holds their frames.
        f.pzero(f.addr(2), 2 * P).unwrap();
        f.pflush_commit(h, &Tx::new()).unwrap();
        assert_eq!(read_space(&f, f.addr(0), 2 * P), a[..2 * P]);
        assert!(read_space(&f, f.addr(2), 2 * P).iter().all(|&b| b == 0), "zeroed pages read as zeros after the commit");
        // The zeroing is itself a change the next flush commits.
        let mut h = f.pflush_handle();
        f.pflush_add(&mut h, f.addr(0), 4 * P).unwrap();
        f.pflush_commit(h, &Tx::new()).unwrap();
        assert!(f.pm.ppt_mapped().iter().all(|&(v, _)| v < 2), "{:?}", f.pm.ppt_mapped());
        f.check_invariants();
    }
    let f = open(d.path(), 64, 16);
    assert_eq!(read_space(&f, f.addr(0), 2 * P), a[..2 * P]);
    assert!(read_space(&f, f.addr(2), 2 * P).iter().all(|&b| b == 0), "zeroed pages read as zeros after a reopen");
    f.check_invariants();
}
