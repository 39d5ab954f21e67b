//! What one stats request returns, `LatcfsStats`: its fields (one per
//! counter, then the derived rates), its JSON form and its stats line.

use std::io::Write;

use anyhow::{Context, Result};
use scx_stats::serde_json::{self, Value};
use scx_stats::{Meta, StatsServerData};
use scx_stats_derive::Stats;
use serde::{Deserialize, Deserializer, Serialize};

use super::counters::{Counters, NAMES};

/// The fields of `LatcfsStats` after the counters, derived from them.
pub const DERIVED: [&str; 2] = ["recent_rate", "fast_rate"];

/// What one stats request returns: the events since the client's previous
/// request, one field per counter in `NAMES` (same names, same order), then
/// the `DERIVED` rates. `--help-stats` prints these descriptions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, Stats)]
#[stat(
    top,
    desc = "scx_latcfs: events since the previous request, summed over CPUs (a rate without a sample is null in JSON, - on the stats line)"
)]
pub struct LatcfsStats {
    #[stat(desc = "tasks queued in a vtime queue (ops.enqueue)")]
    pub enq: u64,
    #[stat(desc = "task wakeups")]
    pub wakeup: u64,
    #[stat(desc = "tasks a CPU pulled from its own LLC's vtime queue")]
    pub shared: u64,
    #[stat(desc = "slice ends where the running task kept its CPU with a fresh slice")]
    pub keep: u64,
    #[stat(desc = "wakeups whose sleeper credit hit the --slice-lag-us bound")]
    pub lag_clamp: u64,
    #[stat(desc = "tasks a CPU pulled from the latency queue")]
    pub lat_dispatch: u64,
    #[stat(desc = "wakeup preemptions by latency-sensitive tasks")]
    pub lat_preempt: u64,
    #[stat(desc = "picks where the latency head was too far ahead of the fair head to bypass it")]
    pub lat_refused: u64,
    #[stat(desc = "picks where the starvation guard made the fair head go first")]
    pub lat_guard: u64,
    #[stat(desc = "idle CPU searches (wakeups, forks, execs)")]
    pub sis_search: u64,
    #[stat(desc = "searches that found the wake target idle; the task goes straight to it")]
    pub sis_target: u64,
    #[stat(desc = "searches that found the task's previous CPU idle")]
    pub sis_prev: u64,
    #[stat(desc = "searches that found the task's recent_used_cpu idle")]
    pub sis_recent: u64,
    #[stat(
        desc = "searches where recent_used_cpu was a candidate (same LLC, allowed, not prev or target) but busy"
    )]
    pub sis_recent_miss: u64,
    #[stat(
        desc = "searches that found an idle CPU by scanning the target's LLC (an idle core first), the part the task may use"
    )]
    pub sis_llc: u64,
    #[stat(desc = "searches that found an idle CPU in the rest of the target's NUMA node")]
    pub sis_node: u64,
    #[stat(desc = "searches that found an idle CPU anywhere else the task may run")]
    pub sis_any: u64,
    #[stat(desc = "searches that found no idle CPU: the task is queued")]
    pub sis_fail: u64,
    #[stat(desc = "runnable tasks of the root cgroup that skipped all cgroup weight work")]
    pub cg_root_fast: u64,
    #[stat(
        desc = "requeues that moved a task's cgroup weight bookkeeping to a new cgroup (a runnable task changed cgroup)"
    )]
    pub cg_move: u64,
    #[stat(
        desc = "requeues that left it untouched: same cgroup and weight (the autogroup move of each exiting task, affinity changes)"
    )]
    pub cg_move_skip: u64,
    #[stat(desc = "recomputations of a cgroup's hierarchical weight")]
    pub cg_recompute: u64,
    #[stat(desc = "cgroups active now (a runnable task or an active child): a level, not a count")]
    pub cg_active: u64,
    #[stat(
        desc = "cgroups that could not be tracked (no room or no memory in the BPF map): their tasks keep their own weight; the loader logs them"
    )]
    pub cg_untracked: u64,
    #[stat(
        desc = "cgroups deeper than the tracked depth (32 levels), accounted as their ancestor at that depth; the loader logs them"
    )]
    pub cg_flattened: u64,
    #[stat(
        desc = "cgroups removed while still active (a task's last dequeue to come), taken out of their parent at removal"
    )]
    pub cg_exit_active: u64,
    #[stat(desc = "tasks served ahead of the queue for having waited longer than --max-wait-ms")]
    pub rescue: u64,
    #[stat(desc = "idle CPUs woken for a task just queued")]
    pub idle_kick: u64,
    #[stat(
        desc = "CPUs taken by a higher sched class (RT, deadline); their local tasks were queued again"
    )]
    pub cpu_release: u64,
    #[stat(desc = "wakeups that preempted a running task")]
    pub preempt: u64,
    #[stat(desc = "of those, the ones whose victim ran on another CPU than the wakeup (an IPI)")]
    pub preempt_remote: u64,
    #[stat(
        desc = "preempted tasks that went on after the wakee on their CPU, with the rest of their slice"
    )]
    pub preempt_resume: u64,
    #[stat(
        desc = "wakeups that won but found the running task protected: a timer preempts it when its protection ends"
    )]
    pub preempt_defer: u64,
    #[stat(
        desc = "of those timers, the ones that preempted (the same slice still ran and tasks waited)"
    )]
    pub preempt_late: u64,
    #[stat(desc = "slice timers armed, for a running task's slice end while tasks wait")]
    pub slice_timer_arm: u64,
    #[stat(desc = "slice timers fired")]
    pub slice_timer_fire: u64,
    #[stat(desc = "slices a timer ended between ticks because tasks waited")]
    pub slice_cut: u64,
    #[stat(
        desc = "tasks a CPU took from another LLC's queue: its own had none it may run, or that task was owed much more"
    )]
    pub steal: u64,
    #[stat(desc = "percent: sis_recent / (sis_recent + sis_recent_miss)")]
    #[serde(deserialize_with = "nan_if_null")]
    pub recent_rate: f64,
    #[stat(desc = "percent: (sis_target + sis_prev + sis_recent) / sis_search")]
    #[serde(deserialize_with = "nan_if_null")]
    pub fast_rate: f64,
}

