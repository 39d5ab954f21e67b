//! latcfs-schbench: a scheduler wakeup latency benchmark with schbench's
//! method, flags and output (written for this project, not schbench's code).
//!
//! Message threads hand fake requests to worker threads over futexes; each
//! worker records how long it took to run after being woken (wakeup
//! latency) and how long its request took (request latency: a short sleep
//! plus matrix math over a private cache footprint), and the main thread
//! samples the request rate every second. See bench.rs for the threads and
//! hist.rs for the histograms.

mod bench;
mod hist;
mod report;

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;

use bench::{Bench, Config};
use hist::Hist;
use report::{Json, LAT_ROWS, PIPE_ROWS, RPS_ROWS};

/// Largest -p transfer, as schbench.
const PIPE_MAX: u64 = 1024 * 1024;
/// Most threads (message threads plus workers) we agree to start.
const MAX_THREADS: usize = 65536;

/// latcfs-schbench: wakeup and request latency under a messaging workload,
/// after schbench (same flags, same report).
///
/// Message threads (-m) each drive -t workers. A worker asks its message
/// thread for work and sleeps on a futex; the message thread wakes it, and
/// the worker records the wakeup latency, then runs a request (sleep -s µs,
/// then -n rounds of a matrix multiply over -F KiB) and records its latency.
/// Tables go to stdout every -i seconds and at the end; percentiles are
/// bucket midpoints within 0.2% of the true value, min and max are exact.
#[derive(Debug, Clone, Parser)]
#[command(name = "latcfs-schbench", version, about, long_about)]
struct Args {
    /// Number of message threads.
    #[arg(short = 'm', long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    message_threads: u32,

    /// Worker threads per message thread [default: online CPUs / -m,
    /// rounded up].
    #[arg(short = 't', long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    threads: Option<u32>,

    /// How long to run, seconds.
    #[arg(short = 'r', long, default_value_t = 30, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    runtime: u64,

    /// Sleep per request, µs (simulated network/disk wait).
    #[arg(short = 's', long = "sleep-usec", visible_alias = "sleep_usec",
          default_value_t = 100, value_name = "USEC",
          value_parser = clap::value_parser!(u64).range(0..=60_000_000))]
    sleep_usec: u64,

    /// Matrix multiply rounds per request (think time).
    #[arg(short = 'n', long, default_value_t = 5, value_name = "N",
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    operations: u64,

    /// Cache footprint per worker, KiB: three square matrices of u64 this
    /// large together.
    #[arg(short = 'F', long = "cache-footprint", visible_alias = "cache_footprint",
          default_value_t = 256, value_name = "KB",
          value_parser = clap::value_parser!(u64).range(0..=1_048_576))]
    cache_footprint: u64,

    /// Print the tables (cumulative since the last reset) every SECS
    /// seconds while running; 0: only at the end.
    #[arg(short = 'i', long = "intervaltime", default_value_t = 10, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    interval: u64,

    /// Zero all statistics once after SECS seconds.
    #[arg(short = 'w', long = "warmuptime", default_value_t = 0, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    warmup: u64,

    /// Zero all statistics every SECS seconds; 0: never.
    #[arg(short = 'z', long = "zerotime", default_value_t = 0, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    zerotime: u64,

    /// Pipe mode: no request work; message and worker threads pass BYTES
    /// back and forth (at most 1 MiB), reporting wakeup latency and
    /// transfer rate.
    #[arg(short = 'p', long = "pipe", default_value_t = 0, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(0..=PIPE_MAX),
          conflicts_with = "rps")]
    pipe: u64,

    /// Requests per second mode: the message threads issue COUNT requests
    /// per second in all, split between them, at the start of each second.
    #[arg(short = 'R', long = "rps", default_value_t = 0, value_name = "COUNT",
          value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    rps: u64,

    /// Don't take the per-CPU spinlock during request work (by default
    /// preempting a worker mid-request stalls the next one on that CPU).
    #[arg(short = 'L', long)]
    no_locking: bool,

    /// Calibration: time the matrix work alone (the sleep is left out of
    /// request latency) and take no locks.
    #[arg(short = 'C', long)]
    calibrate: bool,

    /// Also write the results as JSON to FILE ("-": stdout, after the
    /// tables).
    #[arg(short = 'j', long, value_name = "FILE")]
    json: Option<String>,

    /// A job name to put in the JSON output.
    #[arg(short = 'J', long, value_name = "NAME")]
    jobname: Option<String>,
}

