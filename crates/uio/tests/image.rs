//! A device's flash kept in a file (`--data`): what was acknowledged survives the process.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use ssdlab_uio::repro::{device_config, letter_key, letter_value};
use ssdlab_uio::utl::{Utl, UtlConfig};

/// 2 x 2 dies x 16 blocks of 64 x 4 KiB pages: 16 MiB of flash.
fn small() -> ssdlab_core::Config {
    let mut c = device_config("quick").unwrap();
    c.geometry.blocks_per_plane = 16;
    c.timing.enabled = false;
    c
}

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ssdlab-uio-image-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Overwrite keys until GC has run many times, dropping the UTL without any shutdown (as a
/// killed process would) every `every` puts and opening the image again: every key reads its
/// newest value after every reopening.
#[test]
fn every_acknowledged_put_survives_reopening_through_gc() {
    let d = dir("gc");
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut rng = Pcg64Mcg::seed_from_u64(11);
    let (mut u, r) = Utl::open(&small(), UtlConfig::default(), &d).unwrap();
    assert_eq!(r.keys, 0);
    let mut victims = 0;
    for i in 0..30_000u64 {
        let k = letter_key(rng.gen_range(0..2000), 12);
        let v = letter_value(rng.gen_range(1..3000), i);
        u.put(&k, &v, 0).unwrap();
        model.insert(k, v);
        if i % 7_001 == 7_000 {
            victims += u.stats().gc_victims;
            drop(u);
            let (again, r) = Utl::open(&small(), UtlConfig::default(), &d).unwrap();
            u = again;
            assert_eq!(r.keys as usize, model.len(), "{r:?}");
            for (k, v) in &model {
                assert_eq!(u.get(k, 0).unwrap().0.as_deref(), Some(&v[..]));
            }
            u.check().unwrap();
        }
    }
    victims += u.stats().gc_victims;
    assert!(victims > 50, "GC ran {victims} times");
    drop(u);
    let (mut u, _) = Utl::open(&small(), UtlConfig::default(), &d).unwrap();
    for (k, v) in &model {
        assert_eq!(u.get(k, 0).unwrap().0.as_deref(), Some(&v[..]));
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// A record torn by the kill (its bytes half written) was never acknowledged: recovery stops
/// before it, and the next put takes its place.
#[test]
fn a_torn_record_is_dropped_and_overwritten() {
    let d = dir("torn");
    let (mut u, _) = Utl::open(&small(), UtlConfig::default(), &d).unwrap();
    u.put(b"kept", b"value", 0).unwrap();
    let at = u.locate(b"kept").unwrap();
    drop(u);
    // Half a record after the last whole one.
    let mut torn = vec![];
    ssdlab_uio::record::encode(b"torn", &letter_value(100, 0), &mut torn);
    torn.truncate(50);
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(d.join("flash.img")).unwrap();
        let blocks = 2 * 2 * 16;
        let block_bytes = 64 * 4096u64;
        f.seek(SeekFrom::Start(64 + 8 * blocks + at.block as u64 * block_bytes + (at.offset + at.len) as u64)).unwrap();
        f.write_all(&torn).unwrap();
    }
    let (mut u, r) = Utl::open(&small(), UtlConfig::default(), &d).unwrap();
    assert_eq!((r.keys, r.records), (1, 1));
    assert_eq!(u.get(b"torn", 0).unwrap().0, None);
    u.put(b"next", b"short", 0).unwrap();
    drop(u);
    let (mut u, _) = Utl::open(&small(), UtlConfig::default(), &d).unwrap();
    assert_eq!(u.get(b"kept", 0).unwrap().0.as_deref(), Some(&b"value"[..]));
    assert_eq!(u.get(b"next", 0).unwrap().0.as_deref(), Some(&b"short"[..]));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_image_in_use_is_refused_until_its_device_goes() {
    let d = dir("in-use");
    let (first, _) = Utl::open(&small(), UtlConfig::default(), &d).unwrap();
    let e = Utl::open(&small(), UtlConfig::default(), &d).err().expect("refused");
    assert!(e.to_string().contains("in use by another device"), "{e}");
    drop(first);
    drop(Utl::open(&small(), UtlConfig::default(), &d).unwrap());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_image_of_another_geometry_is_refused() {
    let d = dir("geometry");
    drop(Utl::open(&small(), UtlConfig::default(), &d).unwrap());
    let mut other = small();
    other.geometry.blocks_per_plane = 32;
    let e = Utl::open(&other, UtlConfig::default(), &d).err().expect("refused");
    assert!(e.to_string().contains("flash.img"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}
