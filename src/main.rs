//! scx_latcfs loader: parse flags, check the machine, then load and run the
//! BPF scheduler until Ctrl-C, SIGTERM, SIGHUP or an exit from the kernel side.

mod arith;
mod bpf_intf;
mod bpf_skel;
mod cli;
mod compat;
mod latency;
mod preflight;
mod sched;
mod stats;

use std::mem::MaybeUninit;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use log::info;

fn init_logging(verbose: bool) -> Result<()> {
    let level = if verbose {
        simplelog::LevelFilter::Debug
    } else {
        simplelog::LevelFilter::Info
    };
    let config = simplelog::ConfigBuilder::new()
        .set_time_level(simplelog::LevelFilter::Off)
        .set_target_level(simplelog::LevelFilter::Off)
        .set_thread_level(simplelog::LevelFilter::Off)
        .build();
    simplelog::WriteLogger::init(level, config, std::io::stderr()).context("setting up logging")
}

fn run(opts: cli::Opts) -> Result<()> {
    preflight::check_root()?;
    preflight::check_sched_ext(Path::new(preflight::SCHED_EXT_SYSFS))?;
    // Resolve every rule's target before anything is loaded.
    let rules = opts
        .latency_nice
        .iter()
        .map(|r| {
            r.target
                .key()
                .map(|k| (k, r.nice))
                .with_context(|| format!("--latency-nice {}", r.target))
        })
        .collect::<Result<Vec<_>>>()?;
    init_logging(opts.verbose)?;
    compat::check_running_kernel()?;
    scx_utils::try_set_rlimit_infinity();

    let shutdown = Arc::new(AtomicBool::new(false));
    let flag = shutdown.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("installing the SIGINT/SIGTERM/SIGHUP handler")?;

    // The stats server lives as long as this process, across restarts;
    // --stats prints through it like any other client. Dropping it at the
    // end removes its socket. It starts once the first attach succeeded:
    // an instance that lost a race to attach must not touch the winner's
    // socket.
    let socket = Path::new(stats::SOCKET);
    let mut stats: Option<(stats::Server, stats::Feed)> = None;

    let (mut rules, mut carry) = (rules, vec![]);
    loop {
        let mut open_object = MaybeUninit::uninit();
        let mut sched = sched::Scheduler::init(&opts, &rules, &carry, &mut open_object)?;
        let feed = match &mut stats {
            Some((_, feed)) => feed,
            slot @ None => {
                let server = stats::Server::launch(socket)?;
                if let Some(every) = opts.stats {
                    stats::spawn_printer(socket, every, stats_format(opts.json), shutdown.clone())?;
                }
                &mut slot.insert(server).1
            }
        };
        let exit = sched.run(&shutdown, feed)?;
        if !exit.should_restart() {
            return Ok(());
        }
        // The rules now in force, with those `latency-nice set` made at
        // run time, and the values tasks inherited at fork go to the next
        // instance.
        rules = sched.rules()?;
        carry = sched.inherited();
        info!(
            "the kernel asked for a restart; reloading with {} latency nice rules and {} inherited values",
            rules.len(),
            carry.len()
        );
    }
}

fn stats_format(json: bool) -> stats::Format {
    if json {
        stats::Format::Json
    } else {
        stats::Format::Line
    }
}

/// `scx_latcfs --monitor SECS`: print the running instance's stats; loads
/// nothing and needs nothing but access to its stats socket.
fn monitor(every: Duration, json: bool) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed))
        .context("installing the SIGINT/SIGTERM/SIGHUP handler")?;
    stats::monitor(Path::new(stats::SOCKET), every, stats_format(json), &stop)
}

/// `scx_latcfs latency-nice ...`: talk to the running instance.
fn latency_nice(cmd: cli::LatencyNiceCmd) -> Result<()> {
    preflight::check_root()?;
    let instance = latency::Instance::open()?;
    match cmd {
        cli::LatencyNiceCmd::Set { target, value } => {
            let target = target.target();
            let key = target.key()?;
            let maps = instance.rule_maps();
            maps.set(&key, value)?;
            maps.bump_gen()?;
            println!("latency nice of {target} set to {value}");
        }
        cli::LatencyNiceCmd::Unset { target } => {
            let target = target.target();
            let maps = instance.rule_maps();
            maps.unset(&target.key_to_remove()?)
                .with_context(|| format!("latency nice of {target}"))?;
            maps.bump_gen()?;
            println!("latency nice rule of {target} removed");
        }
        cli::LatencyNiceCmd::List => {
            let cgroot = Path::new(latency::CGROUP_ROOT);
            for (key, nice) in instance.rule_maps().dump()? {
                println!("{}={nice}", key.describe(cgroot));
            }
        }
        cli::LatencyNiceCmd::Get { pid } => println!("{}", instance.task_nice(pid)?),
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(o) => o,
        Err(e) if !e.use_stderr() => {
            // --help and --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line: clap's first line says which flag and why, unless
            // it ends in ':' and the next names the missing arguments.
            let text = e.render().to_string();
            let mut lines = text.lines();
            let mut line = lines.next().unwrap_or("invalid arguments").to_string();
            if line.ends_with(':') {
                if let Some(next) = lines.next() {
                    line = format!("{line} {}", next.trim());
                }
            }
            eprintln!("scx_latcfs: {line}");
            return ExitCode::from(2);
        }
    };
    let res = match cli.command {
        Some(cli::Command::LatencyNice(cmd)) => latency_nice(cmd),
        None if cli.opts.help_stats => stats::describe(&mut std::io::stdout().lock()),
        None => match cli.opts.monitor {
            Some(every) => monitor(every, cli.opts.json),
            None => run(cli.opts),
        },
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scx_latcfs: {e:#}");
            ExitCode::FAILURE
        }
    }
}
