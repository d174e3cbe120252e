//! The software isolation of soft-plane vSSDs: a weighted-fair token bucket per vSSD, as Linux
//! containers and Docker throttle block I/O, priced in one currency for reads and writes.
//!
//! A tenant with weight w is guaranteed a share w of its region's nominal capacity: tokens are
//! nanoseconds of the region working at full speed, refilled at w per nanosecond. Reading r
//! bytes costs r / R and writing w bytes w / W, R and W being the region's nominal read and
//! write bandwidths from the device's timing (a die reads a page in tR plus its transfer,
//! programs a multi-plane page in tPROG plus its transfers; a channel moves its bytes per
//! second), so the work an SSD does is priced as the mix of IOPS and bandwidth it is. A tenant
//! waits while its bucket is empty; an operation is charged after it runs, for everything it
//! made the device do (its application's compaction too), so a bucket can go into debt and
//! the tenant then waits longer. Tokens a tenant cannot use (its bucket is full) spill into a
//! pool the others borrow from before they wait, as Linux's hierarchical token bucket lends a
//! class's unused rate to its siblings: weighted-fair and work-conserving, so capacity a
//! tenant leaves idle is not lost (`borrow = false` makes every bucket a hard cap). The per-die
//! queues sit in the vSSD layer (`die_queue_depth`).

use serde::{Deserialize, Serialize};
use ssdlab_core::Config;

/// Nominal bandwidths of a set of dies (bytes per second).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    pub read_bytes_per_s: f64,
    pub write_bytes_per_s: f64,
}

/// The nominal capacity of `dies` dies spread over `channels` channels of a device.
pub fn nominal(dev: &Config, dies: u32, channels: u32) -> Capacity {
    let g = &dev.geometry;
    let t = &dev.timing;
    let bus = t.channel_bytes_per_s as f64;
    let xfer_s = |bytes: f64| bytes / bus;
    let page = g.page_bytes as f64;
    let read_die = page / (t.page_read_ns as f64 * 1e-9 + xfer_s(page));
    let unit = page * g.planes_per_die as f64;
    let write_die = unit / (t.page_program_ns as f64 * 1e-9 + xfer_s(unit));
    Capacity {
        read_bytes_per_s: (dies as f64 * read_die).min(channels as f64 * bus),
        write_bytes_per_s: (dies as f64 * write_die).min(channels as f64 * bus),
    }
}

impl Capacity {
    /// Nanoseconds of the region at full speed that reading and writing these bytes take.
    pub fn cost_ns(&self, read_bytes: u64, write_bytes: u64) -> f64 {
        read_bytes as f64 / self.read_bytes_per_s * 1e9 + write_bytes as f64 / self.write_bytes_per_s * 1e9
    }
}

/// One vSSD's bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenBucket {
    /// Tokens (region-ns) per ns: the tenant's weight.
    pub rate: f64,
    /// Most tokens the bucket holds.
    pub burst: f64,
    tokens: f64,
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket for a tenant of weight `rate` (0 < rate <= 1) that may burst for
    /// `burst_ns` of the region's time.
    pub fn new(rate: f64, burst_ns: f64) -> TokenBucket {
        assert!(rate > 0.0 && rate.is_finite() && burst_ns >= 0.0);
        TokenBucket { rate, burst: burst_ns, tokens: burst_ns, last_ns: 0 }
    }

    /// Add the tokens of the time since the last refill; returns what did not fit.
    fn refill(&mut self, t: u64) -> f64 {
        if t <= self.last_ns {
            return 0.0;
        }
        let full = self.tokens + (t - self.last_ns) as f64 * self.rate;
        self.last_ns = t;
        self.tokens = full.min(self.burst);
        full - self.tokens
    }

    /// When an operation arriving at `t` may start: once the bucket is out of debt.
    pub fn ready(&mut self, t: u64) -> u64 {
        self.refill(t);
        if self.tokens >= 0.0 {
            t
        } else {
            t + (-self.tokens / self.rate).ceil() as u64
        }
    }

    /// Charge `cost` tokens at `t` (after the operation ran).
    pub fn charge(&mut self, t: u64, cost: f64) {
        self.refill(t);
        self.tokens -= cost;
    }

    pub fn tokens(&self) -> f64 {
        self.tokens
    }
}

