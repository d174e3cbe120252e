//! The library file systems (FlacFS and both baselines) behave as POSIX file systems: the
//! same checks run against every engine, plus remounting and FlacFS's zero-copy paths.

mod common;

use std::sync::Arc;

use common::*;
use ssdlab_flac::fs::engine::EngineKind;
use ssdlab_flac::fs::{Fs, FsConfig, Resolved, SetAttr, Ts};
use ssdlab_flac::FlacError;

const RW: i32 = libc::O_RDWR;
const CREAT: i32 = libc::O_RDWR | libc::O_CREAT;

fn mount_with(dir: &std::path::Path, engine: EngineKind, flush_interval_ms: u64) -> Arc<Fs> {
    // The background flusher may hold the last reference for a moment after a test drops
    // its own: a remount waits for the image instead of failing.
    let mut flac = config(dir, 96, 16);
    flac.lock_wait_ms = 10_000;
    Fs::mount(FsConfig { engine, flac, flush_interval_ms, mount: "/mnt".into(), ..FsConfig::default() }).unwrap()
}

fn mount(dir: &std::path::Path, engine: EngineKind) -> Arc<Fs> {
    mount_with(dir, engine, 20)
}

fn errno<T: std::fmt::Debug>(r: ssdlab_flac::Result<T>) -> i32 {
    match r {
        Err(FlacError::Posix(e, _)) => e,
        other => panic!("expected a POSIX error, got {other:?}"),
    }
}

