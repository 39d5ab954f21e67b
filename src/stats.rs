//! The BPF side's event counters and how they reach the user: the
//! scheduler serves them through an scx_stats server on a UNIX socket
//! (`SOCKET`), and `--stats` (in the scheduler's process) and `--monitor`
//! (from another) are clients of it.
//!
//! Adding a counter: a value in `enum latcfs_stat` (bpf/intf.h), its name in
//! `NAMES`, and a field of that name, with its description, in
//! `LatcfsStats`; the unit tests fail until all three agree.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use crossbeam::channel::{Receiver, RecvTimeoutError, Sender};
use log::warn;
use scx_stats::serde_json::{self, Value};
use scx_stats::{
    Meta, StatsClient, StatsOpener, StatsOps, StatsReader, StatsServer, StatsServerData, ToJson,
};
use scx_stats_derive::Stats;
use serde::{Deserialize, Deserializer, Serialize};

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

/// Where the stats server listens: scx_stats' default for the root
/// scheduler, where generic scx tools look for it.
pub const SOCKET: &str = "/var/run/scx/root/stats";

/// How long a client waits for an answer: long enough to ride out a reload
/// of the BPF scheduler after a restart request, when nobody answers.
const CLIENT_TIMEOUT_MS: u64 = 60_000;

/// `--help-stats`: every field and what it counts.
pub fn describe(w: &mut impl Write) -> Result<()> {
    StatsServerData::<(), Counters>::new()
        .add_meta(LatcfsStats::meta())
        .describe_meta(w, None)
}

/// The server's side: each connection keeps the running totals of its own
/// previous request and gets what happened since.
/// What the server answers once the scheduler has begun to exit.
const STOPPING: &str = "the scheduler is exiting";

/// Ask the run loop for its counters. Its end of the channels goes away
/// when the scheduler exits, which can happen while a client connects as
/// well as while it reads, so both answer `STOPPING`.
fn sample(req: &Sender<()>, res: &Receiver<Counters>) -> Result<Counters> {
    req.send(()).map_err(|_| anyhow!("{STOPPING}"))?;
    res.recv().map_err(|_| anyhow!("{STOPPING}"))
}

fn server_data() -> StatsServerData<(), Counters> {
    let open: Box<dyn StatsOpener<(), Counters>> = Box::new(|(req, res)| {
        let mut prev = sample(req, res)?;
        let read: Box<dyn StatsReader<(), Counters>> = Box::new(move |_args, (req, res)| {
            let now = sample(req, res)?;
            let delta = now.since(&prev);
            prev = now;
            LatcfsStats::from_counters(&delta)?.to_json()
        });
        Ok(read)
    });
    StatsServerData::new()
        .add_meta(LatcfsStats::meta())
        .add_ops("top", StatsOps { open, close: None })
}

