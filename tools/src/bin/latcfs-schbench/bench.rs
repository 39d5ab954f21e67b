//! The message and worker threads, and what they share.
//!
//! Default mode (as schbench): a worker posts itself on its message thread's
//! list, wakes the message thread and sleeps on its own futex. The message
//! thread takes the whole list, reads the clock once, stamps every listed
//! worker with that time and wakes them one after another, then sleeps until
//! a worker posts again. A woken worker records now - stamp as its wakeup
//! latency (so the waker's own delays while waking a batch count too), then
//! runs one request: sleep `sleep_usec`, then `operations` rounds of a matrix
//! multiply over its private buffer (under a per-CPU spinlock unless
//! locking is off), and records the request's latency.
//!
//! RPS mode (-R): at the start of each second a message thread hands its
//! share of the target rate out round robin to its workers (a counter per
//! worker, capped at 128 pending), stamping and waking each; a worker runs
//! every request it finds queued before it sleeps again.
//!
//! Pipe mode (-p): no request work. The message thread writes the transfer
//! size into the worker's page before stamping and waking it, and the worker
//! writes its page before posting back: wakeup latency and round trips only.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use crate::hist::Hist;

const SEQ: Ordering = Ordering::SeqCst;

/// Most requests that may wait for one worker in RPS mode; beyond that the
/// message thread drops the request and pauses 100 µs, as schbench does.
const RPS_BATCH: u64 = 128;

#[derive(Debug, Clone)]
pub struct Config {
    pub message_threads: usize,
    pub workers: usize,
    pub sleep_usec: u64,
    pub operations: u64,
    /// Side of each of the three square matrices of u64.
    pub matrix_size: usize,
    pub pipe_bytes: usize,
    /// Total target requests per second over all message threads, 0 = off.
    pub rps: u64,
    pub locking: bool,
    pub calibrate: bool,
}

fn gettid() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