fn read_all(fs: &Fs, path: &[u8]) -> Vec<u8> {
    let f = fs.open(path, libc::O_RDONLY, 0).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 7000];
    loop {
        let n = fs.read(&f, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    fs.close(&f).unwrap();
    out
}

fn posix_suite(engine: EngineKind) {
    let d = tmpdir();
    let fs = mount(d.path(), engine);
    // Create, write in odd pieces, read back.
    let data = pattern(1, 300_000);
    let f = fs.open(b"/a", CREAT, 0o644).unwrap();
    let mut at = 0;
    for chunk in [1, 4095, 4096, 10_000, 123_456] {
        fs.write(&f, &data[at..at + chunk]).unwrap();
        at += chunk;
    }
    fs.write(&f, &data[at..]).unwrap();
    assert_eq!(fs.fstat(&f).size, data.len() as u64);
    fs.close(&f).unwrap();
    assert_eq!(read_all(&fs, b"/a"), data);
    // pwrite past the end leaves a hole of zeros; truncate shrinks and extends with zeros.
    let f = fs.open(b"/a", RW, 0).unwrap();
    fs.pwrite(&f, b"tail", 400_000).unwrap();
    let mut b = vec![1u8; 100];
    fs.pread(&f, &mut b, 350_000).unwrap();
    assert!(b.iter().all(|&x| x == 0), "a hole reads as zeros");
    fs.ftruncate(&f, 5000).unwrap();
    fs.ftruncate(&f, 20_000).unwrap();
    let mut b = vec![1u8; 20_000];
    assert_eq!(fs.pread(&f, &mut b, 0).unwrap(), 20_000);
    assert_eq!(&b[..5000], &data[..5000]);
    assert!(b[5000..].iter().all(|&x| x == 0), "bytes past a truncation read as zeros after extending");
    // Append mode.
    fs.close(&f).unwrap();
    let f = fs.open(b"/a", libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
    fs.write(&f, b"APPENDED").unwrap();
    fs.close(&f).unwrap();
    let all = read_all(&fs, b"/a");
    assert_eq!(all.len(), 20_008);
    assert_eq!(&all[20_000..], b"APPENDED");
    // Seeking.
    let f = fs.open(b"/a", libc::O_RDONLY, 0).unwrap();
    assert_eq!(fs.seek(&f, -8, libc::SEEK_END).unwrap(), 20_000);
    let mut b = [0u8; 8];
    fs.read(&f, &mut b).unwrap();
    assert_eq!(&b, b"APPENDED");
    assert_eq!(errno(fs.seek(&f, -1, libc::SEEK_SET)), libc::EINVAL);
    assert_eq!(errno(fs.write(&f, b"x")), libc::EBADF);
    fs.close(&f).unwrap();

    // Directories.
    fs.mkdir(b"/d", 0o755).unwrap();
    fs.mkdir(b"/d/e", 0o700).unwrap();
    assert_eq!(errno(fs.mkdir(b"/d", 0o755)), libc::EEXIST);
    assert_eq!(errno(fs.open(b"/d/nothing", RW, 0)), libc::ENOENT);
    assert_eq!(errno(fs.open(b"/a/x", CREAT, 0o644)), libc::ENOTDIR);
    assert_eq!(errno(fs.open(b"/d", RW, 0)), libc::EISDIR);
    for name in ["z", "b", "m"] {
        let f = fs.open(format!("/d/{name}").as_bytes(), CREAT, 0o600).unwrap();
        fs.close(&f).unwrap();
    }
    let dir = fs.open(b"/d", libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    let names: Vec<_> = fs.readdir(&dir).unwrap().into_iter().map(|e| String::from_utf8(e.name).unwrap()).collect();
    assert_eq!(names, ["b", "e", "m", "z"]);
    fs.close(&dir).unwrap();
    assert_eq!(fs.stat(b"/d", true).unwrap().nlink, 3);
    assert_eq!(errno(fs.remove(b"/d", true)), libc::ENOTEMPTY);
    assert_eq!(errno(fs.remove(b"/d/e", false)), libc::EISDIR);
    fs.remove(b"/d/e", true).unwrap();
    assert_eq!(fs.stat(b"/d", true).unwrap().nlink, 2);

    // Rename: files, replacing, no-replace, directories, not into itself.
    fs.rename(b"/d/z", b"/d/y", false).unwrap();
    assert_eq!(errno(fs.stat(b"/d/z", true)), libc::ENOENT);
    fs.rename(b"/d/y", b"/d/b", false).unwrap();
    assert_eq!(errno(fs.rename(b"/d/b", b"/d/m", true)), libc::EEXIST);
    fs.mkdir(b"/d/sub", 0o755).unwrap();
    assert_eq!(errno(fs.rename(b"/d", b"/d/sub/d2", false)), libc::EINVAL);
    fs.rename(b"/d/sub", b"/sub2", false).unwrap();
    assert!(matches!(fs.resolve(b"/sub2/..", true).unwrap(), Resolved::Found { ino: 1, .. }));

    // Hard and symbolic links.
    fs.link(b"/a", b"/d/a2").unwrap();
    assert_eq!(fs.stat(b"/a", true).unwrap().nlink, 2);
    fs.remove(b"/a", false).unwrap();
    assert_eq!(read_all(&fs, b"/d/a2").len(), 20_008);
    fs.symlink(b"d/a2", b"/ln").unwrap();
    fs.symlink(b"/mnt/d", b"/abs").unwrap();
    fs.symlink(b"/etc", b"/out").unwrap();
    assert_eq!(fs.readlink(b"/ln").unwrap(), b"d/a2");
    assert_eq!(read_all(&fs, b"/ln").len(), 20_008);
    assert_eq!(read_all(&fs, b"/abs/a2").len(), 20_008, "an absolute link under the mount point stays inside");
    assert!(matches!(fs.resolve(b"/out/passwd", true).unwrap(), Resolved::Outside(p) if p == b"/etc/passwd"));
    assert_eq!(fs.stat(b"/ln", false).unwrap().mode & libc::S_IFMT, libc::S_IFLNK);
    fs.symlink(b"loop", b"/loop").unwrap();
    assert_eq!(errno(fs.stat(b"/loop", true)), libc::ELOOP);

    // Attributes.
    let t = Ts { sec: 1_000_000_000, nsec: 5 };
    fs.setattr_path(b"/d/m", true, &SetAttr { mode: Some(0o640), mtime: Some(t), ..SetAttr::default() }).unwrap();
    let st = fs.stat(b"/d/m", true).unwrap();
    assert_eq!((st.mode & 0o7777, st.mtime), (0o640, t));

    // Unlinked while open: readable until closed, then gone.
    let f = fs.open(b"/d/a2", libc::O_RDONLY, 0).unwrap();
    fs.remove(b"/d/a2", false).unwrap();
    let mut b = vec![0u8; 8];
    fs.pread(&f, &mut b, 20_000).unwrap();
    assert_eq!(&b, b"APPENDED");
    fs.close(&f).unwrap();
    fs.sync().unwrap();
    drop(fs);

    // Everything is there after a remount.
    let fs = mount(d.path(), engine);
    let dir = fs.open(b"/d", libc::O_RDONLY, 0).unwrap();
    let names: Vec<_> = fs.readdir(&dir).unwrap().into_iter().map(|e| String::from_utf8(e.name).unwrap()).collect();
    assert_eq!(names, ["b", "m"]);
    assert_eq!(fs.stat(b"/d/m", true).unwrap().mtime, t);
    assert_eq!(errno(fs.stat(b"/ln", true)), libc::ENOENT, "the link's target was removed");
    assert!(fs.stat(b"/sub2", true).is_ok());
    if let Some(f) = fs.flac() {
        f.check_invariants();
    }
    fs.pm().check_invariants();
}

#[test]
fn posix_flac() {
    posix_suite(EngineKind::Flac);
}

#[test]
fn posix_pagecache() {
    posix_suite(EngineKind::Pagecache);
}

#[test]
fn posix_dax() {
    posix_suite(EngineKind::Dax);
}

fn growth_and_crash(engine: EngineKind) {
    let d = tmpdir();
    let big = pattern(2, 9 << 20);
    {
        // No background flusher: nothing commits behind the test's back.
        let fs = mount_with(d.path(), engine, 0);
        // Grows through many ranges (1 page -> 4096 pages).
        let f = fs.open(b"/big", CREAT, 0o644).unwrap();
        for c in big.chunks(100_000) {
            fs.write(&f, c).unwrap();
        }
        fs.close(&f).unwrap();
        assert_eq!(read_all(&fs, b"/big"), big);
        fs.sync().unwrap();
        // Written after the last commit: lost with the process (dropped without unmount).
        let f = fs.open(b"/late", CREAT, 0o644).unwrap();
        fs.write(&f, b"never committed").unwrap();
        std::mem::forget(f);
        // A crash: the file system is never unmounted (leaked, nothing runs in it any more).
        let _ = Arc::into_raw(fs);
    }
    // The leaked instance still holds the image's lock, as a dead process would until the
    // kernel released it: mount a copy of the image (taken while nothing writes it).
    let copy = tmpdir();
    std::fs::copy(d.path().join("pm.img"), copy.path().join("pm.img")).unwrap();
    let fs = mount(copy.path(), engine);
    assert_eq!(read_all(&fs, b"/big"), big);
    assert_eq!(errno(fs.stat(b"/late", true)), libc::ENOENT);
    if let Some(f) = fs.flac() {
        f.check_invariants();
    }
    fs.pm().check_invariants();
}

#[test]
fn growth_and_crash_flac() {
    growth_and_crash(EngineKind::Flac);
}

#[test]
fn growth_and_crash_pagecache() {
    growth_and_crash(EngineKind::Pagecache);
}

#[test]
fn growth_and_crash_dax() {
    growth_and_crash(EngineKind::Dax);
}

#[test]
fn flacfs_attaches_aligned_transfers_and_shares_pages_between_files() {
    let d = tmpdir();
    let fs = mount(d.path(), EngineKind::Flac);
    let flac = fs.flac().unwrap().clone();
    let mut buf = flac.alloc_buffer(1 << 20).unwrap();
    buf.as_mut_slice().copy_from_slice(&pattern(3, 1 << 20));
    let f = fs.open(b"/x", CREAT, 0o644).unwrap();
    // SAFETY: the buffer is readable for its length.
    let (_, x) = unsafe { fs.pwrite_raw(&f, buf.as_ptr(), 1 << 20, Some(0)).unwrap() };
    assert_eq!((x.mapped_bytes, x.copied_bytes), (1 << 20, 0));
    // The same buffer written to a second file: both share the frames.
    let g = fs.open(b"/y", CREAT, 0o644).unwrap();
    // SAFETY: as above.
    unsafe { fs.pwrite_raw(&g, buf.as_ptr(), 1 << 20, Some(0)).unwrap() };
    let (dram_used, _) = flac.frames_in_use();
    assert!(dram_used <= 256 + 8, "two files and the buffer share 256 frames, {dram_used} in use");
    // Reading back into another buffer attaches too; writing the first file leaves it alone.
    let out = flac.alloc_buffer(1 << 20).unwrap();
    // SAFETY: out is writable.
    let (n, x) = unsafe { fs.pread_raw(&g, out.as_ptr(), 1 << 20, 0).unwrap() };
    assert_eq!((n, x.mapped_bytes), (1 << 20, 1 << 20));
    fs.pwrite(&f, b"changed", 0).unwrap();
    assert_eq!(&out.as_slice()[..7], &pattern(3, 7)[..]);
    buf.as_mut_slice()[0] = 0;
    assert_eq!(read_all(&fs, b"/y")[0], pattern(3, 1)[0]);
    // Small or unaligned transfers copy.
    let mut small = [0u8; 100];
    // SAFETY: small is writable.
    let (_, x) = unsafe { fs.pread_raw(&g, small.as_mut_ptr(), 100, 5).unwrap() };
    assert_eq!(x.mapped_bytes, 0);
    // The view: a file's pages are directly addressable.
    let (addr, size) = fs.file_view(&g).unwrap();
    // SAFETY: the view is mapped on demand and the file has `size` bytes.
    let v = unsafe { std::slice::from_raw_parts(addr as *const u8, size as usize) };
    assert_eq!(v, &pattern(3, 1 << 20)[..]);
    fs.close(&f).unwrap();
    fs.close(&g).unwrap();
    drop(out);
    drop(buf);
    fs.sync().unwrap();
    flac.check_invariants();
}

#[test]
fn concurrent_writers_with_the_background_flusher() {
    for engine in [EngineKind::Flac, EngineKind::Pagecache, EngineKind::Dax] {
        let d = tmpdir();
        let fs = mount(d.path(), engine);
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let fs = fs.clone();
                s.spawn(move || {
                    let name = format!("/t{t}");
                    let f = fs.open(name.as_bytes(), CREAT, 0o644).unwrap();
                    let data = pattern(t, 2 << 20);
                    for round in 0..6 {
                        for c in data.chunks(64 << 10) {
                            fs.write(&f, c).unwrap();
                        }
                        fs.seek(&f, 0, libc::SEEK_SET).unwrap();
                        if round % 2 == 1 {
                            fs.fsync(&f).unwrap();
                        }
                    }
                    fs.close(&f).unwrap();
                });
            }
        });
        for t in 0..4u8 {
            assert_eq!(read_all(&fs, format!("/t{t}").as_bytes()), pattern(t, 2 << 20), "{engine:?} /t{t}");
        }
        fs.sync().unwrap();
        if let Some(f) = fs.flac() {
            f.check_invariants();
        }
        fs.pm().check_invariants();
    }
}

