//! The current directory inside the file system (chdir, fchdir, getcwd) and realpath.

use std::ffi::{c_char, c_int};

use libc::size_t;

use super::stat::stat_ours;
use super::{classify, classify_bytes, normalize, strip_slash, Target};
use crate::{fail, guard, ours, real, running, set_errno, state};

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    match classify(libc::AT_FDCWD, path) {
        t @ Target::Real(_) => {
            let r = real!("chdir", unsafe extern "C" fn(*const c_char) -> c_int)(t.host(path));
            if r == 0 {
                if let Some(s) = running() {
                    *s.vcwd.lock().unwrap() = None;
                }
            }
            r
        }
        Target::Ours(p) => guard(-1, || match stat_ours(&p, true) {
            Ok(st) if st.mode & libc::S_IFMT == libc::S_IFDIR => {
                *state().unwrap().vcwd.lock().unwrap() = Some(normalize(strip_slash(&p)));
                0
            }
            Ok(_) => fail(libc::ENOTDIR),
            Err(e) => fail(e),
        }),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    if let Some(o) = ours(fd) {
        if !o.file.is_dir() {
            return fail(libc::ENOTDIR);
        }
        *running().unwrap().vcwd.lock().unwrap() = Some(o.path.clone());
        return 0;
    }
    let r = real!("fchdir", unsafe extern "C" fn(c_int) -> c_int)(fd);
    if r == 0 {
        if let Some(s) = running() {
            *s.vcwd.lock().unwrap() = None;
        }
    }
    r
}

unsafe fn virtual_cwd() -> Option<Vec<u8>> {
    let s = running()?;
    let v = s.vcwd.lock().unwrap().clone()?;
    Some(s.host_path(&v))
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    let Some(cwd) = virtual_cwd() else {
        return real!("getcwd", unsafe extern "C" fn(*mut c_char, size_t) -> *mut c_char)(buf, size);
    };
    let need = cwd.len() + 1;
    if buf.is_null() {
        let n = if size == 0 { need } else { size };
        if n < need {
            set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        let p = libc::malloc(n) as *mut c_char;
        if p.is_null() {
            set_errno(libc::ENOMEM);
            return p;
        }
        std::ptr::copy_nonoverlapping(cwd.as_ptr(), p as *mut u8, cwd.len());
        *p.add(cwd.len()) = 0;
        return p;
    }
    if size < need {
        set_errno(libc::ERANGE);
        return std::ptr::null_mut();
    }
    std::ptr::copy_nonoverlapping(cwd.as_ptr(), buf as *mut u8, cwd.len());
    *buf.add(cwd.len()) = 0;
    buf
}
#[no_mangle]
pub unsafe extern "C" fn __getcwd_chk(buf: *mut c_char, size: size_t, _buflen: size_t) -> *mut c_char {
    getcwd(buf, size)
}
#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    if virtual_cwd().is_some() {
        return getcwd(std::ptr::null_mut(), 0);
    }
    real!("get_current_dir_name", unsafe extern "C" fn() -> *mut c_char)()
}

/// realpath for a FlacFS path: follow symlinks component by component.
unsafe fn realpath_ours(p: &[u8]) -> Result<Vec<u8>, c_int> {
    let s = state().ok_or(libc::EIO)?;
    let mut todo: Vec<Vec<u8>> = p.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev().map(|c| c.to_vec()).collect();
    let mut done: Vec<Vec<u8>> = Vec::new();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        if c == b"." {
            continue;
        }
        if c == b".." {
            done.pop();
            continue;
        }
        done.push(c);
        let cur = {
            let mut v = Vec::new();
            for d in &done {
                v.push(b'/');
                v.extend_from_slice(d);
            }
            v
        };
        let st = s.fs.stat(&cur, false).map_err(|e| e.errno())?;
        if st.mode & libc::S_IFMT == libc::S_IFLNK {
            links += 1;
            if links > 40 {
                return Err(libc::ELOOP);
            }
            let t = s.fs.readlink(&cur).map_err(|e| e.errno())?;
            done.pop();
            if t.first() == Some(&b'/') {
                match classify_bytes(libc::AT_FDCWD, &t, &s.mount) {
                    Target::Ours(inner) => {
                        done.clear();
                        for x in inner.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev() {
                            todo.push(x.to_vec());
                        }
                    }
                    Target::Real(_) => return Err(libc::EXDEV),
                }
            } else {
                for x in t.split(|&c| c == b'/').filter(|c| !c.is_empty()).rev() {
                    todo.push(x.to_vec());
                }
            }
        }
    }
    let mut inner = Vec::new();
    for d in &done {
        inner.push(b'/');
        inner.extend_from_slice(d);
    }
    if inner.is_empty() {
        inner.push(b'/');
    }
    Ok(s.host_path(&inner))
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    match classify(libc::AT_FDCWD, path) {
        Target::Real(_) => real!("realpath", unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char)(path, resolved),
        Target::Ours(p) => guard(std::ptr::null_mut(), || match realpath_ours(&p) {
            Ok(out) => {
                if out.len() >= libc::PATH_MAX as usize {
                    set_errno(libc::ENAMETOOLONG);
                    return std::ptr::null_mut();
                }
                let dst = if resolved.is_null() { libc::malloc(out.len() + 1) as *mut c_char } else { resolved };
                if dst.is_null() {
                    set_errno(libc::ENOMEM);
                    return dst;
                }
                std::ptr::copy_nonoverlapping(out.as_ptr(), dst as *mut u8, out.len());
                *dst.add(out.len()) = 0;
                dst
            }
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        }),
    }
}
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(path: *const c_char, resolved: *mut c_char, _len: size_t) -> *mut c_char {
    realpath(path, resolved)
}
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    realpath(path, std::ptr::null_mut())
}
