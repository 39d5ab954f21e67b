//! latcfs-probe: small measuring tools for scx_latcfs' tests and benchmarks.
//!
//!   latcfs-probe wake SECS PERIOD_US   sleep PERIOD_US at a time for SECS and
//!                                      report how late each wakeup ran
//!   latcfs-probe spin SECS [SLICE_US]  spin for SECS and report the longest
//!                                      gap in which it did not run, and the
//!                                      median of the gaps over 800 µs; with
//!                                      SLICE_US, first ask for that slice
//!                                      (sched_setattr's sched_runtime)
//!   latcfs-probe burst SECS RUN_US SLEEP_US
//!                                      spin RUN_US of CPU time, sleep
//!                                      SLEEP_US, repeat for SECS; report the
//!                                      bursts done and the longest gap
//!   latcfs-probe flip SECS PERIOD_US   spin for SECS, leaving for SCHED_FIFO
//!                                      and coming straight back every
//!                                      PERIOD_US; report the round trips
//!   latcfs-probe pingpong SECS         two threads pass a byte back and forth
//!                                      over a pair of pipes for SECS (as perf
//!                                      bench sched pipe) and report the rate
//!   latcfs-probe handoff SECS RUN_US [N]
//!                                      spin RUN_US of CPU time, then hand a
//!                                      byte to each of N partner threads
//!                                      (default 1, at most 16), one after
//!                                      the other, and wait for their
//!                                      answers, for SECS; report how long
//!                                      each round of answers took (partners
//!                                      answer at once, so what it measures is
//!                                      how soon each side gets a CPU)
//!
//! Results go to stdout as one line of key=value pairs, times in µs.

use std::process::ExitCode;
use std::time::{Duration, Instant};

fn percentile(sorted: &[u64], pct: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((pct / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn wake(secs: f64, period: Duration) -> String {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut lat = Vec::new();
    while Instant::now() < end {
        let due = Instant::now() + period;
        std::thread::sleep(period);
        lat.push(Instant::now().saturating_duration_since(due).as_micros() as u64);
    }
    lat.sort_unstable();
    format!(
        "samples={} p50_us={} p90_us={} p99_us={} max_us={}",
        lat.len(),
        percentile(&lat, 50.0),
        percentile(&lat, 90.0),
        percentile(&lat, 99.0),
        lat.last().copied().unwrap_or(0)
    )
}

/// Gaps shorter than this are the probe's own loop, clock reads and
/// interrupts (up to a few hundred µs under emulation), not another task
/// running.
const GAP_MIN: Duration = Duration::from_micros(800);

fn spin(secs: f64) -> String {
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let (mut last, mut max_gap, mut loops) = (start, Duration::ZERO, 0u64);
    let mut gaps: Vec<u64> = Vec::new();
    loop {
        let now = Instant::now();
        let gap = now - last;
        max_gap = max_gap.max(gap);
        if gap >= GAP_MIN && gaps.len() < 1 << 20 {
            gaps.push(gap.as_micros() as u64);
        }
        last = now;
        loops += 1;
        if now >= end {
            break;
        }
    }
    gaps.sort_unstable();
    format!(
        "loops={loops} max_gap_us={} gaps={} gap_p50_us={}",
        max_gap.as_micros(),
        gaps.len(),
        percentile(&gaps, 50.0)
    )
}

/// struct sched_attr (include/uapi/linux/sched/types.h), up to util_max.
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// Ask for a custom slice of @slice, as EEVDF takes it from a SCHED_OTHER
/// task's sched_runtime (Linux 6.12+), keeping this thread's nice.
fn set_slice(slice: Duration) -> std::io::Result<()> {
    // SAFETY: reads this thread's nice; errno is checked below.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        nice,
        runtime: slice.as_nanos() as u64,
        ..Default::default()
    };
    // SAFETY: pid 0 is this thread; attr is a valid, sized sched_attr.
    if unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn burst(secs: f64, run: Duration, sleep: Duration) -> String {
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let (mut last, mut max_gap, mut bursts) = (start, Duration::ZERO, 0u64);
    while Instant::now() < end {
        let until = thread_cpu_time() + run;
        while thread_cpu_time() < until {
            let now = Instant::now();
            max_gap = max_gap.max(now - last);
            last = now;
        }
        bursts += 1;
        std::thread::sleep(sleep);
        last = Instant::now();
    }
    format!("bursts={bursts} max_gap_us={}", max_gap.as_micros())
}

/// Set this thread's policy (priority 0 for SCHED_OTHER keeps its nice).
fn set_policy(policy: libc::c_int, prio: libc::c_int) -> std::io::Result<()> {
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: pid 0 is this thread; param is a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A CPU hog that leaves the fair classes for SCHED_FIFO and comes straight
/// back every @period: each round trip leaves sched_ext and re-enters it,
/// and should keep the task's place (its vtime lag) in the queue.
fn flip(secs: f64, period: Duration) -> std::io::Result<String> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut next = Instant::now() + period;
    let mut flips = 0u64;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if now >= next {
            set_policy(libc::SCHED_FIFO, 1)?;
            set_policy(libc::SCHED_OTHER, 0)?;
            flips += 1;
            next = now + period;
        }
    }
    Ok(format!("flips={flips}"))
}

/// A pipe's (read, write) ends.
fn pipe() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe() fills both fds on success; each is owned by one File.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    })
}

