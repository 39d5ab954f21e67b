//! The BPF side's event counters and how they reach the user: the
//! scheduler serves them through an scx_stats server on a UNIX socket
//! (`SOCKET`), and `--stats` (in the scheduler's process) and `--monitor`
//! (from another) are clients of it.
//!
//! - `counters`: the raw counters, as read from the BPF side;
//! - `record`: the record a request returns (`LatcfsStats`), its JSON
//!   schema and its stats line;
//! - `server`: the server in the scheduler's process and the run loop's
//!   end of it (`Feed`);
//! - `client`: connecting to a running instance and printing its stats.
//!
//! Adding a counter: a value in `enum latcfs_stat` (bpf/intf.h), its name in
//! `NAMES`, and a field of that name, with its description, in
//! `LatcfsStats`; the unit tests fail until all three agree.

mod client;
mod counters;
mod record;
mod server;

pub use client::{monitor, spawn_printer, Format};
pub use counters::{Counters, NAMES};
pub use record::describe;
pub use server::{Feed, Server};

/// Where the stats server listens: scx_stats' default for the root
/// scheduler, where generic scx tools look for it.
pub const SOCKET: &str = "/var/run/scx/root/stats";

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use anyhow::anyhow;
    use scx_stats::serde_json::{self, Value};
    use scx_stats::Meta;

    use super::client::{connect, request_error, INSTANCE_STOPPED};
    use super::record::{LatcfsStats, DERIVED};
    use super::server::{sample, STOPPING};
    use super::*;
    use crate::bpf_intf;

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
