//! Memory hints for the simulator's hot path: large metadata arrays (the FTL's maps,
//! per-block state, the cache's indexes) on transparent huge pages, and cache-line prefetches.
//!
//! The simulator's hot path is random look-ups in arrays of tens of megabytes to gigabytes:
//! with 4 KiB pages nearly every look-up also misses the TLB, and a hardware prefetch hint
//! cannot hide a page walk it has to wait for. On Linux with transparent huge pages in
//! `madvise` mode (Debian's default), asking for 2 MiB pages on these arrays before they are
//! first touched removes most of those misses. Elsewhere, or if the kernel declines, the
//! arrays are ordinary memory: the hint never changes what is stored.

/// Arrays smaller than this stay on ordinary pages (a huge page would mostly be padding).
const MIN_BYTES: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

/// `vec![x; n]`, its memory advised for huge pages before it is filled (for arrays built
/// outside a binary that uses [`HugeAlloc`], such as the core's own tests).
pub fn filled<T: Clone>(n: usize, x: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    advise(v.as_ptr() as usize, n * std::mem::size_of::<T>());
    v.resize(n, x);
    v
}

/// The system allocator, with every allocation of [`MIN_BYTES`] or more advised for huge
/// pages before the caller touches it: hash tables and other large structures that the
/// simulator reaches at random get them too. Binaries and the Python module install it with
/// `#[global_allocator]`; it changes nothing but the paging hint.
pub struct HugeAlloc;

// SAFETY: every call is forwarded to the system allocator unchanged; `advise` only sets a
// paging hint on memory inside the block just returned.
unsafe impl std::alloc::GlobalAlloc for HugeAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc(layout) };
        advise(p as usize, layout.size());
        p
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        advise(p as usize, layout.size());
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(p, layout) }
    }
    unsafe fn realloc(&self, p: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { std::alloc::System.realloc(p, layout, new_size) };
        advise(q as usize, new_size);
        q
    }
}

/// Deserialize a large array into one allocation of its saved length (serde's `Vec` grows from
/// a small capacity by reallocation, so most of a restored map would sit on ordinary pages,
/// touched before the final block was advised, and look-ups would miss the TLB again). For
/// `#[serde(deserialize_with = "...")]` on the maps a snapshot or checkpoint restores.
pub fn presized<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    struct Seq<T>(std::marker::PhantomData<T>);
    impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Seq<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a sequence")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut v = Vec::new();
            // A damaged file may claim any length: a reservation that fails is an error, not an
            // abort (and the elements must still be there to fill it).
            if let Some(n) = seq.size_hint() {
                v.try_reserve_exact(n).map_err(|e| serde::de::Error::custom(format!("{n} elements: {e}")))?;
            }
            while let Some(x) = seq.next_element()? {
                v.push(x);
            }
            Ok(v)
        }
    }
    d.deserialize_seq(Seq(std::marker::PhantomData))
}

/// Start loading the cache line of `r` (a hint: it never faults and changes nothing).
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(r as *const T as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

#[cfg(target_os = "linux")]
fn advise(addr: usize, bytes: usize) {
    if bytes < MIN_BYTES || addr == 0 {
        return;
    }
    // Only whole huge pages inside the allocation.
    let start = addr.next_multiple_of(HUGE_PAGE);
    let end = (addr + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: [start, end) lies inside the caller's allocation; MADV_HUGEPAGE only sets
        // a paging hint on it and never changes its contents. Failure (THP disabled) is fine.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_addr: usize, _bytes: usize) {}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Saved {
        #[serde(deserialize_with = "super::presized")]
        v: Vec<u32>,
    }

    #[test]
    fn a_presized_array_reads_back_as_saved_and_a_damaged_length_is_an_error() {
        let a = Saved { v: (0..100_000).collect() };
        let bytes = bincode::serialize(&a).unwrap();
        let b: Saved = bincode::deserialize(&bytes).unwrap();
        assert_eq!(a.v, b.v);
        assert_eq!(b.v.capacity(), b.v.len(), "one allocation of the saved length");
        // The length says 2^60 elements: refused, not an abort.
        let mut bad = bytes.clone();
        bad[..8].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(bincode::deserialize::<Saved>(&bad).is_err());
    }

    #[test]
    fn filled_is_vec_of_the_value() {
        for n in [0, 1, 1000, 3 << 20] {
            let v = super::filled(n, 7u32);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 7));
        }
    }
}
