//! Command-line flags and their mapping onto the BPF side's tunables.
//!
//! Every range is enforced by clap while parsing, so a bad value is refused
//! before anything is opened or loaded.

use std::time::Duration;

use clap::Parser;

pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("LATCFS_GIT_REV"),
    ")"
);

/// scx_latcfs: CFS-style weighted fair (vruntime) scheduling, as a sched_ext
/// BPF scheduler.
///
/// While it runs, every task on the machine is scheduled by it. It detaches on
/// Ctrl-C or SIGTERM (exit 0), and the kernel falls back to its own fair
/// class. Needs root and a kernel built with CONFIG_SCHED_CLASS_EXT=y.
#[derive(Debug, Clone, Parser)]
#[command(name = "scx_latcfs", version = VERSION, about, long_about)]
pub struct Opts {
    /// Base time slice, in microseconds: how long a task runs before the next
    /// task in vruntime order may take its CPU. A task alone on its CPU gets
    /// a fresh slice instead of a context switch. Range 100-100000.
    #[arg(long, value_name = "US", default_value_t = 3000,
          value_parser = clap::value_parser!(u64).range(100..=100_000))]
    pub slice_us: u64,

    /// Sleeper credit bound, in microseconds of weighted runtime: a waking
    /// task starts at most this far behind the queue's current vruntime, so
    /// a long sleeper cannot monopolise a CPU when it wakes. 0 gives no
    /// credit at all. Range 0-1000000.
    #[arg(long, value_name = "US", default_value_t = 3000,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub slice_lag_us: u64,

    /// Print a line of scheduler counters every SECS seconds (fractions
    /// allowed, 0.1-3600). Off by default.
    #[arg(long, value_name = "SECS", value_parser = parse_interval)]
    pub stats: Option<Duration>,

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
}

impl Opts {
    pub fn tunables(&self) -> BpfTunables {
        BpfTunables {
            slice_ns: self.slice_us * 1000,
            slice_lag_ns: self.slice_lag_us * 1000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Opts, clap::Error> {
        Opts::try_parse_from(std::iter::once("scx_latcfs").chain(args.iter().copied()))
    }

    #[test]
    fn command_is_well_formed() {
        Opts::command().debug_assert();
    }

    #[test]
    fn defaults_map_to_nanoseconds() {
        let t = parse(&[]).unwrap().tunables();
        assert_eq!(
            t,
            BpfTunables {
                slice_ns: 3_000_000,
                slice_lag_ns: 3_000_000
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
    fn verbose_and_unknown() {
        assert!(parse(&["-v"]).unwrap().verbose);
        assert!(parse(&["--verbose"]).unwrap().verbose);
        assert!(parse(&["--bogus"]).is_err());
    }
}
