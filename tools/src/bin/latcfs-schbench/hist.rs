//! Log-linear latency histogram (the fio / schbench bucket layout).
//!
//! Values below `2 * SUB` (512) have a bucket each and are kept exactly.
//! Above that every power of two `[2^k, 2^(k+1))` is split into `SUB` (256)
//! equal buckets of width `2^(k - SUB_BITS)`. A bucket stands for its
//! midpoint (rounded down), so a reported value is within half a bucket
//! width of every value in the bucket: a relative error of at most
//! `1 / (2 * SUB)` = 1/512 ≈ 0.2%. Percentiles are also kept within the
//! exact min and max, tracked on the side. The whole u64 range is covered
//! (57 groups of 256 buckets); the bucket array grows only as far as the
//! largest value recorded, so a histogram of µs latencies stays a few KiB.
//!
//! Each thread keeps its own histogram; `merge` adds one into another.

/// log2 of the number of linear buckets per power of two.
pub const SUB_BITS: u32 = 8;
/// Linear buckets per power of two.
pub const SUB: u64 = 1 << SUB_BITS;
/// Bound on |representative - value| / value for values of 1 and more.
#[cfg(test)]
pub const MAX_REL_ERROR: f64 = 1.0 / (2 * SUB) as f64;

/// The bucket a value falls in.
pub fn bucket_of(v: u64) -> usize {
    if v < 2 * SUB {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    // How many low bits the bucket does not resolve: at least 1 here.
    let shift = msb - SUB_BITS;
    // v >> shift lies in [SUB, 2 * SUB): its low SUB_BITS pick the bucket.
    let sub = (v >> shift) - SUB;
    (((shift + 1) as usize) << SUB_BITS) + sub as usize
}

/// The value a bucket stands for: the value itself below 512, else the
/// midpoint of the bucket's range (rounded down).
pub fn bucket_value(idx: usize) -> u64 {
    let idx = idx as u64;
    if idx < 2 * SUB {
        return idx;
    }
    let shift = (idx >> SUB_BITS) - 1;
    let low = (SUB + (idx & (SUB - 1))) << shift;
    low + (1 << (shift - 1))
}

/// The percentiles schbench computes, in order; each table prints a subset.
pub const PERCENTILES: [f64; 5] = [20.0, 50.0, 90.0, 99.0, 99.9];

/// One computed percentile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pct {
    /// Representative value of the bucket the percentile falls in.
    pub value: u64,
    /// Samples between the previous percentile of the list and this one
    /// (for the first, from 0): the "(N samples)" column of schbench.
    pub band: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hist {
    buckets: Vec<u64>,
    count: u64,
    min: u64,
    max: u64,
}

impl Hist {
    pub fn record(&mut self, v: u64) {
        let idx = bucket_of(v);
        if idx >= self.buckets.len() {
            self.buckets.resize(idx + 1, 0);
        }
        self.buckets[idx] += 1;
        if self.count == 0 || v < self.min {
            self.min = v;
        }
        self.max = self.max.max(v);
        self.count += 1;
    }

    pub fn merge(&mut self, other: &Hist) {
        if other.count == 0 {
            return;
        }
        if other.buckets.len() > self.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (d, s) in self.buckets.iter_mut().zip(&other.buckets) {
            *d += s;
        }
        self.min = if self.count == 0 {
            other.min
        } else {
            self.min.min(other.min)
        };
        self.max = self.max.max(other.max);
        self.count += other.count;
    }

    pub fn clear(&mut self) {
        self.buckets.clear();
        self.count = 0;
        self.min = 0;
        self.max = 0;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Exact smallest value recorded, 0 when empty.
    pub fn min(&self) -> u64 {
        self.min
    }

    /// Exact largest value recorded, 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Percentiles as schbench computes them: the p-th percentile is the
    /// representative of the first bucket at which the running count reaches
    /// p/100 of all samples, kept within the exact min and max.
    /// `pcts` must be ascending. An empty histogram gives 0 for everything.
    pub fn percentiles(&self, pcts: &[f64]) -> Vec<Pct> {
        let mut out = Vec::with_capacity(pcts.len());
        let mut cum = 0u64;
        let mut prev_cum = 0u64;
        let mut buckets = self.buckets.iter().enumerate();
        let mut current: Option<usize> = None;
        for &p in pcts {
            let want = p / 100.0 * self.count as f64;
            // Advance until the running count reaches the target; the
            // bucket where that happened also serves later percentiles
            // whose target it already covers.
            while current.is_none() || (cum as f64) < want {
                match buckets.next() {
                    Some((i, &n)) => {
                        cum += n;
                        current = Some(i);
                    }
                    None => break,
                }
            }
            // The extremes are known exactly: a midpoint past them is not
            // reported.
            let value = current.map_or(0, |i| bucket_value(i).clamp(self.min, self.max));
            out.push(Pct {
                value,
                band: cum - prev_cum,
            });
            prev_cum = cum;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values spread over 0..2^40: every one below 4096, the edges of every
    /// power of two, and a pseudo-random sample in between.
    fn sample_values() -> Vec<u64> {
        let mut v: Vec<u64> = (0..4096).collect();
        for k in 1..=40u32 {
            let p = 1u64 << k;
            v.extend([p - 1, p, p + 1, p + p / 3, p + p / 2 - 1]);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.push(x >> (24 + x % 40));
        }
        v
    }

    #[test]
    fn small_values_are_exact() {
        for v in 0..2 * SUB {
            assert_eq!(bucket_of(v), v as usize);
            assert_eq!(bucket_value(v as usize), v);
        }
    }

    #[test]
    fn representative_within_relative_error() {
        for v in sample_values() {
            let idx = bucket_of(v);
            let rep = bucket_value(idx);
            assert_eq!(
                bucket_of(rep),
                idx,
                "representative of {v} leaves its bucket"
            );
            if v > 0 {
                let err = (rep as f64 - v as f64).abs() / v as f64;
                assert!(err <= MAX_REL_ERROR, "v={v} rep={rep} err={err}");
            }
        }
    }

    #[test]
    fn buckets_are_monotonic_and_contiguous() {
        let mut last = 0;
        for v in 0..(1u64 << 20) {
            let idx = bucket_of(v);
            assert!(
                idx == last || idx == last + 1,
                "v={v} idx={idx} last={last}"
            );
            last = idx;
        }
        // Whole u64 range maps inside 57 groups without overflow.
        assert_eq!(bucket_of(u64::MAX), 57 * SUB as usize - 1);
        assert!(bucket_value(bucket_of(u64::MAX)) > u64::MAX - (1 << 55));
        assert_eq!(bucket_of(1 << 40), 33 << SUB_BITS);
        assert_eq!(bucket_value(33 << SUB_BITS), (1 << 40) + (1 << 31));
    }

    #[test]
    fn uniform_distribution() {
        let mut h = Hist::default();
        for v in 1..=1000 {
            h.record(v);
        }
        let p = h.percentiles(&PERCENTILES);
        let near = |got: u64, want: f64| {
            assert!(
                (got as f64 - want).abs() <= want * MAX_REL_ERROR + 1.0,
                "got {got} want {want}"
            )
        };
        near(p[0].value, 200.0);
        near(p[1].value, 500.0);
        near(p[2].value, 900.0);
        near(p[3].value, 990.0);
        near(p[4].value, 999.0);
        // Exact below 512.
        assert_eq!(p[1].value, 500);
        assert_eq!(p[0].band, 200);
        assert_eq!(p[1].band, 300);
        assert_eq!(h.min(), 1);
        assert_eq!(h.max(), 1000);
        assert_eq!(h.count(), 1000);
        // Bands add up to the count at the last percentile.
        let total: u64 = p.iter().map(|x| x.band).sum();
        assert!((999..=1000).contains(&total));
    }

    #[test]
    fn single_value() {
        let mut h = Hist::default();
        h.record(12345);
        let p = h.percentiles(&PERCENTILES);
        // 12345's bucket stands for 12336, but min and max are exact.
        assert_eq!(bucket_value(bucket_of(12345)), 12336);
        assert!(p.iter().all(|x| x.value == 12345));
        assert_eq!(p[0].band, 1);
        assert!(p[1..].iter().all(|x| x.band == 0));
        assert_eq!((h.min(), h.max(), h.count()), (12345, 12345, 1));
    }

    #[test]
    fn empty() {
        let h = Hist::default();
        let p = h.percentiles(&PERCENTILES);
        assert_eq!(p.len(), PERCENTILES.len());
        assert!(p.iter().all(|x| *x == Pct { value: 0, band: 0 }));
        assert_eq!((h.min(), h.max(), h.count()), (0, 0, 0));
    }

    #[test]
    fn zero_is_a_value() {
        let mut h = Hist::default();
        h.record(0);
        h.record(7);
        assert_eq!((h.min(), h.max()), (0, 7));
        assert_eq!(h.percentiles(&[50.0])[0].value, 0);
    }

    #[test]
    fn merge_equals_recording_everything() {
        let vals = sample_values();
        let mut all = Hist::default();
        let mut parts = vec![Hist::default(); 3];
        for (i, &v) in vals.iter().enumerate() {
            all.record(v);
            parts[i % 3].record(v);
        }
        let mut merged = Hist::default();
        // Merging into and from empty histograms is neutral.
        merged.merge(&Hist::default());
        for p in &parts {
            merged.merge(p);
        }
        assert_eq!(merged.count(), all.count());
        assert_eq!(merged.min(), all.min());
        assert_eq!(merged.max(), all.max());
        assert_eq!(
            merged.percentiles(&PERCENTILES),
            all.percentiles(&PERCENTILES)
        );

        let mut a = Hist::default();
        a.record(50);
        let mut b = Hist::default();
        b.record(3);
        b.record(1 << 30);
        a.merge(&b);
        assert_eq!((a.min(), a.max(), a.count()), (3, 1 << 30, 3));
        a.clear();
        assert_eq!(a, Hist::default());
    }
}