/// The stats server, for the life of the scheduler process (across
/// restarts). Dropping it stops it and removes its socket, unless another
/// process has bound a new one there since.
pub struct Server {
    server: Option<StatsServer<(), Counters>>,
    path: PathBuf,
    /// (dev, inode) of the socket this server bound.
    bound: Option<(u64, u64)>,
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl Server {
    /// Listen on `path` (normally `SOCKET`), replacing a stale socket left
    /// there by an instance that did not exit cleanly. The `Feed` is the
    /// scheduler's end: it answers the requests for the counters.
    pub fn launch(path: &Path) -> Result<(Self, Feed)> {
        let server = StatsServer::new(server_data())
            .set_path(path)
            .launch()
            .with_context(|| format!("starting the stats server on {}", path.display()))?;
        let (res, req) = server.channels();
        let feed = Feed {
            req,
            res,
            base: Counters::default(),
        };
        let server = Self {
            server: Some(server),
            path: path.to_path_buf(),
            bound: file_id(path),
        };
        Ok((server, feed))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Stops the listener (scx_stats wakes it with a connection).
        self.server.take();
        if self.bound.is_some() && file_id(&self.path) == self.bound {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The run loop's end of the stats server.
pub struct Feed {
    req: Receiver<()>,
    res: Sender<Counters>,
    /// What the BPF schedulers before a restart counted, so that the totals
    /// clients see never go back.
    base: Counters,
}

impl Feed {
    /// Wait up to `wait` for a request for the counters and answer it with
    /// `read()` (the current scheduler's totals) plus what earlier ones
    /// counted.
    pub fn serve(&self, wait: Duration, read: impl FnOnce() -> Result<Counters>) -> Result<()> {
        match self.req.recv_timeout(wait) {
            Ok(()) => {
                let now = read()?;
                // Fails only when the server is gone: nobody to answer.
                let _ = self.res.send(self.base.plus(&now));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
        }
        Ok(())
    }

    /// A BPF scheduler ends (before a restart) with these totals.
    pub fn carry_over(&mut self, last: &Counters) {
        self.base = self.base.plus(last);
    }
}

/// How a client prints each interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The `latcfs: k=v ...` line.
    Line,
    /// One JSON object per line, fields as in `LatcfsStats`.
    Json,
}

/// What a client prints, as the whole error, when the instance it reads
/// goes away under it, however the race between the two ends.
const INSTANCE_STOPPED: &str = "the scx_latcfs instance stopped";

/// Did a request fail because the instance is exiting or gone? The server
/// answers `STOPPING` once the scheduler's run loop has ended (scx_stats
/// hands that back as a message under a `StatsErrno` context, so it is
/// looked for along the whole chain); after that the socket is closed or
/// removed under the client.
fn instance_gone(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        if let Some(io) = c.downcast_ref::<io::Error>() {
            return matches!(
                io.kind(),
                io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::NotFound
                    | io::ErrorKind::ConnectionRefused
            );
        }
        let msg = c.to_string();
        msg.contains(STOPPING) || msg == "connection closed"
    })
}

/// The error of a failed request: `INSTANCE_STOPPED` alone when the
/// instance went away, else `what` with the cause.
fn request_error(e: anyhow::Error, what: &str) -> anyhow::Error {
    if instance_gone(&e) {
        anyhow!("{INSTANCE_STOPPED}")
    } else {
        e.context(what.to_string())
    }
}

/// Connect to the scx_latcfs stats server on `path`, check that it is
/// one, and start its interval (the first answer after this covers the
/// time since).
pub fn connect(path: &Path) -> Result<StatsClient> {
    let shown = path.display();
    let mut client = StatsClient::new()
        .set_path(path)
        .connect(Some(CLIENT_TIMEOUT_MS))
        .map_err(|e| {
            let kind = e.downcast_ref::<io::Error>().map(io::Error::kind);
            match kind {
                Some(io::ErrorKind::NotFound) => {
                    anyhow!("no scx_latcfs instance is running ({shown} does not exist)")
                }
                Some(io::ErrorKind::ConnectionRefused) => {
                    anyhow!("no scx_latcfs instance is running (nothing listens on {shown})")
                }
                Some(io::ErrorKind::PermissionDenied) => {
                    anyhow!("cannot connect to {shown}: permission denied (run as root)")
                }
                _ => e.context(format!("connecting to {shown}")),
            }
        })?;
    let meta: BTreeMap<String, Value> = client
        .request("stats_meta", vec![])
        .map_err(|e| request_error(e, &format!("reading the stats description from {shown}")))?;
    let ours = LatcfsStats::meta().name;
    if !meta.contains_key(&ours) {
        let theirs: Vec<&String> = meta.keys().collect();
        bail!("the stats server on {shown} is not scx_latcfs's (it serves {theirs:?})");
    }
    client
        .request::<Value>("stats", vec![])
        .map_err(|e| request_error(e, &format!("reading stats from {shown}")))?;
    Ok(client)
}

/// Print the stats of the instance serving `path` every `every`, in
/// `format`, on stdout, until `stop` is set or stdout is closed.
pub fn monitor(path: &Path, every: Duration, format: Format, stop: &AtomicBool) -> Result<()> {
    const STEP: Duration = Duration::from_millis(100);
    let mut client = connect(path)?;
    let mut due = Instant::now() + every;
    loop {
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= due {
                break;
            }
            std::thread::sleep((due - now).min(STEP));
        }
        let stats: LatcfsStats = client
            .request("stats", vec![])
            .map_err(|e| request_error(e, "reading stats from the running instance"))?;
        let text = match format {
            Format::Line => stats.line(),
            Format::Json => serde_json::to_string(&stats).context("formatting stats as JSON")?,
        };
        match writeln!(io::stdout().lock(), "{text}") {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            r => r.context("writing stats to stdout")?,
        }
        // Keep to the grid; skip the intervals missed while blocked.
        due += every;
        let now = Instant::now();
        if due < now {
            due = now + every;
        }
    }
}

/// `--stats`: print this process's own stats from a thread, as a client of
/// its stats server on `path`.
pub fn spawn_printer(
    path: &Path,
    every: Duration,
    format: Format,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("stats".into())
        .spawn(move || {
            if let Err(e) = monitor(&path, every, format, &stop) {
                if !stop.load(Ordering::Relaxed) {
                    warn!("--stats: {e:#}");
                }
            }
        })
        .context("starting the stats thread")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exiting_instance_reads_as_stopped_whatever_the_timing() {
        // The server's answer once the run loop is gone, as scx_stats'
        // client hands it back: the message under an errno context.
        let exiting = anyhow!("\"{STOPPING}\"").context(scx_stats::StatsErrno(22));
        // The socket closed under the client, before or during a read.
        let closed = anyhow!("connection closed");
        let reset: anyhow::Error = io::Error::from(io::ErrorKind::ConnectionReset).into();
        let pipe = anyhow::Error::from(io::Error::from(io::ErrorKind::BrokenPipe)).context("x");
        for e in [exiting, closed, reset, pipe] {
            assert_eq!(request_error(e, "reading").to_string(), INSTANCE_STOPPED);
        }
        let other = request_error(anyhow!("expected value at line 1"), "reading");
        assert_eq!(format!("{other:#}"), "reading: expected value at line 1");
    }

    #[test]
    fn a_run_loop_gone_before_or_after_connect_reads_as_stopping() {
        // The run loop gone: its ends of both channels dropped.
        let (req, _) = crossbeam::channel::unbounded::<()>();
        let (_, res) = crossbeam::channel::unbounded::<Counters>();
        let e = sample(&req, &res).unwrap_err();
        assert_eq!(e.to_string(), STOPPING);
        // Only the answer lost: the request went, the loop exited after.
        let (req, _keep) = crossbeam::channel::unbounded::<()>();
        let e = sample(&req, &res).unwrap_err();
        assert_eq!(e.to_string(), STOPPING);
        let wrapped = e.context(scx_stats::StatsErrno(22));
        assert_eq!(
            request_error(wrapped, "reading").to_string(),
            INSTANCE_STOPPED
        );
    }

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
            (latcfs_stat_LATCFS_STAT_SIS_NODE, "sis_node"),
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
        let line = LatcfsStats::from_counters(&b).unwrap().line();
        assert!(
            line.starts_with("latcfs: enq=0 wakeup=10 shared=20 "),
            "{line}"
        );
        assert!(
            line.ends_with(" recent_rate=48.0% fast_rate=366.7%"),
            "{line}"
        );
        assert!(LatcfsStats::from_counters(&Counters::default())
            .unwrap()
            .line()
            .ends_with("recent_rate=- fast_rate=-"));
        assert_eq!(b.plus(&a).0[0], 5);
        assert_eq!(b.plus(&a).0[1], 10);
    }

