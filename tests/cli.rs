//! Bad command lines are refused before anything is loaded: one line naming
//! the flag (and for a value, its allowed range), exit status 2. These run
//! without root or sched_ext, since parsing comes first.

use std::process::Command;

fn refused(args: &[&str], expect: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_scx_latcfs"))
        .args(args)
        .output()
        .expect("running scx_latcfs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: exit {:?}, stderr {err}",
        out.status
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: not one line: {err}"
    );
    for e in expect {
        assert!(err.contains(e), "{args:?}: {err:?} lacks {e:?}");
    }
    assert!(out.stdout.is_empty(), "{args:?}: printed on stdout");
}

#[test]
fn every_range_is_checked_at_both_ends() {
    let cases: &[(&str, &str, &str, &str)] = &[
        ("--slice-us", "99", "100001", "100..=100000"),
        ("--latency-us", "99", "100001", "100..=100000"),
        ("--latency-budget-us", "999", "1000001", "1000..=1000000"),
        ("--stats", "0.09", "3601", "0.1..=3600"),
        ("--monitor", "0", "3601", "0.1..=3600"),
        ("--test-error-after-ms", "0", "3600001", "1..=3600000"),
        ("--test-cgroup-capacity", "0", "65537", "1..=65536"),
    ];
    for (flag, low, high, range) in cases {
        refused(&[flag, low], &[flag, range]);
        refused(&[flag, high], &[flag, range]);
    }
    // flags whose lower bound is 0: above the top, and not a number
    for (flag, range) in [
        ("--slice-lag-us", "0..=1000000"),
        ("--wakeup-gran-us", "0..=100000"),
    ] {
        refused(&[flag, "1000001000"], &[flag, range]);
        refused(&[&format!("{flag}=-1")], &[flag]);
    }
    refused(
        &["--latency-nice", "/sys/fs/cgroup=-21"],
        &["--latency-nice", "-20..=19"],
    );
    refused(
        &["--latency-nice", "/sys/fs/cgroup=20"],
        &["--latency-nice", "-20..=19"],
    );
    refused(
        &["--latency-nice", "nowhere=1"],
        &["--latency-nice", "not a target"],
    );
    refused(&["latency-nice", "set", "--pid", "1", "20"], &["-20..=19"]);
}

#[test]
fn conflicting_flags_are_refused() {
    refused(
        &["--monitor", "1", "--stats", "1"],
        &["--monitor", "--stats"],
    );
    for flag in [
        &["--slice-us", "500"][..],
        &["--latency-nice", "pid:1=-5"],
        &["--no-prev-cpu"],
        &["--no-cgroup-fast-paths"],
        &["--test-error-after-ms", "5"],
        &["--test-cgroup-capacity", "5"],
    ] {
        let mut args = vec!["--monitor", "1"];
        args.extend_from_slice(flag);
        refused(&args, &["--monitor", flag[0]]);
    }
    refused(&["--json"], &["--stats", "--monitor"]);
    refused(&["--bogus"], &["--bogus"]);
}