/// Files much larger than the DRAM cache, written in 2 MiB pieces, in one write of four times
/// the cache, and overwritten at random: every write succeeds (the writers commit dirty pages
/// and evict clean ones) and every byte reads back, also after a remount. A file that grows
/// through a range larger than the cache used to leave its moved pages dirty and the next
/// write without frames ("DRAM cache full").
#[test]
fn writes_larger_than_the_dram_cache_succeed_on_every_engine() {
    for engine in [EngineKind::Flac, EngineKind::Pagecache] {
        let d = tmpdir();
        let mut flac = config(d.path(), 160, 4);
        flac.lock_wait_ms = 10_000;
        let fs =
            Fs::mount(FsConfig { engine, flac: flac.clone(), flush_interval_ms: 0, mount: "/mnt".into(), ..FsConfig::default() }).unwrap();
        let seq = pattern(3, 24 << 20);
        let f = fs.open(b"/seq", CREAT, 0o644).unwrap();
        for c in seq.chunks(2 << 20) {
            fs.write(&f, c).unwrap();
        }
        fs.close(&f).unwrap();
        let one = pattern(4, 16 << 20);
        let f = fs.open(b"/one", CREAT, 0o644).unwrap();
        assert_eq!(fs.write(&f, &one).unwrap(), one.len());
        // Random page-aligned and unaligned overwrites across the whole file.
        let mut want = one.clone();
        let mut x: u64 = 0x9e37_79b9;
        for i in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 1 + (x % (300 << 10)) as usize;
            let off = ((x >> 20) as usize) % (want.len() - len);
            let data = pattern(i as u8, len);
            fs.pwrite(&f, &data, off as u64).unwrap();
            want[off..off + len].copy_from_slice(&data);
        }
        fs.close(&f).unwrap();
        assert_eq!(read_all(&fs, b"/seq"), seq, "{engine:?}");
        assert_eq!(read_all(&fs, b"/one"), want, "{engine:?}");
        fs.unmount().unwrap();
        drop(fs);
        let fs = Fs::mount(FsConfig { engine, flac, flush_interval_ms: 0, mount: "/mnt".into(), ..FsConfig::default() }).unwrap();
        assert_eq!(read_all(&fs, b"/seq"), seq, "{engine:?} after remount");
        assert_eq!(read_all(&fs, b"/one"), want, "{engine:?} after remount");
        if let Some(f) = fs.flac() {
            f.check_invariants();
        }
        fs.unmount().unwrap();
    }
}