    /// Every counter in NAMES needs a field of the same name in
    /// LatcfsStats (with a description for --help-stats), in NAMES order,
    /// followed by the derived rates.
    #[test]
    fn stats_fields_match_names() {
        let want: Vec<&str> = NAMES.iter().chain(DERIVED.iter()).copied().collect();
        let meta = LatcfsStats::meta();
        let mut have: Vec<&str> = meta.fields.keys().map(String::as_str).collect();
        let mut sorted = want.clone();
        sorted.sort_unstable();
        have.sort_unstable();
        assert_eq!(
            have, sorted,
            "LatcfsStats' fields must be NAMES plus {DERIVED:?}: add a field per new counter"
        );
        for (name, f) in &meta.fields {
            assert!(f.attrs.desc.is_some(), "LatcfsStats.{name} has no desc");
        }
        // Declaration order, as serialized: the JSON output follows it.
        let json = serde_json::to_string(&LatcfsStats::default()).unwrap();
        let order: Vec<&str> = json
            .trim_matches(|c| c == '{' || c == '}')
            .split(',')
            .filter_map(|kv| kv.split(':').next())
            .map(|k| k.trim_matches('"'))
            .collect();
        assert_eq!(order, want, "LatcfsStats' fields are not in NAMES order");
    }

    #[test]
    fn from_counters_fills_every_field() {
        let mut c = Counters::default();
        for (i, v) in c.0.iter_mut().enumerate() {
            *v = 1000 + i as u64;
        }
        let s = LatcfsStats::from_counters(&c).unwrap();
        let v = serde_json::to_value(&s).unwrap();
        for (i, name) in NAMES.iter().enumerate() {
            assert_eq!(v[name], Value::from(1000 + i as u64), "{name}");
        }
        assert!(s.recent_rate.is_finite() && s.fast_rate.is_finite());
    }

