//! Command-line flags and their mapping onto the BPF side's tunables.
//!
//! Every range is enforced by clap while parsing, so a bad value is refused
//! before anything is opened or loaded.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::latency::{self, Rule, Target};

pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("LATCFS_GIT_REV"),
    ")"
);

/// scx_latcfs: CFS-style weighted fair (vruntime) scheduling with latency
/// nice, as a sched_ext BPF scheduler.
///
/// While it runs, every task on the machine is scheduled by it. It detaches on
/// Ctrl-C, SIGTERM or SIGHUP (exit 0), and the kernel falls back to its own
/// fair class. Needs root and a kernel built with CONFIG_SCHED_CLASS_EXT=y.
#[derive(Debug, Clone, Parser)]
#[command(name = "scx_latcfs", version = VERSION, about, long_about,
          args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub opts: Opts,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Read or change latency nice in the running instance, without a
    /// restart.
    #[command(subcommand)]
    LatencyNice(LatencyNiceCmd),
}

#[derive(Debug, Clone, Subcommand)]
pub enum LatencyNiceCmd {
    /// Set the latency nice of a process (all its threads), a cgroup (and
    /// its descendants) or a command name. Tasks pick it up at their next
    /// run.
    Set {
        #[command(flatten)]
        target: TargetArgs,
        /// Latency nice, -20 (most latency-sensitive) to 19.
        #[arg(allow_negative_numbers = true, value_parser = latency::parse_nice)]
        value: i32,
    },
    /// Remove the rule set for a process, a cgroup or a command name
    /// (with `set` or `--latency-nice`). Tasks it gave a value to go back
    /// to the next rule that applies at their next run; values inherited
    /// at fork stay.
    Unset {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// List the running scheduler's rules, one `TARGET=VALUE` per line, in
    /// the form `--latency-nice` takes.
    List,
    /// Print the latency nice the running scheduler gives a process.
    Get {
        /// The process.
        #[arg(long)]
        pid: u32,
    },
}

#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct TargetArgs {
    /// A process: every thread of it, and the children it forks later.
    #[arg(long)]
    pid: Option<u32>,
    /// A cgroup v2 directory, e.g. /sys/fs/cgroup/fg: every task in it and
    /// in its descendants without a per-task value.
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,
    /// A command name (as in /proc/PID/comm): tasks running it now, and
    /// from their next exec on.
    #[arg(long, value_name = "NAME", value_parser = latency::parse_comm)]
    comm: Option<String>,
}

impl TargetArgs {
    pub fn target(&self) -> Target {
        match (self.pid, &self.cgroup, &self.comm) {
            (Some(pid), _, _) => Target::Pid(pid),
            (_, Some(path), _) => Target::Cgroup(path.clone()),
            (_, _, Some(comm)) => Target::Comm(comm.clone()),
            // clap's group makes exactly one of them present
            (None, None, None) => Target::Pid(0),
        }
    }
}

/// The help heading of the switches that exist to measure what a mechanism
/// buys (A/B runs), apart from the flags a user tunes.
const DIAGNOSTICS: &str = "Diagnostics (A/B measurement)";

