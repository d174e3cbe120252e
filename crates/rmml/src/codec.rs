//! Block compression: LZ4 (lz4_flex, block format) and Zstandard (libzstd through the zstd
//! crate), with reusable buffers and contexts so the hot path allocates nothing.
//!
//! A block that does not shrink is stored as is (codec `None` in its header), so random data
//! costs one failed compression attempt and no decompression.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    None,
    Lz4,
    Zstd,
}

impl Codec {
    pub fn code(self) -> u8 {
        match self {
            Codec::None => 0,
            Codec::Lz4 => 1,
            Codec::Zstd => 2,
        }
    }
    pub fn from_code(c: u8) -> Option<Codec> {
        match c {
            0 => Some(Codec::None),
            1 => Some(Codec::Lz4),
            2 => Some(Codec::Zstd),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// A compressor/decompressor for one codec with its scratch space.
pub struct Coder {
    codec: Codec,
    zc: Option<zstd::bulk::Compressor<'static>>,
    zd: Option<zstd::bulk::Decompressor<'static>>,
    out: Vec<u8>,
}

impl Coder {
    /// `level` is zstd's compression level (ignored by the others).
    pub fn new(codec: Codec, level: i32, max_block_bytes: usize) -> Result<Coder> {
        let (zc, zd) = if codec == Codec::Zstd {
            let c = zstd::bulk::Compressor::new(level).map_err(|e| Error::Config(format!("zstd level {level}: {e}")))?;
            (Some(c), Some(zstd::bulk::Decompressor::new()?))
        } else {
            // Blocks written with another codec may still be read back: keep a decompressor.
            (None, Some(zstd::bulk::Decompressor::new()?))
        };
        let bound = lz4_flex::block::get_maximum_output_size(max_block_bytes).max(zstd::zstd_safe::compress_bound(max_block_bytes));
        Ok(Coder { codec, zc, zd, out: vec![0; bound] })
    }

    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Compress `src`; returns the codec actually used (None when it did not shrink) and the
    /// stored bytes (valid until the next call).
    pub fn compress<'a>(&'a mut self, src: &'a [u8]) -> Result<(Codec, &'a [u8])> {
        let n = match self.codec {
            Codec::None => None,
            Codec::Lz4 => lz4_flex::block::compress_into(src, &mut self.out).ok(),
            Codec::Zstd => self.zc.as_mut().expect("zstd compressor").compress_to_buffer(src, &mut self.out[..]).ok(),
        };
        match n {
            Some(n) if n < src.len() => Ok((self.codec, &self.out[..n])),
            _ => Ok((Codec::None, src)),
        }
    }

    /// Decompress `src` (stored with `codec`) into `dst`, which must be exactly the raw length.
    pub fn decompress(&mut self, codec: Codec, src: &[u8], dst: &mut [u8]) -> Result<()> {
        let n = match codec {
            Codec::None => {
                if src.len() != dst.len() {
                    return Err(Error::Corrupt(format!("stored block of {} bytes, expected {}", src.len(), dst.len())));
                }
                dst.copy_from_slice(src);
                dst.len()
            }
            Codec::Lz4 => lz4_flex::block::decompress_into(src, dst).map_err(|e| Error::Corrupt(format!("lz4: {e}")))?,
            Codec::Zstd => self
                .zd
                .as_mut()
                .expect("zstd decompressor")
                .decompress_to_buffer(src, dst)
                .map_err(|e| Error::Corrupt(format!("zstd: {e}")))?,
        };
        if n != dst.len() {
            return Err(Error::Corrupt(format!("{} block decompressed to {n} bytes, expected {}", codec.name(), dst.len())));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn round_trip(codec: Codec, data: &[u8]) -> (Codec, usize) {
        let mut c = Coder::new(codec, 1, data.len()).unwrap();
        let (used, stored) = c.compress(data).unwrap();
        let stored = stored.to_vec();
        let mut back = vec![0xAAu8; data.len()];
        c.decompress(used, &stored, &mut back).unwrap();
        assert_eq!(back, data, "{codec:?} round trip");
        (used, stored.len())
    }

    #[test]
    fn compressible_and_random_blocks_round_trip() {
        let mut rng = rand_pcg::Pcg64::seed_from_u64(7);
        let random: Vec<u8> = (0..1 << 20).map(|_| rng.gen()).collect();
        let text: Vec<u8> = b"remote memory block ".iter().cycle().take(1 << 20).copied().collect();
        for codec in [Codec::None, Codec::Lz4, Codec::Zstd] {
            let (used, n) = round_trip(codec, &random);
            assert_eq!((used, n), (Codec::None, 1 << 20), "random data is stored raw");
            let (used, n) = round_trip(codec, &text);
            assert_eq!(used, codec);
            if codec != Codec::None {
                assert!(n < (1 << 20) / 50, "{codec:?} shrinks repetitive text: {n}");
            }
            round_trip(codec, &[0u8; 4096]);
        }
    }

    #[test]
    fn corrupt_payload_is_an_error() {
        let text: Vec<u8> = b"abcdefgh".iter().cycle().take(65536).copied().collect();
        for codec in [Codec::Lz4, Codec::Zstd] {
            let mut c = Coder::new(codec, 1, text.len()).unwrap();
            let mut stored = c.compress(&text).unwrap().1.to_vec();
            stored.truncate(stored.len() / 2);
            let mut back = vec![0; text.len()];
            assert!(c.decompress(codec, &stored, &mut back).is_err());
        }
    }
}
