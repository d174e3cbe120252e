//! INCRBYFLOAT's arithmetic as redis-server does it on x86-64: in C's `long double`, the x87
//! extended format (a 64-bit significand, exponents down to 2^-16445 with subnormals, up to
//! 2^16384), read with `strtold` and printed with `%.17Lf` less its trailing zeros. Rust has
//! no such type, so this module is that format in software: a value is a 64-bit significand
//! times a power of two, every step (reading decimal or hex text, adding, printing 17
//! decimals) exact, then rounded to nearest, ties to even, as the FPU and glibc round. Plain
//! `f64` would answer `10.5 + 0.1` with `10.59999999999999964`; redis-server answers `10.6`.

use std::cmp::Ordering;

/// Exponent of a value's lowest significand bit, at least this (the smallest subnormal).
const MIN_EXP: i64 = -16445;
/// Exponent of a value's top bit, at most this (the largest finite value is just under 2^16384).
const MAX_TOP: i64 = 16383;
/// redis-server's MAX_LONG_DOUBLE_CHARS: longer text is not a number.
const MAX_CHARS: usize = 5 * 1024;

/// A finite `long double`: `(-1)^neg * mant * 2^exp`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ld {
    neg: bool,
    mant: u64,
    exp: i64,
}

/// What a `long double` holds when it is not finite (INCRBYFLOAT refuses these results).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NotFinite {
    Inf,
    NaN,
}

