//! The C API of the emulated SPI NOR chip (`include/ssdlab_spi.h`): `extern "C"` wrappers over
//! [`ssdlab_spi::Flash`] so C firmware drivers can be unit-tested against it. Failures return
//! NULL or a negative `SSDLAB_SPI_ERR_*` code with a message for `ssdlab_spi_last_error()`;
//! no panic crosses the boundary.

#![allow(clippy::missing_safety_doc)]

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use ssdlab_spi::parts::NAMES;
use ssdlab_spi::{CutAt, Flash, Options, TimingMode, WearOut};

pub const SSDLAB_SPI_CS_FRAME: c_int = 0;
pub const SSDLAB_SPI_CS_HOLD: c_int = 1;
pub const SSDLAB_SPI_CS_RELEASE: c_int = 2;

pub const SSDLAB_SPI_OK: c_int = 0;
pub const SSDLAB_SPI_ERR_ARG: c_int = -1;
pub const SSDLAB_SPI_ERR_POWER: c_int = -2;
pub const SSDLAB_SPI_ERR_IO: c_int = -3;
pub const SSDLAB_SPI_ERR_INTERNAL: c_int = -4;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: String) {
    LAST.with(|l| *l.borrow_mut() = CString::new(msg.replace('\0', " ")).unwrap_or_default());
}

/// Records `msg` and returns `code`.
fn fail(code: c_int, what: &str, msg: &str) -> c_int {
    set_error(format!("{what}: {msg}"));
    code
}

#[no_mangle]
pub extern "C" fn ssdlab_spi_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// `ssdlab_spi_options` of the header.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SpiOptions {
    pub timing: *const c_char,
    pub power_seed: u64,
    pub wear_out: *const c_char,
    pub endurance_cycles: u32,
    pub clock_hz: u32,
}

/// The `ssdlab_spi` handle: a chip and the state of the transaction C holds open.
pub struct SpiHandle {
    flash: Flash,
    /// CS# is low between calls (SSDLAB_SPI_CS_HOLD).
    open: bool,
    /// Power cuts counted before the open transaction began, and whether it began unpowered.
    cuts_at_begin: u64,
    dead_at_begin: bool,
    /// A call panicked inside the emulator: the chip's state is unknown.
    poisoned: bool,
}

fn panic_text(p: &(dyn Any + Send)) -> String {
    match (p.downcast_ref::<&str>(), p.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "panic".into(),
    }
}

/// Runs `body` on the handle behind `f`, or fails with a code (NULL handle: ERR_ARG; a panic,
/// now or before: ERR_INTERNAL).
unsafe fn call<T>(f: *mut SpiHandle, what: &str, body: impl FnOnce(&mut SpiHandle) -> T) -> Result<T, c_int> {
    if f.is_null() {
        return Err(fail(SSDLAB_SPI_ERR_ARG, what, "handle is NULL"));
    }
    if (*f).poisoned {
        return Err(fail(SSDLAB_SPI_ERR_INTERNAL, what, "an earlier call failed inside the emulator; close the handle"));
    }
    match catch_unwind(AssertUnwindSafe(|| body(&mut *f))) {
        Ok(v) => Ok(v),
        Err(p) => {
            (*f).poisoned = true;
            Err(fail(SSDLAB_SPI_ERR_INTERNAL, what, &format!("internal error: {}", panic_text(&*p))))
        }
    }
}

/// [`call`] for the functions returning a status code.
unsafe fn status(f: *mut SpiHandle, what: &str, body: impl FnOnce(&mut SpiHandle) -> c_int) -> c_int {
    call(f, what, body).unwrap_or_else(|code| code)
}

unsafe fn str_arg(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
}

unsafe fn options(o: *const SpiOptions) -> Result<Options, String> {
    let mut opts = Options::default();
    if o.is_null() {
        return Ok(opts);
    }
    let o = &*o;
    if let Some(t) = str_arg(o.timing) {
        opts.timing = TimingMode::parse(&t).map_err(|e| e.to_string())?;
    }
    if let Some(w) = str_arg(o.wear_out) {
        opts.wear_out = WearOut::parse(&w).map_err(|e| e.to_string())?;
    }
    opts.power_seed = o.power_seed;
    opts.endurance_cycles = (o.endurance_cycles > 0).then_some(o.endurance_cycles);
    if o.clock_hz > 0 {
        opts.clock_hz = o.clock_hz;
    }
    Ok(opts)
}