/// Side of the three square u64 matrices that fit in `kb` KiB, as schbench:
/// floor(sqrt(kb * 1024 / 3 / 8)).
fn matrix_size(kb: u64) -> usize {
    let cells = kb * 1024 / 3 / 8;
    let mut n = (cells as f64).sqrt() as u64;
    while n * n > cells {
        n -= 1;
    }
    while (n + 1) * (n + 1) <= cells {
        n += 1;
    }
    n as usize
}

/// What the run measured.
struct Outcome {
    stats: bench::Stats,
    rps: Hist,
    /// Seconds the tables say the run lasted.
    runtime_s: u64,
    average_rps: f64,
    /// Pipe mode: per-worker round trips per second and bytes per second.
    pipe_rate: Option<(f64, f64)>,
    sched_delay_us: (u64, u64),
}

fn print_tables(stats: &bench::Stats, rps: &Hist, runtime_s: u64) -> String {
    let mut s = report::table(
        "Wakeup Latencies",
        "usec",
        runtime_s,
        &stats.wakeup,
        LAT_ROWS,
    );
    s += &report::table(
        "Request Latencies",
        "usec",
        runtime_s,
        &stats.request,
        LAT_ROWS,
    );
    s += &report::table("RPS", "requests", runtime_s, rps, RPS_ROWS);
    s
}

fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")
}

/// Sleep until `until`, returning early when the run is stopped or
/// interrupted.
fn sleep_until(b: &Bench, until: Instant) {
    loop {
        if b.stopping() || b.interrupted() {
            return;
        }
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(100)));
    }
}

fn run_bench(b: &Arc<Bench>, args: &Args) -> Result<Outcome> {
    let pipe = args.pipe > 0;
    let handles = b.start()?;
    let start = Instant::now();
    let runtime = Duration::from_secs(args.runtime);
    let (warmup, zero_every, interval) = (
        Duration::from_secs(args.warmup),
        Duration::from_secs(args.zerotime),
        Duration::from_secs(args.interval),
    );
    let mut rps = Hist::default();
    let (mut last_loops, mut last_tick) = (0u64, start);
    let (mut zero_at, mut zero_loops) = (start, 0u64);
    let mut last_interval = start;
    let mut warm = args.warmup == 0;
    let mut tick = 1u32;

    // One tick a second, on the second, until the runtime is over.
    let end = loop {
        sleep_until(
            b,
            (start + Duration::from_secs(1) * tick).min(start + runtime),
        );
        tick += 1;
        let now = Instant::now();
        if b.stopping() || b.interrupted() {
            break now;
        }
        let elapsed = now - start;
        let done = elapsed >= runtime;
        let loops = b.total_loops();
        let mut current_rps = 0.0;
        if !warm && elapsed >= warmup {
            warm = true;
            eprintln!("warmup done, zeroing stats");
            b.reset();
            rps.clear();
            (zero_at, zero_loops) = (now, loops);
        } else if !pipe {
            let secs = (now - last_tick).as_secs_f64();
            current_rps = (loops - last_loops) as f64 / secs;
            if current_rps.is_finite() {
                rps.record(current_rps as u64);
            }
        }
        (last_loops, last_tick) = (loops, now);
        if args.zerotime > 0 && now - zero_at >= zero_every {
            b.reset();
            rps.clear();
            (zero_at, zero_loops) = (now, loops);
        }
        if done {
            break now;
        }
        if !pipe && args.interval > 0 && now - last_interval >= interval {
            last_interval = now;
            let (dm, dw) = b.sched_delay_us();
            let mut s = print_tables(&b.merged(), &rps, elapsed.as_secs());
            s += &format!("sched delay: message {dm} (usec) worker {dw} (usec)\n");
            s += &format!("current rps: {current_rps:.2}\n");
            emit(&s)?;
        }
    };

    let sched_delay_us = b.sched_delay_us();
    let loops = b.total_loops();
    b.stop();
    let mut result = Ok(());
    for h in handles {
        let r = h
            .join()
            .map_err(|_| anyhow!("a message thread panicked"))
            .and_then(|r| r);
        if result.is_ok() {
            result = r;
        }
    }
    result.context("benchmark thread failed")?;

    let runtime_s = if b.interrupted() {
        (end - start).as_secs()
    } else {
        args.runtime
    };
    let measured = (end - zero_at).as_secs_f64();
    let average_rps = if measured > 0.0 {
        (loops - zero_loops) as f64 / measured
    } else {
        0.0
    };
    let pipe_rate = pipe.then(|| {
        let worker_secs = b.total_worker_runtime_ns() as f64 / 1e9;
        let total = b.total_loops() as f64;
        if worker_secs > 0.0 {
            (total / worker_secs, total * args.pipe as f64 / worker_secs)
        } else {
            (0.0, 0.0)
        }
    });
    Ok(Outcome {
        stats: b.merged(),
        rps,
        runtime_s,
        average_rps,
        pipe_rate,
        sched_delay_us,
    })
}