/// The buckets of the tenants sharing a region, and the pool of tokens they lend each other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limiter {
    buckets: Vec<Option<TokenBucket>>,
    borrow: bool,
    pool: f64,
    pool_max: f64,
}

impl Limiter {
    /// One entry per tenant (None: not limited).
    pub fn new(buckets: Vec<Option<TokenBucket>>, borrow: bool) -> Limiter {
        let pool_max = buckets.iter().flatten().map(|b| b.burst).sum();
        Limiter { buckets, borrow, pool: 0.0, pool_max }
    }

    fn refill_all(&mut self, t: u64) {
        for b in self.buckets.iter_mut().flatten() {
            let spill = b.refill(t);
            if self.borrow {
                self.pool = (self.pool + spill).min(self.pool_max);
            }
        }
    }

    /// When tenant `i`'s operation arriving at `t` may start: now if its bucket (with what it
    /// can borrow) is out of debt, else when its own refill and the spill of the tenants with
    /// full buckets will have paid the debt.
    pub fn ready(&mut self, i: usize, t: u64) -> u64 {
        if self.buckets[i].is_none() {
            return t;
        }
        self.refill_all(t);
        let lending: f64 = if self.borrow {
            self.buckets
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .filter_map(|(_, b)| b.as_ref())
                .filter(|b| b.tokens >= b.burst)
                .map(|b| b.rate)
                .sum()
        } else {
            0.0
        };
        let b = self.buckets[i].as_mut().expect("limited");
        if b.tokens < 0.0 && self.pool > 0.0 {
            let take = self.pool.min(-b.tokens);
            b.tokens += take;
            self.pool -= take;
        }
        if b.tokens >= 0.0 {
            t
        } else {
            t + (-b.tokens / (b.rate + lending)).ceil() as u64
        }
    }

    /// Charge tenant `i` for work that ran at `t`.
    pub fn charge(&mut self, i: usize, t: u64, cost: f64) {
        if let Some(b) = self.buckets[i].as_mut() {
            b.charge(t, cost);
        }
    }

    pub fn bucket(&self, i: usize) -> Option<&TokenBucket> {
        self.buckets[i].as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_holds_a_tenant_to_its_share() {
        // Weight 1/4: an operation costing 1 ms of the region may run every 4 ms on average.
        let mut b = TokenBucket::new(0.25, 1_000_000.0);
        let mut t = 0;
        for _ in 0..1000 {
            t = b.ready(t);
            b.charge(t, 1_000_000.0);
        }
        let per_op = t as f64 / 999.0;
        assert!((per_op - 4_000_000.0).abs() < 10_000.0, "{per_op}");
    }

    #[test]
    fn nominal_capacity_follows_dies_and_channels() {
        let dev = crate::config::device_config("quick").unwrap();
        let one = nominal(&dev, 4, 1);
        let two = nominal(&dev, 8, 2);
        // Reads of a 16 KiB page: 115 us + 99 us per die; four dies outrun one 166 MB/s bus.
        assert!((one.read_bytes_per_s - 166e6).abs() < 1.0, "{one:?}");
        assert!((two.read_bytes_per_s - 2.0 * one.read_bytes_per_s).abs() < 1.0);
        // Writes: 32 KiB per 1.6 ms + 197 us per die.
        assert!((one.write_bytes_per_s / 4.0 - 32768.0 / 1.797e-3).abs() < 1e4, "{one:?}");
    }

    #[test]
    fn idle_shares_are_lent_only_when_borrowing() {
        // Tenant 0 (weight 3/4) is idle; tenant 1 (1/4) asks for everything it can get.
        let run = |borrow: bool| {
            let mut l = Limiter::new(vec![Some(TokenBucket::new(0.75, 1e6)), Some(TokenBucket::new(0.25, 1e6))], borrow);
            let mut t = 0;
            let mut ops = 0;
            while t < 1_000_000_000 {
                t = l.ready(1, t);
                l.charge(1, t, 1e6);
                ops += 1;
                t += 1;
            }
            ops
        };
        let (hard, lent) = (run(false), run(true));
        assert!((240..=260).contains(&hard), "{hard}");
        assert!(lent > 900, "{lent}");
    }
}
