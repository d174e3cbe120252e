//! The swap-frequency analysis of the document (FlashBlox §3.1.4).
//!
//! Wear of channel i: s_i (erases to date); imbalance x = s_max / s_avg must stay at most
//! 1 + d after a L weeks (a in (0, 1), L the device's service life). Worst case: all writes
//! (M per week) go to one channel. Rotating that workload over the N channels, 1/f weeks on
//! each, after K rounds every channel has M K (in units of a period's erases) and during the
//! next period the hot one reaches M K + M while the average is M K + M / N, so
//! x = (K + 1) / (K + 1/N) <= 1 + d, i.e. K >= (N - 1 - d) / (N d), bounded above by 1/d.
//! N K swaps in a L weeks suffice: a swap every a L / (N K) weeks. The adaptive trigger swaps
//! when a channel has erased g = M / f since the last swap, the space a channel erases
//! between two swaps under the worst case.

use serde::{Deserialize, Serialize};

pub const DAYS_PER_WEEK: f64 = 7.0;
pub const WEEKS_PER_YEAR: f64 = 365.25 / 7.0;

/// K >= (N - 1 - d) / (N d): rounds of the rotation before x stays within 1 + d.
pub fn k_min(n: u32, d: f64) -> f64 {
    assert!(n >= 2 && d > 0.0);
    (n as f64 - 1.0 - d) / (n as f64 * d)
}

/// x during the period after K full rounds over N channels: (K + 1) / (K + 1/N).
pub fn imbalance_after_rounds(k: f64, n: u32) -> f64 {
    (k + 1.0) / (k + 1.0 / n as f64)
}

/// What the analysis asks for a device of `n` channels that must stay within 1 + `d` after
/// `a` of `years` of service.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SwapPlan {
    pub channels: u32,
    pub d: f64,
    pub a: f64,
    pub lifetime_weeks: f64,
    pub k_min: f64,
    /// The upper bound of K (1/d): N/d swaps always suffice.
    pub k_bound: f64,
    /// N K swaps within a L weeks.
    pub swaps: f64,
    pub swaps_bound: f64,
    /// Time between swaps: a L / (N K).
    pub period_days: f64,
    /// The same with K = 1/d.
    pub period_days_bound: f64,
}

pub fn plan(channels: u32, years: f64, a: f64, d: f64) -> SwapPlan {
    assert!(years > 0.0 && a > 0.0 && a <= 1.0);
    let weeks = years * WEEKS_PER_YEAR;
    let k = k_min(channels, d);
    let kb = 1.0 / d;
    let n = channels as f64;
    SwapPlan {
        channels,
        d,
        a,
        lifetime_weeks: weeks,
        k_min: k,
        k_bound: kb,
        swaps: n * k,
        swaps_bound: n * kb,
        period_days: a * weeks * DAYS_PER_WEEK / (n * k),
        period_days_bound: a * weeks * DAYS_PER_WEEK / (n * kb),
    }
}

/// The adaptive threshold g = M / f: erased bytes in one swap period of the worst case, for a
/// worst-case erase rate of `m_bytes_per_week`.
pub fn threshold_bytes(m_bytes_per_week: f64, period_days: f64) -> u64 {
    (m_bytes_per_week * period_days / DAYS_PER_WEEK).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documents_example() {
        // N = 16, d = 0.1, five years, a = 0.9: a swap every 10 to 12 days.
        let p = plan(16, 5.0, 0.9, 0.1);
        assert!((p.k_min - 9.3125).abs() < 1e-9);
        assert!((p.swaps - 149.0).abs() < 1e-9 && (p.swaps_bound - 160.0).abs() < 1e-9);
        assert!(p.period_days > 10.0 && p.period_days < 12.0, "{}", p.period_days);
        assert!(p.period_days_bound > 10.0 && p.period_days_bound < p.period_days);
        // At K = K_min the imbalance is exactly 1 + d; more rounds, less.
        assert!((imbalance_after_rounds(p.k_min, 16) - 1.1).abs() < 1e-9);
        assert!(imbalance_after_rounds(20.0, 16) < 1.1);
        // More channels need more swaps (Table 2's trend).
        assert!(plan(32, 5.0, 0.9, 0.1).period_days < p.period_days && plan(8, 5.0, 0.9, 0.1).period_days > p.period_days);
    }
}
