//! Paired comparisons for benches that measure several sides round by round (each round
//! takes one sample of every side, in a rotating order). The machine's drift and its bursts
//! of noise hit every side of a round alike, so statistics are taken over the rounds and
//! their interval is a bootstrap that resamples whole rounds: the pairing survives
//! resampling, which a difference of per-side medians throws away.

use std::fmt;

/// Resamples per interval; a fixed seed, so that a rerun on the same figures agrees.
const RESAMPLES: usize = 2000;

/// A statistic with its 95 % bootstrap interval, over `rounds` rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The statistic over every round.
    pub value: f64,
    /// The interval's low end.
    pub lo: f64,
    /// The interval's high end.
    pub hi: f64,
    /// How many rounds it is taken over.
    pub rounds: usize,
}

impl fmt::Display for Estimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = f.precision().unwrap_or(3);
        write!(
            f,
            "{:.p$} [{:.p$}, {:.p$}]",
            self.value,
            self.lo,
            self.hi,
            p = p
        )
    }
}

/// The `p` quantile (0..=1) of `xs`, nearest rank; NaN when empty.
pub fn quantile(xs: &mut [f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let idx = ((xs.len() as f64 - 1.0) * p).round() as usize;
    xs[idx.min(xs.len() - 1)]
}

/// `stat` over all `n` rounds, with the 2.5 % and 97.5 % points of `stat` over resamples
/// of the rounds (drawn with replacement). `stat` gets the indices of the rounds to use.
pub fn bootstrap(n: usize, stat: impl Fn(&[usize]) -> f64) -> Estimate {
    let all: Vec<usize> = (0..n).collect();
    let value = stat(&all);
    if n == 0 {
        return Estimate {
            value,
            lo: value,
            hi: value,
            rounds: 0,
        };
    }
    // xorshift64: enough to pick indices, and no dependency.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut stats: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let idx: Vec<usize> = (0..n).map(|_| next()).collect();
            stat(&idx)
        })
        .filter(|s| s.is_finite())
        .collect();
    stats.sort_by(f64::total_cmp);
    let at = |q: f64| {
        stats
            .get(((stats.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    Estimate {
        value,
        lo: at(0.025),
        hi: at(0.975),
        rounds: n,
    }
}

/// The `p` quantile of `series` over the rounds `idx`.
pub fn quantile_of(series: &[f64], idx: &[usize], p: f64) -> f64 {
    let mut xs: Vec<f64> = idx.iter().map(|&i| series[i]).collect();
    quantile(&mut xs, p)
}

/// Per-round differences `a - base`.
pub fn differences(a: &[f64], base: &[f64]) -> Vec<f64> {
    a.iter().zip(base).map(|(x, b)| x - b).collect()
}

/// The `p` quantile of `series`, with its interval.
pub fn quantile_estimate(series: &[f64], p: f64) -> Estimate {
    bootstrap(series.len(), |idx| quantile_of(series, idx, p))
}

/// The ratio of the `p` quantiles of two series measured in the same rounds, with its
/// interval (both resampled with the same rounds).
pub fn ratio(num: &[f64], den: &[f64], p: f64) -> Estimate {
    let n = num.len().min(den.len());
    bootstrap(n, |idx| quantile_of(num, idx, p) / quantile_of(den, idx, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut xs = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&mut xs, 0.5), 3.0);
        assert_eq!(quantile(&mut xs, 0.0), 1.0);
        assert_eq!(quantile(&mut xs, 1.0), 5.0);
        assert!(quantile(&mut [], 0.5).is_nan());
    }

    #[test]
    fn pairing_removes_shared_drift() {
        // Both sides drift from 10 to 40 together; b is always 1 above a. The difference
        // of medians and the median of differences agree here, but only the paired
        // interval is narrow: resampling rounds keeps each pair together.
        let a: Vec<f64> = (0..200).map(|i| 10.0 + 30.0 * i as f64 / 200.0).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 1.0).collect();
        let d = quantile_estimate(&differences(&b, &a), 0.5);
        assert_eq!((d.value, d.lo, d.hi, d.rounds), (1.0, 1.0, 1.0, 200));
        let r = ratio(&b, &a, 0.5);
        assert!(r.lo <= r.value && r.value <= r.hi && r.value > 1.0, "{r}");
    }

    #[test]
    fn interval_brackets_the_value_and_is_repeatable() {
        let xs: Vec<f64> = (0..101).map(|i| ((i * 37) % 101) as f64).collect();
        let e = quantile_estimate(&xs, 0.5);
        assert_eq!(e.value, 50.0);
        assert!(e.lo < 50.0 && e.hi > 50.0, "{e}");
        assert_eq!(e, quantile_estimate(&xs, 0.5));
        assert_eq!(
            format!("{e:.1}"),
            format!("50.0 [{:.1}, {:.1}]", e.lo, e.hi)
        );
    }
}