fn final_text(o: &Outcome) -> String {
    match o.pipe_rate {
        Some((ops, bytes)) => {
            let mut s = report::table(
                "Wakeup Latencies",
                "usec",
                o.runtime_s,
                &o.stats.wakeup,
                PIPE_ROWS,
            );
            let (v, unit) = report::pretty_size(bytes);
            s += &format!("avg worker transfer: {ops:.2} ops/sec {v:.2}{unit}/s\n");
            s
        }
        None => {
            let mut s = print_tables(&o.stats, &o.rps, o.runtime_s);
            s += &format!("average rps: {:.2}\n", o.average_rps);
            s += &format!(
                "sched delay: message {} (usec) worker {} (usec)\n",
                o.sched_delay_us.0, o.sched_delay_us.1
            );
            s
        }
    }
}

fn json(o: &Outcome, args: &Args, cfg: &Config) -> Json {
    let (release, host) = report::uname();
    let cmdline = std::env::args().collect::<Vec<_>>().join(" ");
    let mut normal = vec![("version".to_string(), Json::Str(release))];
    if let Some(j) = &args.jobname {
        normal.push(("jobname".into(), Json::Str(j.clone())));
    }
    normal.extend([
        ("hostname".to_string(), Json::Str(host)),
        ("sched_ext".to_string(), Json::Str(report::sched_ext())),
        ("cmdline".to_string(), Json::Str(cmdline)),
    ]);
    let time = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let pipe = o.pipe_rate.is_some();
    let mut int = vec![("time".to_string(), Json::Int(time))];
    int.extend(report::flat_fields("wakeup_latency", &o.stats.wakeup));
    if !pipe {
        int.extend(report::flat_fields("request_latency", &o.stats.request));
        int.extend(report::flat_fields("rps", &o.rps));
    }
    int.push(("runtime".into(), Json::Int(o.runtime_s)));

    let params = Json::obj([
        ("message_threads", Json::Int(cfg.message_threads as u64)),
        ("worker_threads", Json::Int(cfg.workers as u64)),
        ("runtime", Json::Int(args.runtime)),
        ("sleep_usec", Json::Int(args.sleep_usec)),
        ("operations", Json::Int(args.operations)),
        ("cache_footprint_kb", Json::Int(args.cache_footprint)),
        ("matrix_size", Json::Int(cfg.matrix_size as u64)),
        ("warmuptime", Json::Int(args.warmup)),
        ("intervaltime", Json::Int(args.interval)),
        ("zerotime", Json::Int(args.zerotime)),
        ("pipe", Json::Int(args.pipe)),
        ("rps", Json::Int(args.rps)),
        ("locking", Json::Bool(cfg.locking && !cfg.calibrate)),
        ("calibrate", Json::Bool(cfg.calibrate)),
    ]);
    let mut top = vec![
        // schbench's own layout first, so its consumers find their keys.
        ("normal".to_string(), Json::Obj(normal)),
        ("int".to_string(), Json::Obj(int)),
        ("params".to_string(), params),
        (
            "wakeup_latency".to_string(),
            report::summary(&o.stats.wakeup, if pipe { PIPE_ROWS } else { LAT_ROWS }),
        ),
    ];
    match o.pipe_rate {
        Some((ops, bytes)) => {
            top.push(("worker_ops_per_sec".into(), Json::Num(ops)));
            top.push(("worker_bytes_per_sec".into(), Json::Num(bytes)));
        }
        None => {
            top.push((
                "request_latency".into(),
                report::summary(&o.stats.request, LAT_ROWS),
            ));
            top.push(("rps".into(), report::summary(&o.rps, RPS_ROWS)));
            top.push(("average_rps".into(), Json::Num(o.average_rps)));
        }
    }
    top.push(("runtime".into(), Json::Int(o.runtime_s)));
    Json::Obj(top)
}