unsafe fn open(what: &str, chip: *const c_char, image: *const c_char, opts: *const SpiOptions) -> *mut SpiHandle {
    let made = catch_unwind(AssertUnwindSafe(|| -> Result<SpiHandle, String> {
        let known = NAMES.join(", ");
        let name = str_arg(chip).ok_or_else(|| format!("chip is NULL (known chips: {known})"))?;
        let part = ssdlab_spi::part(&name).ok_or_else(|| format!("unknown chip {name:?}: known chips are {known}"))?;
        let opts = options(opts)?;
        let image = (!image.is_null()).then(|| Path::new(OsStr::from_bytes(CStr::from_ptr(image).to_bytes())));
        let flash = Flash::new(part, image, opts).map_err(|e| e.to_string())?;
        Ok(SpiHandle { flash, open: false, cuts_at_begin: 0, dead_at_begin: false, poisoned: false })
    }));
    match made {
        Ok(Ok(h)) => Box::into_raw(Box::new(h)),
        Ok(Err(msg)) => {
            fail(SSDLAB_SPI_ERR_ARG, what, &msg);
            std::ptr::null_mut()
        }
        Err(p) => {
            fail(SSDLAB_SPI_ERR_INTERNAL, what, &format!("internal error: {}", panic_text(&*p)));
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_open(chip: *const c_char, image: *const c_char) -> *mut SpiHandle {
    open("ssdlab_spi_open", chip, image, std::ptr::null())
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_open_with(chip: *const c_char, image: *const c_char, opts: *const SpiOptions) -> *mut SpiHandle {
    open("ssdlab_spi_open_with", chip, image, opts)
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_close(f: *mut SpiHandle) {
    if !f.is_null() {
        let h = Box::from_raw(f);
        if catch_unwind(AssertUnwindSafe(|| drop(h))).is_err() {
            set_error("ssdlab_spi_close: internal error while freeing the chip".into());
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_transfer(f: *mut SpiHandle, cs: c_int, tx: *const u8, rx: *mut u8, len: usize) -> c_int {
    const WHAT: &str = "ssdlab_spi_transfer";
    status(f, WHAT, |h| {
        if !matches!(cs, SSDLAB_SPI_CS_FRAME | SSDLAB_SPI_CS_HOLD | SSDLAB_SPI_CS_RELEASE) {
            return fail(
                SSDLAB_SPI_ERR_ARG,
                WHAT,
                &format!("cs is {cs}: expected SSDLAB_SPI_CS_FRAME (0), SSDLAB_SPI_CS_HOLD (1) or SSDLAB_SPI_CS_RELEASE (2)"),
            );
        }
        if cs == SSDLAB_SPI_CS_FRAME && h.open {
            return fail(
                SSDLAB_SPI_ERR_ARG,
                WHAT,
                "SSDLAB_SPI_CS_FRAME while a transaction is held open (CS# low): continue it with SSDLAB_SPI_CS_HOLD or end it with SSDLAB_SPI_CS_RELEASE",
            );
        }
        if !h.open {
            h.cuts_at_begin = h.flash.stats().power_cuts;
            h.flash.begin();
            h.dead_at_begin = !h.flash.powered();
            h.open = true;
        }
        // Byte by byte through raw pointers: tx and rx may be the same buffer.
        for i in 0..len {
            let out = if tx.is_null() { 0xFF } else { *tx.add(i) };
            let got = h.flash.clock(out);
            if !rx.is_null() {
                *rx.add(i) = got;
            }
        }
        let lost = h.dead_at_begin || !h.flash.powered() || h.flash.stats().power_cuts != h.cuts_at_begin;
        if cs != SSDLAB_SPI_CS_HOLD {
            h.flash.end();
            h.open = false;
        }
        if !lost {
            return SSDLAB_SPI_OK;
        }
        let when = match h.flash.last_power_cut() {
            Some(c) if c.interrupted.is_empty() => format!(" (cut at {} ns)", c.t_ns),
            Some(c) => format!(" (cut at {} ns, interrupting a {})", c.t_ns, c.interrupted),
            None => String::new(),
        };
        fail(SSDLAB_SPI_ERR_POWER, WHAT, &format!("the chip had no power during the transaction{when}"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_delay_ns(f: *mut SpiHandle, ns: u64) {
    let _ = call(f, "ssdlab_spi_delay_ns", |h| h.flash.advance(ns));
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_elapsed_ns(f: *mut SpiHandle) -> u64 {
    call(f, "ssdlab_spi_elapsed_ns", |h| h.flash.now_ns()).unwrap_or(0)
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_power_cut(f: *mut SpiHandle) {
    let _ = call(f, "ssdlab_spi_power_cut", |h| h.flash.power_cut());
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_power_cut_at_frame(f: *mut SpiHandle, n: u64) -> c_int {
    const WHAT: &str = "ssdlab_spi_power_cut_at_frame";
    status(f, WHAT, |h| {
        if n == 0 {
            return fail(SSDLAB_SPI_ERR_ARG, WHAT, "n is 0: transactions count from 1 (the next one)");
        }
        h.flash.schedule_power_cut(CutAt::Frame(n));
        SSDLAB_SPI_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_power_cut_at_ns(f: *mut SpiHandle, t: u64) -> c_int {
    status(f, "ssdlab_spi_power_cut_at_ns", |h| {
        h.flash.schedule_power_cut(CutAt::TimeNs(t));
        SSDLAB_SPI_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_cancel_power_cut(f: *mut SpiHandle) {
    let _ = call(f, "ssdlab_spi_cancel_power_cut", |h| h.flash.cancel_power_cut());
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_power_up(f: *mut SpiHandle) {
    let _ = call(f, "ssdlab_spi_power_up", |h| h.flash.power_up());
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_powered(f: *mut SpiHandle) -> c_int {
    status(f, "ssdlab_spi_powered", |h| c_int::from(h.flash.powered()))
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_peek(f: *mut SpiHandle, addr: u32, buf: *mut u8, len: usize) -> c_int {
    const WHAT: &str = "ssdlab_spi_peek";
    status(f, WHAT, |h| {
        let mem = h.flash.contents();
        let start = addr as usize;
        let Some(end) = start.checked_add(len).filter(|&e| e <= mem.len()) else {
            return fail(SSDLAB_SPI_ERR_ARG, WHAT, &format!("{len} bytes at {addr:#x} go past the {}-byte array", mem.len()));
        };
        if len > 0 && buf.is_null() {
            return fail(SSDLAB_SPI_ERR_ARG, WHAT, "buf is NULL");
        }
        if len > 0 {
            std::ptr::copy_nonoverlapping(mem[start..end].as_ptr(), buf, len);
        }
        SSDLAB_SPI_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_stats_json(f: *mut SpiHandle, buf: *mut c_char, len: usize) -> c_int {
    const WHAT: &str = "ssdlab_spi_stats_json";
    status(f, WHAT, |h| {
        if buf.is_null() && len > 0 {
            return fail(SSDLAB_SPI_ERR_ARG, WHAT, "buf is NULL but len is not 0");
        }
        let mut v = match serde_json::to_value(h.flash.stats()) {
            Ok(v) => v,
            Err(e) => return fail(SSDLAB_SPI_ERR_INTERNAL, WHAT, &e.to_string()),
        };
        if let Some(m) = v.as_object_mut() {
            m.insert("elapsed_ns".into(), h.flash.now_ns().into());
            m.insert("powered".into(), h.flash.powered().into());
            m.insert("last_power_cut".into(), serde_json::to_value(h.flash.last_power_cut()).unwrap_or_default());
        }
        let text = v.to_string();
        if len > 0 {
            let n = text.len().min(len - 1);
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        c_int::try_from(text.len()).unwrap_or(c_int::MAX)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_trace_to(f: *mut SpiHandle, path: *const c_char) -> c_int {
    const WHAT: &str = "ssdlab_spi_trace_to";
    status(f, WHAT, |h| {
        if path.is_null() {
            return fail(SSDLAB_SPI_ERR_ARG, WHAT, "path is NULL");
        }
        match h.flash.trace_to(Path::new(OsStr::from_bytes(CStr::from_ptr(path).to_bytes()))) {
            Ok(()) => SSDLAB_SPI_OK,
            Err(e) => fail(SSDLAB_SPI_ERR_IO, WHAT, &e.to_string()),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ssdlab_spi_flush(f: *mut SpiHandle) -> c_int {
    const WHAT: &str = "ssdlab_spi_flush";
    status(f, WHAT, |h| match h.flash.flush() {
        Ok(()) => SSDLAB_SPI_OK,
        Err(e) => fail(SSDLAB_SPI_ERR_IO, WHAT, &e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        unsafe { CStr::from_ptr(ssdlab_spi_last_error()).to_string_lossy().into_owned() }
    }

    fn open(chip: &str) -> *mut SpiHandle {
        let c = CString::new(chip).unwrap();
        let f = unsafe { ssdlab_spi_open(c.as_ptr(), std::ptr::null()) };
        assert!(!f.is_null(), "{}", last_error());
        f
    }

    fn xfer(f: *mut SpiHandle, cs: c_int, tx: &[u8]) -> (c_int, Vec<u8>) {
        let mut rx = vec![0u8; tx.len()];
        let r = unsafe { ssdlab_spi_transfer(f, cs, tx.as_ptr(), rx.as_mut_ptr(), tx.len()) };
        (r, rx)
    }

    #[test]
    fn open_rejects_a_null_or_unknown_chip_and_names_the_known_ones() {
        unsafe {
            assert!(ssdlab_spi_open(std::ptr::null(), std::ptr::null()).is_null());
            assert!(last_error().contains("chip is NULL"), "{}", last_error());
            let c = CString::new("W25Q999").unwrap();
            assert!(ssdlab_spi_open(c.as_ptr(), std::ptr::null()).is_null());
            let e = last_error();
            assert!(e.contains("W25Q999"), "{e}");
            for name in NAMES {
                assert!(e.contains(name), "{e}");
            }
        }
    }

    #[test]
    fn open_with_rejects_bad_options() {
        let chip = CString::new("w25q16jv").unwrap();
        let bad = CString::new("fast").unwrap();
        let mut o = SpiOptions { timing: bad.as_ptr(), power_seed: 0, wear_out: std::ptr::null(), endurance_cycles: 0, clock_hz: 0 };
        unsafe {
            assert!(ssdlab_spi_open_with(chip.as_ptr(), std::ptr::null(), &o).is_null());
            assert!(last_error().contains("timing \"fast\""), "{}", last_error());
            o.timing = std::ptr::null();
            o.wear_out = bad.as_ptr();
            assert!(ssdlab_spi_open_with(chip.as_ptr(), std::ptr::null(), &o).is_null());
            assert!(last_error().contains("wear-out"), "{}", last_error());
            let instant = CString::new("instant").unwrap();
            let o = SpiOptions { timing: instant.as_ptr(), clock_hz: 1_000_000, ..o };
            let o = SpiOptions { wear_out: std::ptr::null(), ..o };
            let f = ssdlab_spi_open_with(chip.as_ptr(), std::ptr::null(), &o);
            assert!(!f.is_null(), "{}", last_error());
            // 1 MHz: a byte takes 8 us.
            assert_eq!(xfer(f, SSDLAB_SPI_CS_FRAME, &[0x9F, 0, 0, 0]).0, 0);
            assert_eq!(ssdlab_spi_elapsed_ns(f), 32_000);
            ssdlab_spi_close(f);
        }
    }

    #[test]
    fn bad_cs_null_handle_and_frame_inside_a_held_transaction_are_argument_errors() {
        let f = open("W25Q128JV");
        assert_eq!(xfer(f, 3, &[0x9F]).0, SSDLAB_SPI_ERR_ARG);
        assert!(last_error().contains("cs is 3"), "{}", last_error());
        assert_eq!(xfer(f, -1, &[0x9F]).0, SSDLAB_SPI_ERR_ARG);
        assert_eq!(xfer(std::ptr::null_mut(), SSDLAB_SPI_CS_FRAME, &[0x9F]).0, SSDLAB_SPI_ERR_ARG);
        assert!(last_error().contains("handle is NULL"), "{}", last_error());
        unsafe {
            assert_eq!(ssdlab_spi_elapsed_ns(std::ptr::null_mut()), 0);
            assert_eq!(ssdlab_spi_powered(std::ptr::null_mut()), SSDLAB_SPI_ERR_ARG);
            assert_eq!(ssdlab_spi_power_cut_at_frame(f, 0), SSDLAB_SPI_ERR_ARG);
            ssdlab_spi_close(std::ptr::null_mut());
        }
        // Nothing was clocked by the refused calls.
        assert_eq!(unsafe { ssdlab_spi_elapsed_ns(f) }, 0);
        assert_eq!(xfer(f, SSDLAB_SPI_CS_HOLD, &[0x9F]).0, 0);
        assert_eq!(xfer(f, SSDLAB_SPI_CS_FRAME, &[0x05, 0]).0, SSDLAB_SPI_ERR_ARG);
        assert!(last_error().contains("held open"), "{}", last_error());
        let (r, id) = xfer(f, SSDLAB_SPI_CS_RELEASE, &[0, 0, 0]);
        assert_eq!((r, id), (0, vec![0xEF, 0x40, 0x18]));
        unsafe { ssdlab_spi_close(f) };
    }

    #[test]
    fn null_tx_sends_ffh_and_rx_may_be_tx() {
        let f = open("MX25L6436F");
        let mut buf = [0x9F, 0, 0, 0];
        unsafe {
            assert_eq!(ssdlab_spi_transfer(f, SSDLAB_SPI_CS_FRAME, buf.as_ptr(), buf.as_mut_ptr(), 4), 0);
            assert_eq!(buf, [0xFF, 0xC2, 0x20, 0x17]);
            let mut rx = [0u8; 3];
            assert_eq!(ssdlab_spi_transfer(f, SSDLAB_SPI_CS_HOLD, [0x03, 0, 0, 0].as_ptr(), std::ptr::null_mut(), 4), 0);
            assert_eq!(ssdlab_spi_transfer(f, SSDLAB_SPI_CS_RELEASE, std::ptr::null(), rx.as_mut_ptr(), 3), 0);
            assert_eq!(rx, [0xFF; 3]);
            assert_eq!(ssdlab_spi_transfer(f, SSDLAB_SPI_CS_FRAME, std::ptr::null(), std::ptr::null_mut(), 0), 0);
            ssdlab_spi_close(f);
        }
    }

    #[test]
    fn power_cut_at_a_frame_fails_transfers_until_power_up() {
        let f = open("W25Q16JV");
        unsafe {
            assert_eq!(ssdlab_spi_power_cut_at_frame(f, 2), 0);
            assert_eq!(xfer(f, SSDLAB_SPI_CS_FRAME, &[0x9F, 0, 0, 0]).0, 0);
            assert_eq!(ssdlab_spi_powered(f), 1);
            let (r, rx) = xfer(f, SSDLAB_SPI_CS_FRAME, &[0x9F, 0, 0, 0]);
            assert_eq!((r, rx), (SSDLAB_SPI_ERR_POWER, vec![0xFF; 4]));
            assert!(last_error().contains("no power"), "{}", last_error());
            assert_eq!(ssdlab_spi_powered(f), 0);
            ssdlab_spi_power_up(f);
            assert_eq!(ssdlab_spi_powered(f), 1);
            ssdlab_spi_delay_ns(f, 20_000);
            assert_eq!(xfer(f, SSDLAB_SPI_CS_FRAME, &[0x9F, 0, 0, 0]), (0, vec![0xFF, 0xEF, 0x40, 0x15]));
            ssdlab_spi_close(f);
        }
    }

    #[test]
    fn a_held_transaction_that_lost_power_stays_lost_until_released() {
        let f = open("W25Q128JV");
        unsafe {
            assert_eq!(xfer(f, SSDLAB_SPI_CS_HOLD, &[0x03, 0, 0, 0]).0, 0);
            ssdlab_spi_power_cut(f);
            ssdlab_spi_power_up(f);
            ssdlab_spi_delay_ns(f, 1_000_000);
            assert_eq!(xfer(f, SSDLAB_SPI_CS_HOLD, &[0; 4]).0, SSDLAB_SPI_ERR_POWER);
            assert_eq!(xfer(f, SSDLAB_SPI_CS_RELEASE, &[]).0, SSDLAB_SPI_ERR_POWER);
            assert_eq!(xfer(f, SSDLAB_SPI_CS_FRAME, &[0x05, 0]), (0, vec![0xFF, 0x00]));
            // A cut at a time inside a transfer fails that transfer.
            let now = ssdlab_spi_elapsed_ns(f);
            assert_eq!(ssdlab_spi_power_cut_at_ns(f, now + 2_000), 0);
            assert_eq!(xfer(f, SSDLAB_SPI_CS_FRAME, &[0x9F, 0, 0, 0]), (SSDLAB_SPI_ERR_POWER, vec![0xFF, 0xEF, 0xFF, 0xFF]));
            ssdlab_spi_close(f);
        }
    }

    #[test]
    fn peek_and_stats_json() {
        let f = open("W25Q16JV");
        unsafe {
            let mut b = [0u8; 4];
            assert_eq!(ssdlab_spi_peek(f, 2 * 1024 * 1024 - 4, b.as_mut_ptr(), 4), 0);
            assert_eq!(b, [0xFF; 4]);
            assert_eq!(ssdlab_spi_peek(f, 2 * 1024 * 1024 - 3, b.as_mut_ptr(), 4), SSDLAB_SPI_ERR_ARG);
            assert_eq!(ssdlab_spi_peek(f, 0, std::ptr::null_mut(), 4), SSDLAB_SPI_ERR_ARG);
            assert_eq!(xfer(f, SSDLAB_SPI_CS_FRAME, &[0x06]).0, 0);
            let n = ssdlab_spi_stats_json(f, std::ptr::null_mut(), 0);
            assert!(n > 0);
            let mut buf = vec![0 as c_char; n as usize + 1];
            assert_eq!(ssdlab_spi_stats_json(f, buf.as_mut_ptr(), buf.len()), n);
            let text = CStr::from_ptr(buf.as_ptr()).to_str().unwrap();
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(v["frames"], 1);
            assert_eq!(v["powered"], true);
            assert_eq!(v["elapsed_ns"], 1000);
            assert!(v["last_power_cut"].is_null());
            // Truncated like snprintf.
            let mut small = [1 as c_char; 5];
            assert_eq!(ssdlab_spi_stats_json(f, small.as_mut_ptr(), 5), n);
            assert_eq!(CStr::from_ptr(small.as_ptr()).to_bytes(), &text.as_bytes()[..4]);
            assert_eq!(ssdlab_spi_stats_json(f, std::ptr::null_mut(), 5), SSDLAB_SPI_ERR_ARG);
            ssdlab_spi_close(f);
        }
    }

    #[test]
    fn image_survives_reopening_and_the_trace_names_each_frame() {
        let dir = std::env::temp_dir().join(format!("spi-c-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).unwrap();
        let chip = CString::new("W25Q16JV").unwrap();
        let short = dir.join("short.bin");
        std::fs::write(&short, [0u8; 10]).unwrap();
        let (image, trace) = (dir.join("flash.bin"), dir.join("trace.jsonl"));
        unsafe {
            assert!(ssdlab_spi_open(chip.as_ptr(), c(&short).as_ptr()).is_null());
            assert!(last_error().contains("image is 10 bytes"), "{}", last_error());
            let f = ssdlab_spi_open(chip.as_ptr(), c(&image).as_ptr());
            assert!(!f.is_null(), "{}", last_error());
            assert_eq!(ssdlab_spi_trace_to(f, c(&trace).as_ptr()), 0);
            assert_eq!(ssdlab_spi_trace_to(f, std::ptr::null()), SSDLAB_SPI_ERR_ARG);
            assert_eq!(xfer(f, SSDLAB_SPI_CS_FRAME, &[0x06]).0, 0);
            assert_eq!(xfer(f, SSDLAB_SPI_CS_FRAME, &[0x02, 0, 0x01, 0x00, 0x12, 0x34]).0, 0);
            ssdlab_spi_delay_ns(f, 1_000_000);
            assert_eq!(ssdlab_spi_flush(f), 0);
            ssdlab_spi_close(f);
            let f = ssdlab_spi_open(chip.as_ptr(), c(&image).as_ptr());
            assert!(!f.is_null(), "{}", last_error());
            let mut b = [0u8; 3];
            assert_eq!(ssdlab_spi_peek(f, 0x100, b.as_mut_ptr(), 3), 0);
            assert_eq!(b, [0x12, 0x34, 0xFF]);
            ssdlab_spi_close(f);
        }
        let lines = std::fs::read_to_string(&trace).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(lines.lines().count(), 3, "{lines}");
        assert!(lines.contains("WREN") && lines.contains("program 2 B at 0x100") && lines.contains("advance_ns"), "{lines}");
    }

    #[test]
    fn last_error_is_per_thread() {
        assert_eq!(xfer(std::ptr::null_mut(), 0, &[]).0, SSDLAB_SPI_ERR_ARG);
        let other = std::thread::spawn(last_error).join().unwrap();
        assert_eq!(other, "");
        assert!(last_error().contains("handle is NULL"));
    }
}