fn pingpong(secs: f64) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let (mut a_rx, mut a_tx) = pipe()?;
    let (mut b_rx, mut b_tx) = pipe()?;
    // The partner echoes until the pipe closes.
    let partner = std::thread::spawn(move || {
        let mut byte = [0u8];
        while a_rx.read_exact(&mut byte).is_ok() && b_tx.write_all(&byte).is_ok() {}
    });
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let mut trips = 0u64;
    let mut byte = [0u8];
    while Instant::now() < end {
        a_tx.write_all(&byte)?;
        b_rx.read_exact(&mut byte)?;
        trips += 1;
    }
    drop(a_tx);
    let _ = partner.join();
    let elapsed = start.elapsed().as_secs_f64();
    Ok(format!(
        "round_trips={trips} per_sec={:.0} usecs_per_trip={:.1}",
        trips as f64 / elapsed,
        1e6 * elapsed / trips.max(1) as f64
    ))
}

/// A schbench worker and its message thread in miniature: this thread works
/// for @run of CPU time, then wakes the partner with a byte and waits for
/// its answer. The partner wakes while this thread still runs (on its way
/// to block), so a scheduler that preempts for it must let this thread go
/// on afterwards for the answer to arrive soon.
fn handoff(secs: f64, run: Duration, partners: usize) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let (mut b_rx, b_tx) = pipe()?;
    let mut a_txs = Vec::new();
    let mut threads = Vec::new();
    for _ in 0..partners {
        let (mut a_rx, a_tx) = pipe()?;
        let mut b_tx = b_tx.try_clone()?;
        a_txs.push(a_tx);
        threads.push(std::thread::spawn(move || {
            let mut byte = [0u8];
            while a_rx.read_exact(&mut byte).is_ok() && b_tx.write_all(&byte).is_ok() {}
        }));
    }
    drop(b_tx);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut lat = Vec::new();
    let mut byte = [0u8];
    while Instant::now() < end {
        let until = thread_cpu_time() + run;
        while thread_cpu_time() < until {}
        let t0 = Instant::now();
        // one after the other: each partner it wakes may preempt it
        for a_tx in &mut a_txs {
            a_tx.write_all(&byte)?;
        }
        for _ in 0..partners {
            b_rx.read_exact(&mut byte)?;
        }
        lat.push(t0.elapsed().as_micros() as u64);
    }
    drop(a_txs);
    for t in threads {
        let _ = t.join();
    }
    lat.sort_unstable();
    Ok(format!(
        "samples={} p50_us={} p90_us={} max_us={}",
        lat.len(),
        percentile(&lat, 50.0),
        percentile(&lat, 90.0),
        lat.last().copied().unwrap_or(0)
    ))
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: latcfs-probe wake SECS PERIOD_US | latcfs-probe spin SECS [SLICE_US] | \
         latcfs-probe burst SECS RUN_US SLEEP_US | latcfs-probe flip SECS PERIOD_US | \
         latcfs-probe pingpong SECS | latcfs-probe handoff SECS RUN_US [N]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| {
        args.get(i)
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|v| *v > 0.0)
    };
    let line = match (args.first().map(String::as_str), num(1), num(2)) {
        (Some("wake"), Some(secs), Some(us)) => wake(secs, Duration::from_secs_f64(us / 1e6)),
        (Some("spin"), Some(secs), None) => spin(secs),
        (Some("spin"), Some(secs), Some(us)) => {
            match set_slice(Duration::from_secs_f64(us / 1e6)) {
                Ok(()) => spin(secs),
                Err(e) => {
                    eprintln!("latcfs-probe: spin: sched_setattr: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        (Some("burst"), Some(secs), Some(run)) => match num(3) {
            Some(sleep) => burst(
                secs,
                Duration::from_secs_f64(run / 1e6),
                Duration::from_secs_f64(sleep / 1e6),
            ),
            None => return usage(),
        },
        (Some("flip"), Some(secs), Some(us)) => match flip(secs, Duration::from_secs_f64(us / 1e6))
        {
            Ok(line) => line,
            Err(e) => {
                eprintln!("latcfs-probe: flip: {e}");
                return ExitCode::FAILURE;
            }
        },
        (Some("pingpong"), Some(secs), _) => match pingpong(secs) {
            Ok(line) => line,
            Err(e) => {
                eprintln!("latcfs-probe: pingpong: {e}");
                return ExitCode::FAILURE;
            }
        },
        (Some("handoff"), Some(secs), Some(us)) => {
            let partners = match args.get(3) {
                None => 1,
                Some(_) => match num(3) {
                    Some(n) if n <= 16.0 && n.fract() == 0.0 => n as usize,
                    _ => return usage(),
                },
            };
            match handoff(secs, Duration::from_secs_f64(us / 1e6), partners) {
                Ok(line) => line,
                Err(e) => {
                    eprintln!("latcfs-probe: handoff: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => return usage(),
    };
    println!("{line}");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 51);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[], 99.0), 0);
    }
}
