//! The stats server, in the scheduler's process: each connection keeps
//! the running totals of its own previous request and gets what happened
//! since; the run loop answers the requests for the totals (`Feed`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use crossbeam::channel::{Receiver, RecvTimeoutError, Sender};
use scx_stats::{Meta, StatsOpener, StatsOps, StatsReader, StatsServer, StatsServerData, ToJson};

use super::counters::Counters;
use super::record::LatcfsStats;

/// What the server answers once the scheduler has begun to exit.
pub(super) const STOPPING: &str = "the scheduler is exiting";

/// Ask the run loop for its counters. Its end of the channels goes away
/// when the scheduler exits, which can happen while a client connects as
/// well as while it reads, so both answer `STOPPING`.
pub(super) fn sample(req: &Sender<()>, res: &Receiver<Counters>) -> Result<Counters> {
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
