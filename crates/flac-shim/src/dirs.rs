//! Directory streams (opendir/readdir/...): a FlacFS directory stream is the shim's own
//! object, told apart from glibc's by its address.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_long};
use std::sync::Mutex;

use crate::paths::{classify, open_ours, Target};
use crate::{guard, ours, real, running, set_errno};

struct Stream {
    fd: c_int,
    entries: Vec<(Vec<u8>, u64, u8)>,
    pos: usize,
    ent: libc::dirent64,
}

static STREAMS: Mutex<Option<HashMap<usize, Box<Stream>>>> = Mutex::new(None);

fn load(fd: c_int) -> Option<Vec<(Vec<u8>, u64, u8)>> {
    let o = ours(fd)?;
    let s = running()?;
    let entries = match s.fs.readdir(&o.file) {
        Ok(e) => e,
        Err(e) => {
            set_errno(e.errno());
            return None;
        }
    };
    let ino = o.file.ino();
    let mut v = vec![(b".".to_vec(), ino, libc::DT_DIR), (b"..".to_vec(), s.fs.parent_of(ino), libc::DT_DIR)];
    v.extend(entries.into_iter().map(|e| (e.name, e.ino, e.kind)));
    Some(v)
}

unsafe fn stream_for(fd: c_int) -> *mut libc::DIR {
    let Some(entries) = load(fd) else { return std::ptr::null_mut() };
    let mut b = Box::new(Stream { fd, entries, pos: 0, ent: std::mem::zeroed() });
    let p = &mut *b as *mut Stream as usize;
    STREAMS.lock().unwrap().get_or_insert_with(HashMap::new).insert(p, b);
    p as *mut libc::DIR
}

fn is_ours(d: *mut libc::DIR) -> bool {
    STREAMS.lock().unwrap().as_ref().is_some_and(|m| m.contains_key(&(d as usize)))
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    match classify(libc::AT_FDCWD, path) {
        t @ Target::Real(_) => real!("opendir", unsafe extern "C" fn(*const c_char) -> *mut libc::DIR)(t.host(path)),
        Target::Ours(p) => guard(std::ptr::null_mut(), || {
            let fd = open_ours(&p, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0);
            if fd < 0 {
                return std::ptr::null_mut();
            }
            let d = stream_for(fd);
            if d.is_null() {
                crate::io::close(fd);
            }
            d
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut libc::DIR {
    match ours(fd) {
        None => real!("fdopendir", unsafe extern "C" fn(c_int) -> *mut libc::DIR)(fd),
        Some(o) => guard(std::ptr::null_mut(), || {
            if !o.file.is_dir() {
                set_errno(libc::ENOTDIR);
                return std::ptr::null_mut();
            }
            stream_for(fd)
        }),
    }
}

unsafe fn next(d: *mut libc::DIR) -> *mut libc::dirent64 {
    let mut g = STREAMS.lock().unwrap();
    let Some(s) = g.as_mut().and_then(|m| m.get_mut(&(d as usize))) else { return std::ptr::null_mut() };
    let Some((name, ino, kind)) = s.entries.get(s.pos) else { return std::ptr::null_mut() };
    let e = &mut s.ent;
    e.d_ino = *ino;
    e.d_off = (s.pos + 1) as i64;
    e.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    e.d_type = *kind;
    let n = name.len().min(255);
    for (i, &b) in name[..n].iter().enumerate() {
        e.d_name[i] = b as c_char;
    }
    e.d_name[n] = 0;
    s.pos += 1;
    e as *mut libc::dirent64
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut libc::DIR) -> *mut libc::dirent {
    if !is_ours(d) {
        return real!("readdir", unsafe extern "C" fn(*mut libc::DIR) -> *mut libc::dirent)(d);
    }
    // dirent and dirent64 have the same layout on 64-bit Linux.
    next(d) as *mut libc::dirent
}
#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut libc::DIR) -> *mut libc::dirent64 {
    if !is_ours(d) {
        return real!("readdir64", unsafe extern "C" fn(*mut libc::DIR) -> *mut libc::dirent64)(d);
    }
    next(d)
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut libc::DIR) -> c_int {
    let s = STREAMS.lock().unwrap().as_mut().and_then(|m| m.remove(&(d as usize)));
    match s {
        None => real!("closedir", unsafe extern "C" fn(*mut libc::DIR) -> c_int)(d),
        Some(s) => crate::io::close(s.fd),
    }
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut libc::DIR) -> c_int {
    let g = STREAMS.lock().unwrap();
    match g.as_ref().and_then(|m| m.get(&(d as usize))) {
        Some(s) => s.fd,
        None => {
            drop(g);
            real!("dirfd", unsafe extern "C" fn(*mut libc::DIR) -> c_int)(d)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut libc::DIR) {
    let mut g = STREAMS.lock().unwrap();
    match g.as_mut().and_then(|m| m.get_mut(&(d as usize))) {
        Some(s) => {
            if let Some(e) = load(s.fd) {
                s.entries = e;
            }
            s.pos = 0;
        }
        None => {
            drop(g);
            real!("rewinddir", unsafe extern "C" fn(*mut libc::DIR))(d)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut libc::DIR) -> c_long {
    let g = STREAMS.lock().unwrap();
    match g.as_ref().and_then(|m| m.get(&(d as usize))) {
        Some(s) => s.pos as c_long,
        None => {
            drop(g);
            real!("telldir", unsafe extern "C" fn(*mut libc::DIR) -> c_long)(d)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut libc::DIR, pos: c_long) {
    let mut g = STREAMS.lock().unwrap();
    match g.as_mut().and_then(|m| m.get_mut(&(d as usize))) {
        Some(s) => s.pos = (pos.max(0) as usize).min(s.entries.len()),
        None => {
            drop(g);
            real!("seekdir", unsafe extern "C" fn(*mut libc::DIR, c_long))(d, pos)
        }
    }
}
