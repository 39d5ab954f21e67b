//! The BPF side's event counters, as the loader reads and prints them.

use crate::bpf_intf;

/// Counter names in `enum latcfs_stat` order, as printed on the stats line.
pub const NAMES: [&str; bpf_intf::latcfs_stat_LATCFS_NR_STATS as usize] = [
    "enq",
    "wakeup",
    "shared",
    "keep",
    "lag_clamp",
    "lat_dispatch",
    "lat_preempt",
    "lat_refused",
    "lat_guard",
    "sis_search",
    "sis_target",
    "sis_prev",
    "sis_recent",
    "sis_recent_miss",
    "sis_llc",
    "sis_any",
    "sis_fail",
];

/// A snapshot of every counter, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters(pub [u64; NAMES.len()]);

impl Counters {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Counters) -> Counters {
        let mut d = Counters::default();
        for (i, v) in d.0.iter_mut().enumerate() {
            *v = self.0[i].wrapping_sub(earlier.0[i]);
        }
        d
    }

    fn get(&self, stat: bpf_intf::latcfs_stat) -> u64 {
        self.0[stat as usize]
    }

    /// The idle-selection hit rates, as CFS' SIS statistics report them:
    /// recent_used_cpu hits / (hits + misses), and target+prev+recent hits
    /// / searches, in percent (None without a sample).
    pub fn sis_rates(&self) -> (Option<f64>, Option<f64>) {
        use bpf_intf::*;
        let pct = |n: u64, d: u64| (d > 0).then(|| 100.0 * n as f64 / d as f64);
        let recent = self.get(latcfs_stat_LATCFS_STAT_SIS_RECENT);
        let miss = self.get(latcfs_stat_LATCFS_STAT_SIS_RECENT_MISS);
        let fast = self.get(latcfs_stat_LATCFS_STAT_SIS_TARGET)
            + self.get(latcfs_stat_LATCFS_STAT_SIS_PREV)
            + recent;
        (
            pct(recent, recent + miss),
            pct(fast, self.get(latcfs_stat_LATCFS_STAT_SIS_SEARCH)),
        )
    }

    /// One line, `name=value` pairs in counter order, then the derived
    /// rates (`-` when there was nothing to divide by).
    pub fn line(&self) -> String {
        let mut fields: Vec<String> = NAMES
            .iter()
            .zip(self.0.iter())
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        let fmt = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.1}%"));
        let (recent, fast) = self.sis_rates();
        fields.push(format!("recent_rate={}", fmt(recent)));
        fields.push(format!("fast_rate={}", fmt(fast)));
        format!("latcfs: {}", fields.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_bpf_enum() {
        use bpf_intf::*;
        for (idx, name) in [
            (latcfs_stat_LATCFS_STAT_ENQUEUE, "enq"),
            (latcfs_stat_LATCFS_STAT_WAKEUP, "wakeup"),
            (latcfs_stat_LATCFS_STAT_SHARED, "shared"),
            (latcfs_stat_LATCFS_STAT_KEEP, "keep"),
            (latcfs_stat_LATCFS_STAT_LAG_CLAMP, "lag_clamp"),
            (latcfs_stat_LATCFS_STAT_LAT_DISPATCH, "lat_dispatch"),
            (latcfs_stat_LATCFS_STAT_LAT_PREEMPT, "lat_preempt"),
            (latcfs_stat_LATCFS_STAT_LAT_REFUSED, "lat_refused"),
            (latcfs_stat_LATCFS_STAT_LAT_GUARD, "lat_guard"),
            (latcfs_stat_LATCFS_STAT_SIS_SEARCH, "sis_search"),
            (latcfs_stat_LATCFS_STAT_SIS_RECENT_MISS, "sis_recent_miss"),
            (latcfs_stat_LATCFS_STAT_SIS_FAIL, "sis_fail"),
        ] {
            assert_eq!(NAMES[idx as usize], name);
        }
    }

    #[test]
    fn delta_line_and_rates() {
        let mut a = Counters::default();
        let mut b = Counters::default();
        for (i, v) in b.0.iter_mut().enumerate() {
            *v = 10 * i as u64;
        }
        a.0[0] = 5;
        let d = b.since(&a);
        assert_eq!(d.0[0], u64::MAX - 4); // counters are free-running
        assert_eq!(d.0[1], 10);
        // search=90 target=100 prev=110 recent=120 miss=130
        let (recent, fast) = b.sis_rates();
        assert!((recent.unwrap() - 100.0 * 120.0 / 250.0).abs() < 1e-9);
        assert!((fast.unwrap() - 100.0 * 330.0 / 90.0).abs() < 1e-9);
        assert_eq!(Counters::default().sis_rates(), (None, None));
        let line = b.line();
        assert!(
            line.starts_with("latcfs: enq=0 wakeup=10 shared=20 "),
            "{line}"
        );
        assert!(
            line.ends_with(" recent_rate=48.0% fast_rate=366.7%"),
            "{line}"
        );
        assert!(Counters::default()
            .line()
            .ends_with("recent_rate=- fast_rate=-"));
    }
}
