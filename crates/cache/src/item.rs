//! Items of a data-backed cache (the bytes `ssdlab cache serve` keeps for its clients) and
//! their on-device formats: one item layout shared by SOC buckets and LOC regions, and the
//! SOC bucket header. Little-endian, explicitly sized fields.
//!
//! Item (`ITEM_HEADER_BYTES` + key + value), as CacheLib's BigHash entries carry the key hash:
//! ```text
//!  0 u32 CRC-32 of bytes 4..end (rest of the header, key, value)
//!  4 u32 value bytes
//!  8 u64 key hash (the cache's 64-bit key: buckets, Bloom filters, indexes)
//! 16 u64 CAS unique
//! 24 u32 client flags
//! 28 u32 expiry, cache seconds (0 = never)
//! 32 u8  key bytes (1..=255), then 3 zero bytes
//! 36 key, value
//! ```
//! Bucket (`bucket_bytes`): a 16-byte header, then its items oldest first, then zeros:
//! ```text
//!  0 [u8; 4] magic "sLb1"          (a never-written bucket reads back as zeros: empty)
//!  4 u32 CRC-32 of bytes 8..16 + used
//!  8 u32 bucket index (low 32 bits; catches a bucket read from the wrong place)
//! 12 u16 items
//! 14 u16 used: bytes of the items
//! ```

/// Bytes before an item's key.
pub const ITEM_HEADER_BYTES: u32 = 36;
/// Bytes before a bucket's first item.
pub const BUCKET_HEADER_BYTES: u32 = 16;
/// Longest key the format holds (a u8 length); the memcached front-end allows 250.
pub const KEY_BYTES_MAX: usize = 255;
pub const BUCKET_MAGIC: [u8; 4] = *b"sLb1";

/// One cached item with its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub key: Box<[u8]>,
    pub value: Box<[u8]>,
    /// Opaque client flags (memcached's `<flags>`).
    pub flags: u32,
    /// Expiry in cache seconds (see [`crate::cache::cache_seconds`]); 0 = never.
    pub expiry_s: u32,
    /// The CAS unique (memcached's `gets`/`cas`): changes whenever the item is stored anew.
    pub cas: u64,
}

impl Item {
    /// Key + value bytes: the item's size as the tiers account it.
    pub fn item_bytes(&self) -> u64 {
        self.key.len() as u64 + self.value.len() as u64
    }
    /// Bytes of the item on the device (header + key + value).
    pub fn stored_bytes(&self) -> u64 {
        ITEM_HEADER_BYTES as u64 + self.item_bytes()
    }
    pub fn expired(&self, now_s: u32) -> bool {
        self.expiry_s != 0 && self.expiry_s <= now_s
    }
}

