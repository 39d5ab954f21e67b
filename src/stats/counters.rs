//! The counters as the BPF side keeps them: one per `enum latcfs_stat`
//! value, summed over CPUs.

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
    "sis_node",
    "sis_any",
    "sis_fail",
    "cg_root_fast",
    "cg_move",
    "cg_move_skip",
    "cg_recompute",
    "cg_active",
    "cg_untracked",
    "cg_flattened",
    "cg_exit_active",
    "rescue",
    "idle_kick",
    "cpu_release",
    "preempt",
    "preempt_remote",
    "preempt_resume",
    "preempt_defer",
    "preempt_late",
    "slice_timer_arm",
    "slice_timer_fire",
    "slice_cut",
    "steal",
];

/// Counters that are levels, not event counts: an interval reports their
/// latest value.
const GAUGES: [usize; 1] = [bpf_intf::latcfs_stat_LATCFS_STAT_CG_ACTIVE as usize];

/// A snapshot of every counter, summed over CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters(pub [u64; NAMES.len()]);

// Arrays longer than 32 have no derived Default.
impl Default for Counters {
    fn default() -> Self {
        Counters([0; NAMES.len()])
    }
}

impl Counters {
    /// What happened between `earlier` and `self` (gauges: `self`'s value).
    pub fn since(&self, earlier: &Counters) -> Counters {
        let mut d = Counters::default();
        for (i, v) in d.0.iter_mut().enumerate() {
            *v = self.0[i].wrapping_sub(earlier.0[i]);
        }
        for g in GAUGES {
            d.0[g] = self.0[g];
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

    /// `self` and `other` added up, counter by counter (gauges: `other`'s).
    pub fn plus(&self, other: &Counters) -> Counters {
        let mut s = *self;
        for (v, o) in s.0.iter_mut().zip(other.0) {
            *v = v.wrapping_add(o);
        }
        for g in GAUGES {
            s.0[g] = other.0[g];
        }
        s
    }
}