fn futex(word: &AtomicU32, op: libc::c_int, val: u32) -> io::Result<()> {
    // SAFETY: the futex word is a live, aligned u32 for the whole call; no
    // timeout and no second word are passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op | libc::FUTEX_PRIVATE_FLAG,
            val,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A binary semaphore on one futex word: POSTED means a wakeup is pending.
struct Sem(AtomicU32);

const BLOCKED: u32 = 0;
const POSTED: u32 = 1;

impl Sem {
    fn new() -> Self {
        Sem(AtomicU32::new(BLOCKED))
    }

    /// Drop any pending wakeup: the next wait() sleeps until a post().
    fn block(&self) {
        self.0.store(BLOCKED, SEQ);
    }

    /// Mark a wakeup as pending without a syscall, so that posts while the
    /// owner is busy skip FUTEX_WAKE.
    fn hold(&self) {
        self.0.store(POSTED, SEQ);
    }

    /// Make a wakeup pending; wake the owner if it was not already pending.
    fn post(&self) -> io::Result<()> {
        if self.0.compare_exchange(BLOCKED, POSTED, SEQ, SEQ).is_ok() {
            futex(&self.0, libc::FUTEX_WAKE, 1)
                .map_err(|e| io::Error::new(e.kind(), format!("FUTEX_WAKE: {e}")))?;
        }
        Ok(())
    }

    /// Sleep until a wakeup is pending, and consume it.
    fn wait(&self) -> io::Result<()> {
        loop {
            if self.0.compare_exchange(POSTED, BLOCKED, SEQ, SEQ).is_ok() {
                return Ok(());
            }
            match futex(&self.0, libc::FUTEX_WAIT, BLOCKED) {
                Ok(()) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EINTR)) => {}
                Err(e) => return Err(io::Error::new(e.kind(), format!("FUTEX_WAIT: {e}"))),
            }
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Wakeup latencies, µs.
    pub wakeup: Hist,
    /// Request latencies, µs.
    pub request: Hist,
}

#[repr(align(128))]
struct Worker {
    sem: Sem,
    /// When the waker decided to wake us, ns since Bench::epoch.
    wake_ns: AtomicU64,
    /// Next on the message thread's list: index + 1, 0 = end.
    next: AtomicUsize,
    /// RPS mode: requests handed to us and not yet taken.
    queued: AtomicU64,
    /// Requests completed.
    loops: AtomicU64,
    /// How long the thread ran, set when it exits.
    runtime_ns: AtomicU64,
    tid: AtomicI32,
    stats: Mutex<Stats>,
    /// Pipe mode transfer page.
    page: Box<[AtomicU64]>,
}

#[repr(align(128))]
struct Group {
    sem: Sem,
    /// Workers waiting for a reply: index + 1 of the first, 0 = none.
    head: AtomicUsize,
    tid: AtomicI32,
    /// RPS mode: requests per second this message thread issues.
    rps: u64,
    workers: Vec<Worker>,
}

impl Group {
    /// Lock-free push (each worker is on the list at most once).
    fn push(&self, idx: usize) {
        let w = &self.workers[idx];
        let mut head = self.head.load(SEQ);
        loop {
            w.next.store(head, SEQ);
            match self.head.compare_exchange_weak(head, idx + 1, SEQ, SEQ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }
}

/// A per-CPU spinlock held during a request's matrix work.
#[repr(align(64))]
struct CpuLock(AtomicBool);

pub struct Bench {
    cfg: Config,
    groups: Vec<Group>,
    locks: Vec<CpuLock>,
    stopping: AtomicBool,
    interrupted: AtomicBool,
    epoch: Instant,
}

fn lock_stats(m: &Mutex<Stats>) -> MutexGuard<'_, Stats> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn fill(page: &[AtomicU64], byte: u8) {
    let v = u64::from_ne_bytes([byte; 8]);
    for x in page {
        x.store(v, Ordering::Relaxed);
    }
}

/// m3 = m1 * m2 over the three n x n matrices laid out in `data`.
fn matrix_multiply(data: &mut [u64], n: usize) {
    if n == 0 {
        return;
    }
    let (m1, rest) = data.split_at_mut(n * n);
    let (m2, m3) = rest.split_at_mut(n * n);
    for (row, out) in m1.chunks_exact(n).zip(m3.chunks_exact_mut(n)) {
        for (j, cell) in out.iter_mut().enumerate() {
            *cell = row
                .iter()
                .zip(m2[j..].iter().step_by(n))
                .fold(0u64, |acc, (a, b)| acc.wrapping_add(a.wrapping_mul(*b)));
        }
    }
    // The product is never read: keep the work from being optimised away.
    std::hint::black_box(data);
}

fn current_cpu() -> usize {
    // SAFETY: sched_getcpu takes no arguments; -1 on error.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).unwrap_or(0)
}

fn online_cpus() -> usize {
    // SAFETY: sysconf only reads a system value.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

pub fn configured_cpus() -> usize {
    // SAFETY: sysconf only reads a system value.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    usize::try_from(n).unwrap_or(1).max(1)
}

pub fn default_workers(message_threads: usize) -> usize {
    online_cpus().div_ceil(message_threads).max(1)
}

/// Average run-queue wait per scheduling of a thread, ns (from
/// /proc/self/task/TID/schedstat), None when unavailable.
fn sched_delay_ns(tid: i32) -> Option<u64> {
    if tid == 0 {
        return None;
    }
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    let (_run, wait, count) = (f.next()??, f.next()??, f.next()??);
    Some(wait.checked_div(count).unwrap_or(0))
}

impl Bench {
    pub fn new(cfg: Config) -> Arc<Self> {
        let m = cfg.message_threads as u64;
        let groups = (0..cfg.message_threads)
            .map(|gi| Group {
                sem: Sem::new(),
                head: AtomicUsize::new(0),
                tid: AtomicI32::new(0),
                rps: cfg.rps / m + u64::from((gi as u64) < cfg.rps % m),
                workers: (0..cfg.workers)
                    .map(|_| Worker {
                        sem: Sem::new(),
                        wake_ns: AtomicU64::new(0),
                        next: AtomicUsize::new(0),
                        queued: AtomicU64::new(0),
                        loops: AtomicU64::new(0),
                        runtime_ns: AtomicU64::new(0),
                        tid: AtomicI32::new(0),
                        stats: Mutex::new(Stats::default()),
                        page: (0..cfg.pipe_bytes.div_ceil(8))
                            .map(|_| AtomicU64::new(0))
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        let locks = (0..configured_cpus())
            .map(|_| CpuLock(AtomicBool::new(false)))
            .collect();
        Arc::new(Bench {
            cfg,
            groups,
            locks,
            stopping: AtomicBool::new(false),
            interrupted: AtomicBool::new(false),
            epoch: Instant::now(),
        })
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(SEQ)
    }

    /// Ctrl-C / SIGTERM: end the run early (the main loop notices).
    pub fn interrupt(&self) {
        self.interrupted.store(true, SEQ);
    }

    pub fn interrupted(&self) -> bool {
        self.interrupted.load(SEQ)
    }

    /// Tell every thread to finish and wake the message threads.
    pub fn stop(&self) {
        self.stopping.store(true, SEQ);
        for g in &self.groups {
            // A failure here leaves a thread asleep; the error that made us
            // stop, if any, is reported by the thread that hit it.
            let _ = g.sem.post();
        }
    }

    /// Start the message threads (each starts its own workers).
    pub fn start(self: &Arc<Self>) -> Result<Vec<JoinHandle<Result<()>>>> {
        let mut handles = Vec::with_capacity(self.groups.len());
        for gi in 0..self.groups.len() {
            let b = Arc::clone(self);
            let h = std::thread::Builder::new()
                .name("schbench-msg".into())
                .spawn(move || b.message_thread(gi));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    self.stop();
                    for h in handles {
                        let _ = h.join();
                    }
                    return Err(e).context("spawning a message thread");
                }
            }
        }
        Ok(handles)
    }

    fn message_thread(self: Arc<Self>, gi: usize) -> Result<()> {
        let g = &self.groups[gi];
        g.tid.store(gettid(), SEQ);
        let mut handles = Vec::with_capacity(g.workers.len());
        let mut result = Ok(());
        for wi in 0..g.workers.len() {
            let b = Arc::clone(&self);
            let h = std::thread::Builder::new()
                .name("schbench-worker".into())
                .spawn(move || b.worker_thread(gi, wi));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    result = Err(anyhow!(e).context("spawning a worker thread"));
                    break;
                }
            }
        }
        if result.is_ok() {
            result = if self.cfg.rps > 0 {
                self.rps_loop(g)
            } else {
                self.reply_loop(g)
            };
        }
        if result.is_err() {
            self.stop();
        }
        // stopping is set: a worker either sees it before sleeping or gets
        // this post.
        for w in &g.workers {
            if let Err(e) = w.sem.post() {
                if result.is_ok() {
                    result = Err(e.into());
                }
            }
        }
        for h in handles {
            let r = h
                .join()
                .map_err(|_| anyhow!("a worker thread panicked"))
                .and_then(|r| r);
            if result.is_ok() {
                result = r;
            }
        }
        result
    }

    /// Stamp and wake every worker on the list.
    fn wake_all(&self, g: &Group) -> io::Result<()> {
        let mut cur = g.head.swap(0, SEQ);
        let stamp = self.now_ns();
        while cur != 0 {
            let w = &g.workers[cur - 1];
            // Read the link first: once woken, w may post itself again.
            cur = w.next.load(SEQ);
            if self.cfg.pipe_bytes > 0 {
                fill(&w.page, 1);
                w.wake_ns.store(self.now_ns(), SEQ);
            } else {
                w.wake_ns.store(stamp, SEQ);
            }
            w.sem.post()?;
        }
        Ok(())
    }

    fn reply_loop(&self, g: &Group) -> Result<()> {
        loop {
            g.sem.block();
            self.wake_all(g)?;
            if self.stopping() {
                self.wake_all(g)?;
                return Ok(());
            }
            g.sem.wait()?;
        }
    }

    fn rps_loop(&self, g: &Group) -> Result<()> {
        let n = g.workers.len();
        let mut cur = 0usize;
        while !self.stopping() {
            let start = Instant::now();
            for _ in 0..g.rps {
                if self.stopping() {
                    break;
                }
                let w = &g.workers[cur % n];
                cur = cur.wrapping_add(1);
                if w.queued.load(SEQ) > RPS_BATCH {
                    std::thread::sleep(Duration::from_micros(100));
                    continue;
                }
                w.queued.fetch_add(1, SEQ);
                w.wake_ns.store(self.now_ns(), SEQ);
                w.sem.post()?;
            }
            let end = start + Duration::from_secs(1);
            while !self.stopping() {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                std::thread::sleep((end - now).min(Duration::from_millis(100)));
            }
        }
        Ok(())
    }

    fn worker_thread(self: Arc<Self>, gi: usize, wi: usize) -> Result<()> {
        let g = &self.groups[gi];
        let w = &g.workers[wi];
        w.tid.store(gettid(), SEQ);
        let n = self.cfg.matrix_size;
        let mut data: Vec<u64> = (0..3 * n * n)
            .map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
            .collect();
        let start = Instant::now();
        let r = if self.cfg.rps > 0 {
            self.worker_rps(w, &mut data)
        } else {
            self.worker_posting(g, wi, &mut data)
        };
        w.runtime_ns.store(start.elapsed().as_nanos() as u64, SEQ);
        if r.is_err() {
            self.stop();
        }
        r
    }

    fn record_wakeup(&self, w: &Worker) {
        let us = self.now_ns().saturating_sub(w.wake_ns.load(SEQ)) / 1000;
        // As schbench: a 0 µs "wakeup" is one that never slept.
        if us > 0 {
            lock_stats(&w.stats).wakeup.record(us);
        }
    }

    fn worker_posting(&self, g: &Group, wi: usize, data: &mut [u64]) -> Result<()> {
        let w = &g.workers[wi];
        while !self.stopping() {
            if self.cfg.pipe_bytes > 0 {
                fill(&w.page, 2);
            }
            w.sem.block();
            w.wake_ns.store(self.now_ns(), SEQ);
            g.push(wi);
            g.sem.post()?;
            if !self.stopping() {
                w.sem.wait()?;
            }
            self.record_wakeup(w);
            self.request(w, data);
        }
        Ok(())
    }

    fn worker_rps(&self, w: &Worker, data: &mut [u64]) -> Result<()> {
        while !self.stopping() {
            w.sem.block();
            w.wake_ns.store(self.now_ns(), SEQ);
            let n = w.queued.swap(0, SEQ);
            if n == 0 {
                if !self.stopping() {
                    w.sem.wait()?;
                }
                // The shutdown post carries no stamp: not a sample.
                if !self.stopping() {
                    self.record_wakeup(w);
                }
                continue;
            }
            w.sem.hold();
            for _ in 0..n {
                self.request(w, data);
            }
        }
        Ok(())
    }

    fn sleep(&self) {
        if self.cfg.sleep_usec > 0 {
            std::thread::sleep(Duration::from_micros(self.cfg.sleep_usec));
        }
    }

    /// One request: record its latency and count it.
    fn request(&self, w: &Worker, data: &mut [u64]) {
        let t0 = if self.cfg.pipe_bytes > 0 {
            Instant::now()
        } else {
            let t0 = if self.cfg.calibrate {
                // Calibration times the matrix work alone.
                self.sleep();
                Instant::now()
            } else {
                let t0 = Instant::now();
                self.sleep();
                t0
            };
            self.work(data);
            t0
        };
        let us = t0.elapsed().as_micros() as u64;
        w.loops.fetch_add(1, Ordering::Relaxed);
        if us > 0 {
            lock_stats(&w.stats).request.record(us);
        }
    }

    fn work(&self, data: &mut [u64]) {
        let n = self.cfg.matrix_size;
        let lock = (self.cfg.locking && !self.cfg.calibrate).then(|| self.lock_this_cpu());
        for _ in 0..self.cfg.operations {
            matrix_multiply(data, n);
        }
        if let Some(l) = lock {
            l.0.store(false, Ordering::Release);
        }
    }

    /// Spin for the lock of the CPU we run on; retry if we migrated while
    /// spinning. A worker preempted while holding it makes the next one on
    /// that CPU spin: preemption during the work is expensive, as intended.
    fn lock_this_cpu(&self) -> &CpuLock {
        loop {
            let cpu = current_cpu() % self.locks.len();
            let l = &self.locks[cpu];
            while l.0.load(Ordering::Relaxed)
                || l.0
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                std::hint::spin_loop();
            }
            if current_cpu() % self.locks.len() == cpu {
                return l;
            }
            l.0.store(false, Ordering::Release);
        }
    }

    /// Requests completed so far, all workers.
    pub fn total_loops(&self) -> u64 {
        self.workers()
            .map(|w| w.loops.load(Ordering::Relaxed))
            .sum()
    }

    /// Sum of the workers' run times (valid once they have exited), ns.
    pub fn total_worker_runtime_ns(&self) -> u64 {
        self.workers().map(|w| w.runtime_ns.load(SEQ)).sum()
    }

    fn workers(&self) -> impl Iterator<Item = &Worker> {
        self.groups.iter().flat_map(|g| g.workers.iter())
    }

    /// All workers' histograms merged.
    pub fn merged(&self) -> Stats {
        let mut total = Stats::default();
        for w in self.workers() {
            let s = lock_stats(&w.stats);
            total.wakeup.merge(&s.wakeup);
            total.request.merge(&s.request);
        }
        total
    }

    pub fn reset(&self) {
        for w in self.workers() {
            let mut s = lock_stats(&w.stats);
            s.wakeup.clear();
            s.request.clear();
        }
    }

    /// Average run-queue wait per scheduling, µs, of the message threads and
    /// of the workers (as schbench's "sched delay" line).
    pub fn sched_delay_us(&self) -> (u64, u64) {
        let avg = |v: Vec<u64>| v.iter().sum::<u64>() / (v.len().max(1) as u64) / 1000;
        let msg = self
            .groups
            .iter()
            .filter_map(|g| sched_delay_ns(g.tid.load(SEQ)))
            .collect();
        let wrk = self
            .workers()
            .filter_map(|w| sched_delay_ns(w.tid.load(SEQ)))
            .collect();
        (avg(msg), avg(wrk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_multiply_is_a_product() {
        // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]
        let mut d = vec![1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0];
        matrix_multiply(&mut d, 2);
        assert_eq!(&d[8..], &[19, 22, 43, 50]);
        let mut empty: Vec<u64> = Vec::new();
        matrix_multiply(&mut empty, 0);
    }

    #[test]
    fn sem_post_then_wait_does_not_sleep() {
        let s = Sem::new();
        s.post().expect("post");
        s.post().expect("second post is a no-op");
        s.wait().expect("wait");
        assert_eq!(s.0.load(SEQ), BLOCKED);
    }

    #[test]
    fn short_run_in_each_mode() {
        for (pipe_bytes, rps) in [(0, 0), (4096, 0), (0, 200)] {
            let b = Bench::new(Config {
                message_threads: 2,
                workers: 2,
                sleep_usec: 10,
                operations: 1,
                matrix_size: 4,
                pipe_bytes,
                rps,
                locking: true,
                calibrate: false,
            });
            let handles = b.start().expect("start");
            std::thread::sleep(Duration::from_millis(300));
            b.stop();
            for h in handles {
                h.join().expect("join").expect("thread result");
            }
            assert!(b.total_loops() > 0, "pipe={pipe_bytes} rps={rps}");
            assert!(b.total_worker_runtime_ns() > 0);
        }
    }
}
