//! The BPF side's event counters, as the loader reads and prints them.

use crate::bpf_intf;

/// Counter names in `enum latcfs_stat` order, as printed on the stats line.
pub const NAMES: [&str; bpf_intf::latcfs_stat_LATCFS_NR_STATS as usize] = [
    "enq",
    "wakeup",
    "direct",
    "shared",
    "keep",
    "lag_clamp",
    "lat_dispatch",
    "lat_preempt",
    "lat_refused",
    "lat_guard",
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

    /// One line, `name=value` pairs in counter order.
    pub fn line(&self) -> String {
        let fields: Vec<String> = NAMES
            .iter()
            .zip(self.0.iter())
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
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
            (latcfs_stat_LATCFS_STAT_DIRECT, "direct"),
            (latcfs_stat_LATCFS_STAT_SHARED, "shared"),
            (latcfs_stat_LATCFS_STAT_KEEP, "keep"),
            (latcfs_stat_LATCFS_STAT_LAG_CLAMP, "lag_clamp"),
            (latcfs_stat_LATCFS_STAT_LAT_DISPATCH, "lat_dispatch"),
            (latcfs_stat_LATCFS_STAT_LAT_PREEMPT, "lat_preempt"),
            (latcfs_stat_LATCFS_STAT_LAT_REFUSED, "lat_refused"),
            (latcfs_stat_LATCFS_STAT_LAT_GUARD, "lat_guard"),
        ] {
            assert_eq!(NAMES[idx as usize], name);
        }
    }

    #[test]
    fn delta_and_line() {
        let a = Counters([1, 2, 3, 4, 5, 6, 0, 0, 0, 0]);
        let b = Counters([11, 2, 13, 4, 25, 7, 1, 2, 3, 4]);
        assert_eq!(b.since(&a), Counters([10, 0, 10, 0, 20, 1, 1, 2, 3, 4]));
        assert_eq!(
            b.since(&a).line(),
            "latcfs: enq=10 wakeup=0 direct=10 shared=0 keep=20 lag_clamp=1 \
             lat_dispatch=1 lat_preempt=2 lat_refused=3 lat_guard=4"
        );
    }
}
