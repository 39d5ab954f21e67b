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

/// Each default lives in one home, the flag's definition (src/cli.rs, shown
/// by --help); the README's flag tables and the BPF side's initial values
/// repeat it, and must agree with it.
#[test]
fn defaults_agree_with_the_flags() {
    let help = stdout(&["--help"]);
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("reading README.md");
    let bpf = bpf_sources();

    // --help: each long flag, and the default clap shows for it.
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("--").or_else(|| {
            t.split_once(", --")
                .filter(|(s, _)| s.starts_with('-'))
                .map(|(_, r)| r)
        }) {
            let name = rest.split([' ', '<']).next().unwrap_or_default();
            flags.push((format!("--{name}"), None));
        } else if let Some(d) = t.strip_prefix("[default: ") {
            if let Some(last) = flags.last_mut() {
                last.1 = Some(d.trim_end_matches(']').to_string());
            }
        }
    }
    assert!(flags.len() >= 15, "parsed only {flags:?} from --help");

    // The README's tables: `| `--flag ARG` | default | meaning |`.
    for (flag, default) in &flags {
        let row = readme
            .lines()
            .find(|l| {
                l.starts_with("| `")
                    && l.split('|').nth(1).is_some_and(|c| {
                        c.split('`')
                            .any(|f| f.split_whitespace().next() == Some(flag.as_str()))
                    })
            })
            .unwrap_or_else(|| panic!("README.md has no table row for {flag}"));
        if let Some(d) = default {
            let cell = row.split('|').nth(2).unwrap_or_default().trim();
            assert_eq!(cell, d, "README.md's default of {flag}");
        }
    }

    // The BPF side's initial values (the loader always sets them; they
    // must still say what the flag does, for a reader of the BPF code).
    for (flag, sym, unit_ns) in [
        ("--slice-us", "slice_ns", 1_000),
        ("--slice-lag-us", "slice_lag_ns", 1_000),
        ("--latency-us", "latency_range_ns", 1_000),
        ("--wakeup-gran-us", "wakeup_gran_ns", 1_000),
        ("--latency-budget-us", "lat_budget_ns", 1_000),
        ("--max-wait-ms", "max_wait_ns", 1_000_000),
    ] {
        let d: u64 = flags
            .iter()
            .find(|(f, _)| f == flag)
            .and_then(|(_, d)| d.as_deref()?.parse().ok())
            .unwrap_or_else(|| panic!("--help shows no numeric default for {flag}"));
        assert_eq!(bpf_const(&bpf, sym), d * unit_ns, "{sym} against {flag}");
    }
}

/// Each stats field is described in one home, the LatcfsStats definition
/// (src/stats/record.rs, shown by --help-stats); the README's counter table
/// repeats the descriptions word for word (cells trimmed, backticks aside).
#[test]
fn readme_counter_table_matches_help_stats() {
    let help = stdout(&["--help-stats"]);
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("reading README.md");
    let cells = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.replace('`', "").trim().to_string())
            .collect()
    };
    let table: Vec<Vec<String>> = readme
        .lines()
        .skip_while(|l| cells(l) != ["field", "counts"])
        .skip(2)
        .take_while(|l| l.trim_start().starts_with('|'))
        .map(cells)
        .collect();
    let mut fields = 0;
    for line in help.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let (left, desc) = line
            .split_once(" : ")
            .unwrap_or_else(|| panic!("--help-stats line without a description: {line}"));
        let name = left.split_whitespace().next().unwrap_or_default();
        let row = table
            .iter()
            .find(|r| r.first().map(String::as_str) == Some(name))
            .unwrap_or_else(|| panic!("README.md's counter table has no row for {name}"));
        assert_eq!(
            row.get(1).map(String::as_str),
            Some(desc.trim()),
            "README.md's description of {name}"
        );
        fields += 1;
    }
    assert!(fields >= 30, "parsed {fields} fields from --help-stats");
    assert_eq!(
        table.len(),
        fields,
        "README.md's counter table has {} rows",
        table.len()
    );
}

fn stdout(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_scx_latcfs"))
        .args(args)
        .env("COLUMNS", "1000")
        .output()
        .expect("running scx_latcfs");
    assert!(out.status.success(), "{args:?}: exit {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn bpf_sources() -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/bpf");
    let mut all = String::new();
    for e in std::fs::read_dir(dir).expect("reading bpf/") {
        let path = e.expect("reading bpf/").path();
        all += &std::fs::read_to_string(&path).expect("reading a bpf/ file");
    }
    all
}

/// The value of `const volatile u64 SYM = A * B ...;` (integer factors with
/// an optional ULL suffix).
fn bpf_const(src: &str, sym: &str) -> u64 {
    let decl = format!("const volatile u64 {sym} = ");
    let expr = src
        .lines()
        .find_map(|l| l.strip_prefix(&decl))
        .unwrap_or_else(|| panic!("no `{decl}...` in bpf/"));
    expr.trim_end_matches(';')
        .split('*')
        .map(|f| {
            f.trim()
                .trim_end_matches("ULL")
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{sym}: cannot read factor {f:?}"))
        })
        .product()
}

/// Every BPF module (bpf/*.bpf.h) opens with an overview that has a
/// paragraph on its limits (scx_flatcg's header is the model); main.bpf.c
/// holds the design overview and the ops table, the modules the policy.
#[test]
fn every_bpf_module_states_its_limits() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/bpf");
    for e in std::fs::read_dir(dir).expect("reading bpf/") {
        let path = e.expect("reading bpf/").path();
        let name = path.to_string_lossy().into_owned();
        if !name.ends_with(".bpf.h") {
            continue;
        }
        let src = std::fs::read_to_string(&path).expect("reading a bpf/ file");
        // the comment after the SPDX line
        let header = src.split("*/").nth(1).unwrap_or_default();
        assert!(
            header.contains("Limits"),
            "{name}: its opening comment has no \"Limits\" paragraph"
        );
    }
}