/// Read `s` as redis-server's `string2ld` does: all of it must be `strtold` text (decimal or
/// hex, `inf`/`infinity`; no leading space), not NaN, not out of range. `Err(Inf)`: an
/// infinity written as such (a valid number whose sums are refused); None: not a number.
pub fn parse(s: &[u8]) -> Option<Result<Ld, NotFinite>> {
    if s.is_empty() || s.len() >= MAX_CHARS || matches!(s[0], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        return None;
    }
    let (neg, body) = match s[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    if lower == b"inf" || lower == b"infinity" {
        return Some(Err(NotFinite::Inf));
    }
    let (hex, digits) = match lower.strip_prefix(b"0x") {
        Some(rest) => (true, rest),
        None => (false, &lower[..]),
    };
    let radix: u32 = if hex { 16 } else { 10 };
    // Significand digits, with the point's place.
    let (mut mant, mut ndigits, mut frac, mut i, mut seen_point) = (Big::zero(), 0usize, 0i64, 0, false);
    while i < digits.len() {
        let c = digits[i];
        if c == b'.' && !seen_point {
            seen_point = true;
        } else if let Some(d) = (c as char).to_digit(radix) {
            if !mant.is_zero() || d != 0 {
                mant.mul_small(radix);
                mant.add_small(d);
            }
            ndigits += 1;
            frac += seen_point as i64;
        } else {
            break;
        }
        i += 1;
    }
    if ndigits == 0 {
        return None;
    }
    // The exponent: `e` (decimal, a power of ten) or `p` (hex, a power of two), with digits.
    let mut exp: i64 = 0;
    if i < digits.len() && digits[i] == if hex { b'p' } else { b'e' } {
        let mut j = i + 1;
        let eneg = match digits.get(j) {
            Some(b'-') => {
                j += 1;
                true
            }
            Some(b'+') => {
                j += 1;
                false
            }
            _ => false,
        };
        let start = j;
        while j < digits.len() && digits[j].is_ascii_digit() {
            exp = (exp * 10 + (digits[j] - b'0') as i64).min(1 << 40);
            j += 1;
        }
        if j == start {
            return None; // strtold leaves the `e` unread: text is left over
        }
        exp = if eneg { -exp } else { exp };
        i = j;
    }
    if i != digits.len() {
        return None;
    }
    if mant.is_zero() {
        return Some(Ok(Ld { neg, mant: 0, exp: 0 }));
    }
    let v = if hex { round(mant, exp - 4 * frac, false, neg) } else { from_decimal(mant, exp - frac, neg) };
    match v {
        // Out of range: strtold's ERANGE with HUGE_VAL or zero, which string2ld refuses.
        Err(_) => None,
        Ok(v) if v.mant == 0 => None,
        Ok(v) => Some(Ok(v)),
    }
}

/// `d * 10^e` rounded to a `long double`.
fn from_decimal(d: Big, e: i64, neg: bool) -> Result<Ld, NotFinite> {
    // log10 of the value is within [digits + e - 1, digits + e): far out of range is decided
    // before any big power of ten is made.
    let digits = d.to_decimal().len() as i64;
    if digits + e > 4940 {
        return Err(NotFinite::Inf);
    }
    if digits + e < -4960 {
        return Ok(Ld { neg, mant: 0, exp: 0 });
    }
    if e >= 0 {
        let mut n = d;
        n.mul_pow10(e as u32);
        return round(n, 0, false, neg);
    }
    let mut m = Big::from_u64(1);
    m.mul_pow10((-e) as u32);
    // q = floor(d * 2^s / m) with at least 66 bits, so that the rounding to 64 sees its
    // half bit and whether anything is left below it.
    let s = (66 + m.bits() as i64 - d.bits() as i64).max(0) + 1;
    let mut n = d.shl(s as u64);
    let qbits = n.bits().saturating_sub(m.bits()) + 1;
    let mut q = Big::zero();
    for b in (0..qbits).rev() {
        let t = m.shl(b);
        if n.cmp(&t) != Ordering::Less {
            n.sub(&t);
            q.set_bit(b);
        }
    }
    round(q, -s, !n.is_zero(), neg)
}

/// `(q + a little more if sticky) * 2^e` rounded to nearest, ties to even, to a 64-bit
/// significand (fewer below the normal range); `Err(Inf)` past the largest finite value.
fn round(q: Big, e: i64, sticky: bool, neg: bool) -> Result<Ld, NotFinite> {
    let bits = q.bits() as i64;
    let drop = (bits - 64).max(MIN_EXP - e).max(0);
    let (mut m, mut e) = if drop == 0 {
        (q.low_u64(), e)
    } else {
        let half = q.bit((drop - 1) as u64);
        let below = sticky || q.any_below((drop - 1) as u64);
        let m = q.shr(drop as u64).low_u64() as u128;
        let m = m + (half && (below || m & 1 == 1)) as u128;
        if m >> 64 != 0 {
            ((m >> 1) as u64, e + drop + 1)
        } else {
            (m as u64, e + drop)
        }
    };
    if m == 0 {
        return Ok(Ld { neg, mant: 0, exp: 0 });
    }
    // Keep the significand small-exponent-first: strip trailing zeros (any form is the same value).
    let tz = m.trailing_zeros();
    m >>= tz;
    e += tz as i64;
    if e + 63 - m.leading_zeros() as i64 > MAX_TOP {
        return Err(NotFinite::Inf);
    }
    Ok(Ld { neg, mant: m, exp: e })
}

impl Ld {
    pub const ZERO: Ld = Ld { neg: false, mant: 0, exp: 0 };

    /// `self + other` in `long double`: exact, then rounded once.
    pub fn plus(self, other: Ld) -> Result<Ld, NotFinite> {
        if self.mant == 0 && other.mant == 0 {
            return Ok(Ld { neg: self.neg && other.neg, mant: 0, exp: 0 });
        }
        if self.mant == 0 {
            return Ok(other);
        }
        if other.mant == 0 {
            return Ok(self);
        }
        let e = self.exp.min(other.exp);
        let a = Big::from_u64(self.mant).shl((self.exp - e) as u64);
        let b = Big::from_u64(other.mant).shl((other.exp - e) as u64);
        let (sum, neg) = if self.neg == other.neg {
            let mut s = a;
            s.add(&b);
            (s, self.neg)
        } else {
            match a.cmp(&b) {
                Ordering::Equal => return Ok(Ld { neg: false, mant: 0, exp: 0 }),
                Ordering::Greater => {
                    let mut s = a;
                    s.sub(&b);
                    (s, self.neg)
                }
                Ordering::Less => {
                    let mut s = b;
                    s.sub(&a);
                    (s, other.neg)
                }
            }
        };
        round(sum, e, false, neg)
    }

    /// redis-server's text of a result (`ld2string`'s human mode): `%.17Lf`, trailing zeros
    /// and a trailing point removed, "-0" written "0".
    pub fn format(&self) -> String {
        let mant = Big::from_u64(self.mant);
        let (int, frac) = if self.exp >= 0 {
            (mant.shl(self.exp as u64).to_decimal(), String::new())
        } else {
            let k = (-self.exp) as u64;
            let mut int = mant.shr(k);
            // The fraction's first 17 decimals: (fraction * 10^17) / 2^k, rounded.
            let mut f = mant.low_bits(k);
            f.mul_pow10(17);
            let mut digits = f.shr(k);
            let half = f.bit(k - 1);
            let below = f.any_below(k - 1);
            if half && (below || digits.low_u64() & 1 == 1) {
                digits.add_small(1);
            }
            let mut d = digits.to_decimal();
            if d.len() > 17 {
                int.add_small(1);
                d = "0".into();
            }
            let d = format!("{d:0>17}");
            (int.to_decimal(), d.trim_end_matches('0').to_string())
        };
        let body = if frac.is_empty() { int } else { format!("{int}.{frac}") };
        if self.neg && body != "0" {
            format!("-{body}")
        } else {
            body
        }
    }
}

/// Non-negative integers of any size, little-endian 32-bit limbs, no high zero limbs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn zero() -> Big {
        Big(vec![])
    }

    fn from_u64(v: u64) -> Big {
        let mut b = Big(vec![v as u32, (v >> 32) as u32]);
        b.trim();
        b
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn bits(&self) -> u64 {
        match self.0.last() {
            None => 0,
            Some(&top) => 32 * self.0.len() as u64 - top.leading_zeros() as u64,
        }
    }

    fn bit(&self, i: u64) -> bool {
        self.0.get((i / 32) as usize).is_some_and(|l| l >> (i % 32) & 1 == 1)
    }

    fn set_bit(&mut self, i: u64) {
        let at = (i / 32) as usize;
        if self.0.len() <= at {
            self.0.resize(at + 1, 0);
        }
        self.0[at] |= 1 << (i % 32);
    }

    /// Whether any bit below `i` is set.
    fn any_below(&self, i: u64) -> bool {
        let whole = (i / 32) as usize;
        self.0.iter().take(whole).any(|&l| l != 0)
            || (!i.is_multiple_of(32) && self.0.get(whole).is_some_and(|&l| l & ((1u32 << (i % 32)) - 1) != 0))
    }

    fn low_u64(&self) -> u64 {
        self.0.first().copied().unwrap_or(0) as u64 | (self.0.get(1).copied().unwrap_or(0) as u64) << 32
    }

    /// The bits below `k`.
    fn low_bits(&self, k: u64) -> Big {
        let mut b = Big(self.0.iter().take(k.div_ceil(32) as usize).copied().collect());
        if !k.is_multiple_of(32) {
            if let Some(l) = b.0.get_mut((k / 32) as usize) {
                *l &= (1u32 << (k % 32)) - 1;
            }
        }
        b.trim();
        b
    }

    fn shl(&self, n: u64) -> Big {
        if self.is_zero() {
            return Big::zero();
        }
        let (limbs, bits) = ((n / 32) as usize, (n % 32) as u32);
        let mut out = vec![0u32; limbs];
        let mut carry = 0u32;
        for &l in &self.0 {
            out.push(if bits == 0 { l } else { l << bits | carry });
            carry = if bits == 0 { 0 } else { l >> (32 - bits) };
        }
        out.push(carry);
        let mut b = Big(out);
        b.trim();
        b
    }

    fn shr(&self, n: u64) -> Big {
        let (limbs, bits) = ((n / 32) as usize, (n % 32) as u32);
        if limbs >= self.0.len() {
            return Big::zero();
        }
        let src = &self.0[limbs..];
        let mut out = Vec::with_capacity(src.len());
        for i in 0..src.len() {
            let hi = if bits == 0 { 0 } else { src.get(i + 1).map_or(0, |&h| h << (32 - bits)) };
            out.push(src[i] >> bits | hi);
        }
        let mut b = Big(out);
        b.trim();
        b
    }

    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for l in &mut self.0 {
            let v = *l as u64 * m as u64 + carry;
            *l = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    fn mul_pow10(&mut self, mut e: u32) {
        while e > 0 {
            let step = e.min(9);
            self.mul_small(10u32.pow(step));
            e -= step;
        }
    }

    fn add_small(&mut self, a: u32) {
        let mut carry = a as u64;
        for l in &mut self.0 {
            if carry == 0 {
                return;
            }
            let v = *l as u64 + carry;
            *l = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    fn add(&mut self, o: &Big) {
        if self.0.len() < o.0.len() {
            self.0.resize(o.0.len(), 0);
        }
        let mut carry = 0u64;
        for i in 0..self.0.len() {
            let v = self.0[i] as u64 + o.0.get(i).copied().unwrap_or(0) as u64 + carry;
            self.0[i] = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    /// `self -= o`, with `self >= o`.
    fn sub(&mut self, o: &Big) {
        let mut borrow = 0i64;
        for i in 0..self.0.len() {
            let v = self.0[i] as i64 - o.0.get(i).copied().unwrap_or(0) as i64 - borrow;
            borrow = (v < 0) as i64;
            self.0[i] = v.rem_euclid(1 << 32) as u32;
        }
        debug_assert_eq!(borrow, 0, "Big::sub of a larger number");
        self.trim();
    }

    fn cmp(&self, o: &Big) -> Ordering {
        self.0.len().cmp(&o.0.len()).then_with(|| self.0.iter().rev().cmp(o.0.iter().rev()))
    }

    fn to_decimal(&self) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let mut n = self.0.clone();
        let mut parts = vec![];
        while !n.is_empty() {
            let mut rem = 0u64;
            for l in n.iter_mut().rev() {
                let v = rem << 32 | *l as u64;
                *l = (v / 1_000_000_000) as u32;
                rem = v % 1_000_000_000;
            }
            while n.last() == Some(&0) {
                n.pop();
            }
            parts.push(rem as u32);
        }
        let mut s = parts.pop().expect("a digit").to_string();
        for p in parts.iter().rev() {
            s.push_str(&format!("{p:09}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr(a: &str, b: &str) -> String {
        let x = parse(a.as_bytes()).unwrap().unwrap();
        let y = parse(b.as_bytes()).unwrap().unwrap();
        x.plus(y).map(|v| v.format()).unwrap_or_else(|e| format!("{e:?}"))
    }

    #[test]
    fn sums_print_as_redis_server_prints_them() {
        // Each answer is redis-server 7.0's (x86-64) to SET k a, INCRBYFLOAT k b.
        for (a, b, want) in [
            ("10.5", "0.1", "10.6"),
            ("10.6", "0x1p-3", "10.725"),
            ("0", "0.1", "0.1"),
            ("1", "-1", "0"),
            ("-0", "-0", "0"),
            ("3", "1e3", "1003"),
            ("5.0e3", "2.0e2", "5200"),
            ("1", "0.00000000000000001", "1.00000000000000001"),
            ("0", "0.000000000000000001", "0"),
            ("0", "-0.000000000000000001", "0"),
            ("0", "0.000000000000000005", "0"),
            ("0", "0.000000000000000015", "0.00000000000000002"),
            ("0", "0.000000000000000025", "0.00000000000000002"),
            ("123456789.123456789", "0", "123456789.12345678899873747"),
            ("0", "0.99999999999999999999", "1"),
            ("3.7e-4951", "0", "0"),
            ("0", "0.3", "0.3"),
            ("0.1", "0.2", "0.3"),
            ("1.5", "-3.25", "-1.75"),
            ("9223372036854775807", "1", "9223372036854775808"),
            ("18446744073709551615", "1", "18446744073709551616"),
            ("1e20", "1", "100000000000000000000"),
            ("1.5e300", "0", "1500000000000000000049800109861472166362379239118673928551219718248973529929812708792854310575830930686530644566050229406926646739311017606984258288377434143937602778196710661234655944195770838513268846826150205418632995547271874827072936230594920013241190363994471886080567336615911694509046614720512"),
        ] {
            assert_eq!(incr(a, b), want, "{a} + {b}");
        }
        assert_eq!(incr("1e4932", "1e4932"), "Inf");
        assert_eq!(incr("10.725", "1e300"), "1000000000000000000008997324079559193870523944273290747938260082321265646596180935755849152083750497190350372508614274835903592556184672983913096260520748646287327135641843653294084255107606016789726652932370030551382947620994540294772781889620606179267611627097410650567187386105690089424915104006144");
    }

    #[test]
    fn text_is_read_as_string2ld_reads_it() {
        for bad in ["", " 1", "1 ", "1e", "1e+", "0x", "0xp1", ".", "-", "nan", "NaN", "1x", "1\x00", "1e5000", "1e-5000", "--1", "0x1p"] {
            assert!(parse(bad.as_bytes()).is_none(), "{bad:?}");
        }
        for (good, want) in
            [("1.", "1"), (".5", "0.5"), ("+2", "2"), ("0X1.8P1", "3"), ("1E2", "100"), ("-0.0", "0"), ("00012", "12"), ("0x10", "16")]
        {
            assert_eq!(parse(good.as_bytes()).unwrap().unwrap().format(), want, "{good}");
        }
        assert_eq!(parse(b"-Infinity"), Some(Err(NotFinite::Inf)));
        assert_eq!(parse(b"inf"), Some(Err(NotFinite::Inf)));
        // The extremes: the largest finite value and the smallest subnormal read back.
        assert!(parse(b"1.18973149535723176502e4932").unwrap().is_ok());
        assert!(parse(b"1.18973149535723176509e4932").is_none());
        assert!(parse(b"3.7e-4951").unwrap().is_ok());
    }
}