    #[test]
    fn json_round_trip_with_and_without_rates() {
        let empty = LatcfsStats::from_counters(&Counters::default()).unwrap();
        assert!(empty.recent_rate.is_nan() && empty.fast_rate.is_nan());
        let json = serde_json::to_string(&empty).unwrap();
        assert!(json.starts_with("{\"enq\":0,"), "{json}");
        assert!(
            json.ends_with(",\"recent_rate\":null,\"fast_rate\":null}"),
            "{json}"
        );
        let back: LatcfsStats = serde_json::from_str(&json).unwrap();
        assert!(back.recent_rate.is_nan() && back.fast_rate.is_nan());
        assert_eq!(back.line(), empty.line());

        let mut c = Counters::default();
        c.0[bpf_intf::latcfs_stat_LATCFS_STAT_SIS_SEARCH as usize] = 4;
        c.0[bpf_intf::latcfs_stat_LATCFS_STAT_SIS_PREV as usize] = 1;
        let s = LatcfsStats::from_counters(&c).unwrap();
        let back: LatcfsStats = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back.fast_rate, 25.0);
        assert!(back.recent_rate.is_nan());
    }

    #[test]
    fn describe_lists_every_field() {
        let mut out = Vec::new();
        describe(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("[LatcfsStats] "), "{text}");
        for name in NAMES.iter().chain(DERIVED.iter()) {
            assert!(
                text.lines()
                    .any(|l| l.split_whitespace().next() == Some(*name)),
                "{name} missing from:\n{text}"
            );
        }
    }

    /// The whole path without a scheduler: a server on a private socket,
    /// a thread standing in for the run loop, a client reading deltas.
    #[test]
    fn server_feed_and_client() {
        let dir = std::env::temp_dir().join(format!("latcfs-stats-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("stats");
        let err = format!("{:#}", connect(&path).err().unwrap());
        assert!(
            err.starts_with("no scx_latcfs instance is running"),
            "{err}"
        );

        let (server, mut feed) = Server::launch(&path).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let loop_thread = std::thread::spawn(move || {
            // Each read counts 3 more enqueues; a "restart" halfway
            // resets the BPF side's counters, which the feed carries over.
            let mut n = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                feed.serve(Duration::from_millis(10), || {
                    n += 3;
                    let mut c = Counters::default();
                    c.0[0] = n;
                    Ok(c)
                })
                .unwrap();
                if n == 6 {
                    let mut last = Counters::default();
                    last.0[0] = n;
                    feed.carry_over(&last);
                    n = 0;
                }
            }
        });

        let mut client = connect(&path).unwrap();
        for _ in 0..4 {
            let s: LatcfsStats = client.request("stats", vec![]).unwrap();
            assert_eq!(s.enq, 3, "{s:?}");
        }
        stop.store(true, Ordering::Relaxed);
        loop_thread.join().unwrap();
        drop(server);
        assert!(!path.exists(), "the socket outlived the server");
        let err = format!("{:#}", connect(&path).err().unwrap());
        assert!(
            err.starts_with("no scx_latcfs instance is running"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