/// Serialise `it` (with its key hash) into `out`, which must be exactly `it.stored_bytes()`.
pub fn encode(hash: u64, it: &Item, out: &mut [u8]) {
    assert!(!it.key.is_empty() && it.key.len() <= KEY_BYTES_MAX, "key of {} bytes", it.key.len());
    assert!(it.value.len() <= u32::MAX as usize);
    assert_eq!(out.len() as u64, it.stored_bytes());
    let k = it.key.len();
    out[4..8].copy_from_slice(&(it.value.len() as u32).to_le_bytes());
    out[8..16].copy_from_slice(&hash.to_le_bytes());
    out[16..24].copy_from_slice(&it.cas.to_le_bytes());
    out[24..28].copy_from_slice(&it.flags.to_le_bytes());
    out[28..32].copy_from_slice(&it.expiry_s.to_le_bytes());
    out[32] = k as u8;
    out[33..36].fill(0);
    let h = ITEM_HEADER_BYTES as usize;
    out[h..h + k].copy_from_slice(&it.key);
    out[h + k..].copy_from_slice(&it.value);
    let crc = crc32fast::hash(&out[4..]);
    out[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// An item parsed in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemView<'a> {
    pub hash: u64,
    pub cas: u64,
    pub flags: u32,
    pub expiry_s: u32,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

impl ItemView<'_> {
    pub fn stored_bytes(&self) -> u64 {
        ITEM_HEADER_BYTES as u64 + self.key.len() as u64 + self.value.len() as u64
    }
    pub fn to_item(&self) -> Item {
        Item { key: self.key.into(), value: self.value.into(), flags: self.flags, expiry_s: self.expiry_s, cas: self.cas }
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Parse the item starting at `buf[0]` (`buf` may run past its end). Errors say what is wrong:
/// the caller decides whether that is corruption (a programmer error) or a bad input.
pub fn decode(buf: &[u8]) -> Result<ItemView<'_>, String> {
    let h = ITEM_HEADER_BYTES as usize;
    if buf.len() < h {
        return Err(format!("{} bytes cannot hold an item header", buf.len()));
    }
    let vlen = u32_at(buf, 4) as usize;
    let klen = buf[32] as usize;
    if klen == 0 || buf[33..36] != [0, 0, 0] {
        return Err("malformed item header".into());
    }
    let end = h + klen + vlen;
    if end > buf.len() {
        return Err(format!("item of {end} bytes runs past its {}-byte buffer", buf.len()));
    }
    let crc = crc32fast::hash(&buf[4..end]);
    if crc != u32_at(buf, 0) {
        return Err(format!("item checksum {:#010x} != stored {:#010x}", crc, u32_at(buf, 0)));
    }
    Ok(ItemView {
        hash: u64_at(buf, 8),
        cas: u64_at(buf, 16),
        flags: u32_at(buf, 24),
        expiry_s: u32_at(buf, 28),
        key: &buf[h..h + klen],
        value: &buf[h + klen..end],
    })
}

/// Parse a bucket image: the items' (offset, length) in `ents`, oldest first. A bucket of
/// zeros (never written) is empty.
pub fn parse_bucket(buf: &[u8], index: u64, ents: &mut Vec<(u32, u32)>) -> Result<(), String> {
    ents.clear();
    if buf[0..4] == [0, 0, 0, 0] {
        return if buf.iter().all(|&b| b == 0) { Ok(()) } else { Err("no bucket magic, yet not all zeros".into()) };
    }
    if buf[0..4] != BUCKET_MAGIC {
        return Err(format!("bad bucket magic {:02x?}", &buf[0..4]));
    }
    let hb = BUCKET_HEADER_BYTES as usize;
    let count = u16::from_le_bytes([buf[12], buf[13]]) as usize;
    let used = u16::from_le_bytes([buf[14], buf[15]]) as usize;
    if hb + used > buf.len() {
        return Err(format!("bucket says {used} bytes used of {}", buf.len() - hb));
    }
    let crc = crc32fast::hash(&buf[8..hb + used]);
    if crc != u32_at(buf, 4) {
        return Err(format!("bucket checksum {:#010x} != stored {:#010x}", crc, u32_at(buf, 4)));
    }
    if u32_at(buf, 8) != index as u32 {
        return Err(format!("bucket {} read where bucket {index} belongs", u32_at(buf, 8)));
    }
    let mut off = hb;
    for _ in 0..count {
        let v = decode(&buf[off..hb + used])?;
        let len = v.stored_bytes() as usize;
        ents.push((off as u32, len as u32));
        off += len;
    }
    if off != hb + used {
        return Err(format!("bucket items end at byte {off}, header says {}", hb + used));
    }
    Ok(())
}

/// Write the bucket header for `count` items occupying `used` bytes after it (the items must
/// already be in place, the rest of the bucket zero).
pub fn seal_bucket(buf: &mut [u8], index: u64, count: u16, used: u16) {
    let hb = BUCKET_HEADER_BYTES as usize;
    assert!(hb + used as usize <= buf.len());
    buf[0..4].copy_from_slice(&BUCKET_MAGIC);
    buf[8..12].copy_from_slice(&(index as u32).to_le_bytes());
    buf[12..14].copy_from_slice(&count.to_le_bytes());
    buf[14..16].copy_from_slice(&used.to_le_bytes());
    let crc = crc32fast::hash(&buf[8..hb + used as usize]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(key: &[u8], value: &[u8]) -> Item {
        Item { key: key.into(), value: value.into(), flags: 0xdead_beef, expiry_s: 77, cas: 123_456_789 }
    }

    #[test]
    fn items_round_trip_and_corruption_is_caught() {
        let it = item(b"user:42", &[0, 1, 2, 255, 13, 10]);
        let mut buf = vec![0u8; it.stored_bytes() as usize + 10];
        let n = it.stored_bytes() as usize;
        encode(0x1234, &it, &mut buf[..n]);
        let v = decode(&buf).unwrap();
        assert_eq!((v.hash, v.stored_bytes() as usize), (0x1234, n));
        assert_eq!(v.to_item(), it);
        for at in [0, 5, 9, 20, 30, 40, n - 1] {
            let mut bad = buf.clone();
            bad[at] ^= 0x10;
            assert!(decode(&bad).is_err(), "flip at {at} not caught");
        }
        assert!(decode(&buf[..n - 1]).is_err());
    }

    #[test]
    fn buckets_round_trip() {
        let mut b = vec![0u8; 4096];
        let mut ents = vec![];
        parse_bucket(&b, 3, &mut ents).unwrap();
        assert!(ents.is_empty());
        let (a, c) = (item(b"a", b"xyz"), item(b"ccc", &[7; 1000]));
        let mut off = BUCKET_HEADER_BYTES as usize;
        for it in [&a, &c] {
            let n = it.stored_bytes() as usize;
            encode(9, it, &mut b[off..off + n]);
            off += n;
        }
        seal_bucket(&mut b, 3, 2, (off - 16) as u16);
        parse_bucket(&b, 3, &mut ents).unwrap();
        assert_eq!(ents, vec![(16, a.stored_bytes() as u32), (16 + a.stored_bytes() as u32, c.stored_bytes() as u32)]);
        assert!(parse_bucket(&b, 4, &mut ents).unwrap_err().contains("bucket 3 read where bucket 4"));
        b[100] ^= 1;
        assert!(parse_bucket(&b, 3, &mut ents).is_err());
    }
}