/// A flush stages a baseline's new frames under the file's lock and commits them later
/// without it. Until that commit the page table still maps the page's old frame (or none),
/// so everything that looks a page up in between (a read after the clean page was evicted,
/// a file moving to a larger range, a write in place) must see the staged frame, or the
/// flushed data is lost (seen as `tar` extracting files that differ from their source when
/// the background flusher ran beside a writer on the page-cache baseline).
#[test]
fn pages_flushed_but_not_yet_committed_keep_their_data() {
    use ssdlab_flac::fs::dax::DaxEngine;
    use ssdlab_flac::fs::engine::{Engine, Staged};
    use ssdlab_flac::fs::pagecache::PageCacheEngine;
    use ssdlab_flac::pm::Pm;
    use ssdlab_flac::Tx;

    const PAGE: usize = 4096;
    let d = tmpdir();
    let cfg = config(d.path(), 64, 4);
    let pm = Arc::new(Pm::open(&cfg.pm_path, cfg.format.as_ref(), cfg.cost.clone(), 0).unwrap());
    let engines: Vec<(&str, Box<dyn Engine>)> = vec![
        ("pagecache", Box::new(PageCacheEngine::new(pm.clone(), 2 << 20, false).unwrap())),
        ("dax", Box::new(DaxEngine::new(pm.clone()))),
    ];
    for (i, (name, e)) in engines.into_iter().enumerate() {
        let base = 1000 * (i as u64 + 1);
        let (a, b, c) = (pattern(1, 2 * PAGE), pattern(2, 2 * PAGE), pattern(3, PAGE));
        let read = |vpn: u64, n: usize| {
            let mut out = vec![0u8; n];
            // SAFETY: out is writable for n bytes.
            unsafe { e.read(vpn, 0, out.as_mut_ptr(), n).unwrap() };
            out
        };
        let staged = |vpn: u64| {
            let mut st = Staged::default();
            e.stage(&mut st, vpn, 2).unwrap();
            st
        };
        // Flush and commit the two pages at vpn, drop the clean copies, and read them back
        // against the data of the first page written last over `under`.
        let settled = |vpn: u64, under: &[u8]| {
            e.commit(staged(vpn), &Tx::new()).unwrap();
            e.drop_caches().unwrap();
            let mut want = under.to_vec();
            want[..PAGE].copy_from_slice(&c);
            (read(vpn, want.len()), want)
        };
        // Two pages written and flushed, not yet committed.
        // SAFETY: the sources are readable for their lengths.
        unsafe { e.write(base, 0, a.as_ptr(), a.len()).unwrap() };
        let st = staged(base);
        // The clean cached copies go (memory pressure) and the pages are read back.
        e.drop_caches().unwrap();
        assert_eq!(read(base, a.len()), a, "{name}: read between flush and commit");
        // The file moves to a larger range, and is written again there, in place.
        e.relocate(base + 100, base, 2).unwrap();
        assert_eq!(read(base + 100, a.len()), a, "{name}: moved between flush and commit");
        unsafe { e.write(base + 100, 0, c.as_ptr(), c.len()).unwrap() };
        e.commit(st, &Tx::new()).unwrap();
        let (got, want) = settled(base + 100, &a);
        assert_eq!(got, want, "{name}: after both commits");
        // A write into a page whose flush is staged lands where the commit puts the page.
        unsafe { e.write(base + 200, 0, b.as_ptr(), b.len()).unwrap() };
        let st = staged(base + 200);
        unsafe { e.write(base + 200, 0, c.as_ptr(), c.len()).unwrap() };
        e.commit(st, &Tx::new()).unwrap();
        let (got, want) = settled(base + 200, &b);
        assert_eq!(got, want, "{name}: written while its flush was staged");
    }
}