fn run(args: Args) -> Result<()> {
    let message_threads = args.message_threads as usize;
    let workers = match args.threads {
        Some(t) => t as usize,
        None => {
            let t = bench::default_workers(message_threads);
            eprintln!("setting worker threads to {t}");
            t
        }
    };
    if message_threads * (workers + 1) > MAX_THREADS {
        bail!(
            "{message_threads} message threads x {workers} workers is more than {MAX_THREADS} threads"
        );
    }
    let cfg = Config {
        message_threads,
        workers,
        sleep_usec: args.sleep_usec,
        operations: args.operations,
        matrix_size: matrix_size(args.cache_footprint),
        pipe_bytes: args.pipe as usize,
        rps: args.rps,
        locking: !args.no_locking,
        calibrate: args.calibrate,
    };
    // Check the JSON destination before spending the runtime.
    let json_file = match args.json.as_deref() {
        None | Some("-") => None,
        Some(path) => Some(
            std::fs::File::create(path).with_context(|| format!("creating JSON file {path}"))?,
        ),
    };

    let b = Bench::new(cfg.clone());
    {
        let b = Arc::clone(&b);
        ctrlc::set_handler(move || b.interrupt()).context("installing the Ctrl-C handler")?;
    }
    let outcome = run_bench(&b, &args)?;
    emit(&final_text(&outcome))?;

    if let Some(path) = args.json.as_deref() {
        let text = json(&outcome, &args, &cfg).render() + "\n";
        match json_file {
            Some(mut f) => f
                .write_all(text.as_bytes())
                .with_context(|| format!("writing JSON file {path}"))?,
            None => emit(&text)?,
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => {
            // --help and --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let text = e.render().to_string();
            eprintln!(
                "latcfs-schbench: {}",
                text.lines().next().unwrap_or("invalid arguments")
            );
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("latcfs-schbench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_sizes() {
        // 256 KiB: sqrt(65536 / 3 / 8 * 1024 / 1024) = sqrt(10922) = 104.
        assert_eq!(matrix_size(256), 104);
        assert_eq!(matrix_size(0), 0);
        assert_eq!(matrix_size(1), 6);
        for kb in 0..2000 {
            let n = matrix_size(kb) as u64;
            assert!(3 * 8 * n * n <= kb * 1024);
            assert!(3 * 8 * (n + 1) * (n + 1) > kb * 1024 - kb * 1024 % 24);
        }
    }

    #[test]
    fn flags_parse_like_schbench() {
        let a = Args::try_parse_from([
            "x", "-m", "2", "-t", "4", "-r", "5", "-s", "50", "-n", "3", "-F", "64", "-i", "2",
            "-w", "1", "-z", "3", "-R", "100", "-L", "-C", "-j", "out.json", "-J", "job",
        ])
        .expect("parse");
        assert_eq!((a.message_threads, a.threads, a.runtime), (2, Some(4), 5));
        assert_eq!((a.sleep_usec, a.operations, a.cache_footprint), (50, 3, 64));
        assert_eq!((a.interval, a.warmup, a.zerotime, a.rps), (2, 1, 3, 100));
        assert!(a.no_locking && a.calibrate);
        assert_eq!(a.json.as_deref(), Some("out.json"));
        let d = Args::try_parse_from(["x"]).expect("defaults");
        assert_eq!((d.message_threads, d.threads, d.runtime), (1, None, 30));
        assert_eq!(
            (d.sleep_usec, d.operations, d.cache_footprint),
            (100, 5, 256)
        );
        assert_eq!((d.interval, d.warmup, d.pipe, d.rps), (10, 0, 0, 0));
        assert!(Args::try_parse_from(["x", "--cache_footprint", "8", "--sleep_usec", "1"]).is_ok());
        assert!(Args::try_parse_from(["x", "-p", "2000000"]).is_err());
        assert!(Args::try_parse_from(["x", "-p", "64", "-R", "10"]).is_err());
        assert!(Args::try_parse_from(["x", "-m", "0"]).is_err());
        assert!(Args::try_parse_from(["x", "extra"]).is_err());
    }
}