/// A rate without a sample is NaN here and null in JSON (serde_json writes
/// a NaN as null); read null back as NaN.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl LatcfsStats {
    /// The record for a counter delta. The counters are matched to the
    /// fields by name, so a counter added to `NAMES` needs nothing here.
    pub fn from_counters(c: &Counters) -> Result<Self> {
        let mut fields: serde_json::Map<String, Value> = NAMES
            .iter()
            .zip(c.0)
            .map(|(name, v)| (name.to_string(), Value::from(v)))
            .collect();
        let (recent, fast) = c.sis_rates();
        fields.insert(DERIVED[0].into(), recent.into());
        fields.insert(DERIVED[1].into(), fast.into());
        serde_json::from_value(Value::Object(fields)).context("building the stats record")
    }

    /// The stats line: `name=value` pairs in counter order, then the rates
    /// (`-` where there was nothing to divide by).
    pub fn line(&self) -> String {
        let fields = serde_json::to_value(self).unwrap_or(Value::Null);
        let mut out = String::from("latcfs:");
        for name in NAMES {
            let v = fields.get(name).map_or("?".into(), Value::to_string);
            out.push_str(&format!(" {name}={v}"));
        }
        let rate = |r: f64| {
            if r.is_finite() {
                format!("{r:.1}%")
            } else {
                "-".into()
            }
        };
        out.push_str(&format!(
            " recent_rate={} fast_rate={}",
            rate(self.recent_rate),
            rate(self.fast_rate)
        ));
        out
    }
}

/// `--help-stats`: every field and what it counts.
pub fn describe(w: &mut impl Write) -> Result<()> {
    StatsServerData::<(), Counters>::new()
        .add_meta(LatcfsStats::meta())
        .describe_meta(w, None)
}