/// Bytes a truncate cut off stay gone: a file grown back over them reads zeros there, not
/// the data it held before, with the cut-off pages evicted in between and after a remount
/// (every engine); a sync commits the zeroing (it leaves no dirty pages behind).
#[test]
fn a_truncated_tail_reads_zeros_when_the_file_grows_again() {
    const PAGE: usize = 4096;
    for engine in [EngineKind::Flac, EngineKind::Pagecache, EngineKind::Dax] {
        let d = tmpdir();
        let data = pattern(11, 8 * PAGE);
        let mut want = data[..PAGE + 100].to_vec();
        want.resize(data.len(), 0);
        let check = |fs: &Fs, when: &str| {
            let got = read_all(fs, b"/t");
            assert_eq!(got.len(), want.len(), "{engine:?}, {when}");
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            assert_eq!(first, None, "{engine:?}, {when}: the grown file differs from byte {first:?} on");
        };
        {
            let fs = mount(d.path(), engine);
            let f = fs.open(b"/t", CREAT, 0o644).unwrap();
            fs.pwrite(&f, &data, 0).unwrap();
            fs.sync().unwrap();
            fs.ftruncate(&f, PAGE as u64 + 100).unwrap();
            fs.sync().unwrap();
            // The zeroing is committed with the truncate: nothing is left dirty.
            assert_eq!(fs.stats()["data"]["dirty_pages"].as_u64().unwrap_or(0), 0, "{engine:?}");
            fs.drop_caches().unwrap();
            fs.ftruncate(&f, data.len() as u64).unwrap();
            fs.close(&f).unwrap();
            check(&fs, "in the same mount");
            let f = fs.open(b"/t", RW, 0).unwrap();
            fs.ftruncate(&f, PAGE as u64 + 100).unwrap();
            fs.close(&f).unwrap();
            fs.unmount().unwrap();
        }
        let fs = mount(d.path(), engine);
        let f = fs.open(b"/t", RW, 0).unwrap();
        fs.ftruncate(&f, data.len() as u64).unwrap();
        fs.close(&f).unwrap();
        check(&fs, "after a remount");
        fs.unmount().unwrap();
    }
}