#[derive(Debug, Clone, Args)]
pub struct Opts {
    /// Base time slice, in microseconds: how long a task runs before the next
    /// task in vruntime order may take its CPU. While tasks wait, a timer
    /// ends it on time rather than at the next tick; a task alone on its CPU
    /// gets a fresh slice instead of a context switch; a task that set its
    /// own sched_runtime (sched_setattr) gets that. Range 100-100000.
    #[arg(long, value_name = "US", default_value_t = 3000,
          value_parser = clap::value_parser!(u64).range(100..=100_000))]
    pub slice_us: u64,

    /// Sleeper credit bound, in microseconds of weighted runtime: a waking
    /// task starts at most this far behind the queue's current vruntime, so
    /// a long sleeper cannot monopolise a CPU when it wakes; for a task in a
    /// cgroup, this much of its time within the cgroup (up to 100 ms of the
    /// queue's). It shrinks while tasks wait: n/(n+q) of it with q tasks
    /// queued for n CPUs. 0 gives no credit at all. Range 0-1000000.
    #[arg(long, value_name = "US", default_value_t = 3000,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub slice_lag_us: u64,

    /// Latency nice rule, repeatable: TARGET=VALUE. TARGET is a cgroup v2
    /// path (every task in it and its descendants; the cpu controller must
    /// be enabled for it), pid:N (every thread of process N) or comm:NAME
    /// (tasks running a program of that name); VALUE is -20 (most
    /// latency-sensitive) to 19. Example: --latency-nice /sys/fs/cgroup/fg=-20
    #[arg(long = "latency-nice", value_name = "TARGET=VALUE")]
    pub latency_nice: Vec<Rule>,

    /// Latency offset at latency nice -20, in microseconds of weighted
    /// runtime; each level is 1/20 of it (offset = this * nice / 20). It
    /// decides how far ahead of its fair turn a latency-sensitive task is
    /// served (for a task in a cgroup, in its time within the cgroup), and
    /// how long a +19 task's slice grows. Range 100-100000.
    #[arg(long, value_name = "US", default_value_t = 6000,
          value_parser = clap::value_parser!(u64).range(100..=100_000))]
    pub latency_us: u64,

    /// Wakeup granularity, in microseconds of weighted runtime: how far a
    /// waking task's key must beat a running task's to preempt it, how long
    /// a running task is protected from a wakee of its own latency nice
    /// after its slice starts (less the latency offset a wakee has beyond
    /// the running task's), the least a
    /// preempted task resumes with after the wakee, and how far a
    /// latency-sensitive task's key must beat the fair head's to be served
    /// first. Range 0-100000.
    #[arg(long, value_name = "US", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub wakeup_gran_us: u64,

    /// Starvation guard, in microseconds: the longest the latency queue may
    /// keep bypassing the head of the fair queue. Range 1000-1000000.
    #[arg(long, value_name = "US", default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(1000..=1_000_000))]
    pub latency_budget_us: u64,

    /// Wait bound, in milliseconds: a queued task that has waited this long
    /// runs next on a CPU it may use, whatever its vtime, so that no mix of
    /// weights, cgroups and pinning keeps a task from running for longer
    /// than about 1.25 times this (plus a slice per task ahead of it). It
    /// costs fairness only at extreme weight ratios: such a task gets about
    /// one slice per 1.25 times this instead of its weighted share.
    /// Range 50-10000, well under the kernel watchdog's 30 s.
    #[arg(long, value_name = "MS", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(50..=10_000))]
    pub max_wait_ms: u64,

    /// Skip prev in idle CPU selection (for A/B measurement): a waking task
    /// goes from the wake target straight to its recent CPU and the LLC scan.
    #[arg(long, help_heading = DIAGNOSTICS)]
    pub no_prev_cpu: bool,

    /// Skip recent_used_cpu in idle CPU selection (for A/B measurement).
    #[arg(long, help_heading = DIAGNOSTICS)]
    pub no_recent_cpu: bool,

    /// Do the cgroup weight bookkeeping for root-cgroup tasks too (never
    /// used) and for requeues that change nothing (for A/B measurement of
    /// the two fast paths; shares are the same either way).
    #[arg(long, help_heading = DIAGNOSTICS)]
    pub no_cgroup_fast_paths: bool,

    /// For tests: make the BPF side fail with an error MS milliseconds after
    /// it attached (1-3600000), to check the exit path.
    #[arg(long, value_name = "MS", hide = true,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub test_error_after_ms: Option<u64>,

    /// For tests: track at most N cgroups (1-65536; default 65536) instead
    /// of the BPF side's capacity, to reach the untracked-cgroup path with
    /// few cgroups.
    #[arg(long, value_name = "N", hide = true,
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub test_cgroup_capacity: Option<u32>,

    /// Print a line of scheduler counters every SECS seconds (fractions
    /// allowed, 0.1-3600): what happened in the interval, as "latcfs:
    /// name=value ...". Off by default. The counters come from the stats
    /// server every instance runs (see --monitor).
    #[arg(long, value_name = "SECS", value_parser = parse_interval,
          group = "stats_interval")]
    pub stats: Option<Duration>,

    /// Load nothing: print the stats of the scx_latcfs instance already
    /// running every SECS seconds (0.1-3600), read from its stats server on
    /// /var/run/scx/root/stats (writable by root only), until Ctrl-C or
    /// until that instance exits (exit 1). Fails at once if none runs.
    #[arg(long, value_name = "SECS", value_parser = parse_interval,
          group = "stats_interval",
          conflicts_with_all = ["slice_us", "slice_lag_us", "latency_nice", "latency_us",
                                "wakeup_gran_us", "latency_budget_us", "max_wait_ms", "no_prev_cpu",
                                "no_recent_cpu", "no_cgroup_fast_paths",
                                "test_error_after_ms", "test_cgroup_capacity"])]
    pub monitor: Option<Duration>,

    /// With --stats or --monitor: print each interval as one JSON object on
    /// a line instead, e.g. {"enq":1267,...,"recent_rate":3.2,"fast_rate":28.3}:
    /// the fields of --help-stats in stats-line order, counters as integers,
    /// rates in percent (null without a sample).
    #[arg(long, requires = "stats_interval")]
    pub json: bool,

    /// Print what each stats field means and exit.
    #[arg(long)]
    pub help_stats: bool,

    /// Verbose output: debug logging, and libbpf's messages while loading.
    #[arg(short, long)]
    pub verbose: bool,
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(0.1..=3600.0).contains(&secs) {
        return Err(format!("{secs} is not in 0.1..=3600"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The tunables the BPF side reads from its read-only data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfTunables {
    pub slice_ns: u64,
    pub slice_lag_ns: u64,
    pub latency_range_ns: u64,
    pub wakeup_gran_ns: u64,
    pub lat_budget_ns: u64,
    pub max_wait_ns: u64,
}

impl Opts {
    pub fn tunables(&self) -> BpfTunables {
        BpfTunables {
            slice_ns: self.slice_us * 1000,
            slice_lag_ns: self.slice_lag_us * 1000,
            latency_range_ns: self.latency_us * 1000,
            wakeup_gran_ns: self.wakeup_gran_us * 1000,
            lat_budget_ns: self.latency_budget_us * 1000,
            max_wait_ns: self.max_wait_ms * 1_000_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse_cli(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("scx_latcfs").chain(args.iter().copied()))
    }

    fn parse(args: &[&str]) -> Result<Opts, clap::Error> {
        parse_cli(args).map(|c| c.opts)
    }

    #[test]
    fn command_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_map_to_nanoseconds() {
        let t = parse(&[]).unwrap().tunables();
        assert_eq!(
            t,
            BpfTunables {
                slice_ns: 3_000_000,
                slice_lag_ns: 3_000_000,
                latency_range_ns: 6_000_000,
                wakeup_gran_ns: 1_000_000,
                lat_budget_ns: 20_000_000,
                max_wait_ns: 500_000_000,
            }
        );
    }

    #[test]
    fn flags_map_to_nanoseconds() {
        let o = parse(&["--slice-us", "500", "--slice-lag-us", "0"]).unwrap();
        assert_eq!(o.tunables().slice_ns, 500_000);
        assert_eq!(o.tunables().slice_lag_ns, 0);
    }

    #[test]
    fn slice_bounds() {
        assert!(parse(&["--slice-us", "100"]).is_ok());
        assert!(parse(&["--slice-us", "100000"]).is_ok());
        assert!(parse(&["--slice-us", "99"]).is_err());
        assert!(parse(&["--slice-us", "100001"]).is_err());
        assert!(parse(&["--slice-us", "-5"]).is_err());
        assert!(parse(&["--slice-us", "abc"]).is_err());
    }

    #[test]
    fn slice_lag_bounds() {
        assert!(parse(&["--slice-lag-us", "1000000"]).is_ok());
        assert!(parse(&["--slice-lag-us", "1000001"]).is_err());
    }

    #[test]
    fn stats_interval() {
        assert_eq!(parse(&[]).unwrap().stats, None);
        assert_eq!(
            parse(&["--stats", "2"]).unwrap().stats,
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            parse(&["--stats", "0.5"]).unwrap().stats,
            Some(Duration::from_millis(500))
        );
        assert!(parse(&["--stats", "0"]).is_err());
        assert!(parse(&["--stats", "nan"]).is_err());
        assert!(parse(&["--stats", "3601"]).is_err());
        assert!(parse(&["--stats", "x"]).is_err());
    }

    #[test]
    fn monitor_json_help_stats() {
        let o = parse(&["--monitor", "0.5"]).unwrap();
        assert_eq!(o.monitor, Some(Duration::from_millis(500)));
        assert!(!o.json && !o.help_stats);
        assert!(parse(&["--monitor", "1", "--json"]).unwrap().json);
        assert!(parse(&["--stats", "1", "--json"]).unwrap().json);
        assert!(parse(&["--json"]).is_err());
        assert!(parse(&["--monitor", "1", "--stats", "1"]).is_err());
        assert!(parse(&["--monitor", "1", "--slice-us", "500"]).is_err());
        assert!(parse(&["--monitor", "1", "--no-recent-cpu"]).is_err());
        assert!(parse(&["--monitor", "1", "-v"]).is_ok());
        assert!(parse(&["--monitor", "0"]).is_err());
        assert!(parse(&["--monitor"]).is_err());
        assert!(parse(&["--help-stats"]).unwrap().help_stats);
        assert!(parse_cli(&["--monitor", "1", "latency-nice", "get", "--pid", "1"]).is_err());
    }

    #[test]
    fn verbose_and_unknown() {
        assert!(parse(&["-v"]).unwrap().verbose);
        assert!(parse(&["--verbose"]).unwrap().verbose);
        assert!(parse(&["--bogus"]).is_err());
    }

    #[test]
    fn latency_flags() {
        let o = parse(&[
            "--latency-nice",
            "/sys/fs/cgroup/fg=-20",
            "--latency-nice",
            "pid:1=5",
            "--latency-us",
            "2000",
            "--wakeup-gran-us",
            "0",
            "--latency-budget-us",
            "5000",
        ])
        .unwrap();
        assert_eq!(o.latency_nice.len(), 2);
        assert_eq!(o.latency_nice[0].nice, -20);
        let t = o.tunables();
        assert_eq!(t.latency_range_ns, 2_000_000);
        assert_eq!(t.wakeup_gran_ns, 0);
        assert_eq!(t.lat_budget_ns, 5_000_000);
        assert!(parse(&["--latency-nice", "/x=-21"]).is_err());
        assert!(parse(&["--latency-us", "99"]).is_err());
        assert!(parse(&["--latency-budget-us", "999"]).is_err());
    }

    #[test]
    fn latency_nice_subcommand() {
        let c = parse_cli(&["latency-nice", "set", "--pid", "7", "-20"]).unwrap();
        let Some(Command::LatencyNice(LatencyNiceCmd::Set { target, value })) = c.command else {
            panic!("not parsed as set")
        };
        assert_eq!(value, -20);
        assert_eq!(target.target(), Target::Pid(7));
        let c = parse_cli(&["latency-nice", "set", "--cgroup", "/sys/fs/cgroup/x", "19"]).unwrap();
        assert!(matches!(
            c.command,
            Some(Command::LatencyNice(LatencyNiceCmd::Set { value: 19, .. }))
        ));
        assert!(parse_cli(&["latency-nice", "set", "--pid", "7", "-21"]).is_err());
        assert!(parse_cli(&["latency-nice", "set", "-5"]).is_err());
        assert!(parse_cli(&["latency-nice", "set", "--pid", "1", "--comm", "x", "0"]).is_err());
        assert!(parse_cli(&["--stats", "1", "latency-nice", "get", "--pid", "1"]).is_err());
        assert!(parse_cli(&["latency-nice", "get", "--pid", "1"]).is_ok());
    }

    /// --monitor's conflict list names the scheduler's flags by hand: every
    /// flag but the few that make sense with it must be in it, so that a
    /// new flag cannot be silently ignored by --monitor.
    #[test]
    fn monitor_conflicts_with_every_scheduler_flag() {
        const WITH_MONITOR: [&str; 6] = [
            "monitor",
            "json",
            "verbose",
            "help_stats",
            "help",
            "version",
        ];
        let cmd = Cli::command();
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if WITH_MONITOR.contains(&id) || id == "stats" || arg.is_positional() {
                continue;
            }
            let long = format!("--{}", arg.get_long().expect("a flag without a long name"));
            // a value the flag accepts on its own, if it takes one
            let args: Vec<&str> = if !arg.get_action().takes_values() {
                vec![&long]
            } else if id == "latency_nice" {
                vec![&long, "pid:1=0"]
            } else {
                vec![&long, "1000"]
            };
            assert!(parse(&args).is_ok(), "{args:?} does not parse on its own");
            let mut with = vec!["--monitor", "1"];
            with.extend(&args);
            let kind = parse(&with).err().map(|e| e.kind());
            assert_eq!(
                kind,
                Some(clap::error::ErrorKind::ArgumentConflict),
                "--monitor must refuse {long}: add it to its conflicts_with_all"
            );
        }
    }
}
