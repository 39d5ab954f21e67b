//! A client of a running instance's stats server: `--monitor` from
//! another process, `--stats` from a thread of the scheduler's own.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use log::warn;
use scx_stats::serde_json::{self, Value};
use scx_stats::{Meta, StatsClient};

use super::record::LatcfsStats;
use super::server::STOPPING;

/// How long a client waits for an answer: long enough to ride out a reload
/// of the BPF scheduler after a restart request, when nobody answers.
const CLIENT_TIMEOUT_MS: u64 = 60_000;

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
pub(super) const INSTANCE_STOPPED: &str = "the scx_latcfs instance stopped";

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
pub(super) fn request_error(e: anyhow::Error, what: &str) -> anyhow::Error {
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
