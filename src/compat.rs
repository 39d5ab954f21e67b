//! Which kernel interfaces the BPF side ends up using on the running kernel.
//!
//! One binary runs on Linux 6.12 to 7.x: the sched_ext compat headers pick,
//! at load time, between a kfunc and its older name or fallback
//! (`bpf_ksym_exists()`). This module asks the kernel's BTF the same
//! questions, so that `-v` says which path each choice takes, and so that a
//! kernel older than 6.12 is refused with one line naming what it lacks
//! instead of a verifier log.

use anyhow::{bail, Result};
use log::debug;

/// Something the BPF side must have: the kernel BTF names it.
struct Required {
    /// What the scheduler uses it for.
    what: &'static str,
    /// Any one of these kernel symbols (a kfunc, or "struct.field").
    any_of: &'static [&'static str],
    /// The first Linux version that has it.
    since: &'static str,
}

const REQUIRED: &[Required] = &[
    Required {
        what: "cgroup support",
        any_of: &["sched_ext_ops.cgroup_set_weight"],
        since: "6.12",
    },
    Required {
        what: "the cgroup of a task",
        any_of: &["scx_bpf_task_cgroup"],
        since: "6.12",
    },
    Required {
        what: "moving a task between DSQs from dispatch",
        any_of: &["scx_bpf_dsq_move", "scx_bpf_dispatch_from_dsq"],
        since: "6.12",
    },
];

/// A choice the compat headers make: the first interface in `tiers` that
/// the kernel has, otherwise the fallback.
struct Choice {
    /// What the choice is about.
    what: &'static str,
    /// (kernel symbol, first Linux version with it), newest first.
    tiers: &'static [(&'static str, &'static str)],
    /// What runs on a kernel with none of them.
    fallback: &'static str,
}

const CHOICES: &[Choice] = &[
    Choice {
        what: "FIFO insert",
        tiers: &[("scx_bpf_dsq_insert", "6.13")],
        fallback: "scx_bpf_dispatch()",
    },
    Choice {
        what: "vtime insert",
        tiers: &[
            ("__scx_bpf_dsq_insert_vtime", "6.19"),
            ("scx_bpf_dsq_insert_vtime", "6.13"),
        ],
        fallback: "scx_bpf_dispatch_vtime()",
    },
    Choice {
        what: "consume",
        tiers: &[("scx_bpf_dsq_move_to_local", "6.13")],
        fallback: "scx_bpf_consume()",
    },
    Choice {
        what: "move between DSQs",
        tiers: &[("scx_bpf_dsq_move", "6.13")],
        fallback: "scx_bpf_dispatch_from_dsq()",
    },
    Choice {
        what: "clock",
        tiers: &[("scx_bpf_now", "6.14")],
        fallback: "bpf_ktime_get_ns(), an uncached clock read",
    },
    Choice {
        what: "sched_setattr() slice requests",
        tiers: &[("sched_entity.custom_slice", "6.12")],
        fallback: "none: sched_runtime is ignored",
    },
];

/// `scx_bpf_dsq_peek()` exists from 6.19 but may miss the head of a FIFO
/// DSQ before 7.1; the compat header calls it only from 7.1 on.
const PEEK: &str = "scx_bpf_dsq_peek";
const PEEK_SINCE: (u32, u32) = (7, 1);

/// What the kernel offers, as the checks above ask it.
pub trait Kernel {
    /// The kernel has this kfunc, or this "struct.field".
    fn has(&self, symbol: &str) -> bool;
    /// (major, minor) of the running kernel.
    fn version(&self) -> (u32, u32);
}

/// The running kernel, through its BTF (/sys/kernel/btf/vmlinux).
pub struct Running {
    release: String,
}

impl Running {
    pub fn new() -> Self {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Self { release }
    }
}

impl Kernel for Running {
    fn has(&self, symbol: &str) -> bool {
        let found = match symbol.split_once('.') {
            Some((ty, field)) => scx_utils::compat::struct_has_field(ty, field),
            None => scx_utils::compat::ksym_exists(symbol),
        };
        found.unwrap_or(false)
    }

    fn version(&self) -> (u32, u32) {
        parse_version(&self.release)
    }
}

/// "6.12.118+deb12" -> (6, 12); (0, 0) when it cannot tell.
pub fn parse_version(release: &str) -> (u32, u32) {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|s| s.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Refuse a kernel that lacks something the BPF side cannot do without,
/// naming the first missing piece; otherwise return one line per choice
/// the compat headers make on it.
pub fn plan(k: &impl Kernel) -> Result<Vec<String>> {
    for r in REQUIRED {
        if !r.any_of.iter().any(|s| k.has(s)) {
            bail!(
                "this kernel lacks {} ({}, Linux {}+): scx_latcfs needs Linux 6.12 or newer",
                r.what,
                r.any_of.join(" or "),
                r.since
            );
        }
    }
    let mut lines: Vec<String> = CHOICES
        .iter()
        .map(|c| match c.tiers.iter().find(|(sym, _)| k.has(sym)) {
            Some((sym, since)) => format!("{}: {sym} ({since}+)", c.what),
            None => format!("{}: fallback, {}", c.what, c.fallback),
        })
        .collect();
    lines.push(if k.has(PEEK) && k.version() >= PEEK_SINCE {
        format!("queue head: {PEEK} (7.1+)")
    } else {
        "queue head: fallback, a DSQ iterator walk under the DSQ lock".to_string()
    });
    Ok(lines)
}

/// Where the kernel exposes its BTF, which the BPF side's CO-RE relocations
/// and the checks above read.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The kernel exposes its BTF at `path` (scx_utils panics without it).
pub fn check_btf(path: &std::path::Path) -> Result<()> {
    if !path.exists() {
        bail!(
            "this kernel has no BTF ({} is missing): boot one built with CONFIG_DEBUG_INFO_BTF=y",
            path.display()
        );
    }
    Ok(())
}

/// Check the running kernel and log, at -v, the compat path of each choice.
pub fn check_running_kernel() -> Result<()> {
    check_btf(std::path::Path::new(VMLINUX_BTF))?;
    let k = Running::new();
    for line in plan(&k)? {
        debug!("compat on {}: {line}", k.release);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    struct Fake(HashSet<&'static str>, (u32, u32));
    impl Kernel for Fake {
        fn has(&self, s: &str) -> bool {
            self.0.contains(s)
        }
        fn version(&self) -> (u32, u32) {
            self.1
        }
    }

    /// What 6.12's BTF has of the symbols above.
    fn linux_6_12() -> Fake {
        Fake(
            [
                "sched_ext_ops.cgroup_set_weight",
                "scx_bpf_task_cgroup",
                "scx_bpf_dispatch_from_dsq",
                "sched_entity.custom_slice",
            ]
            .into(),
            (6, 12),
        )
    }

    #[test]
    fn missing_btf_is_refused_in_one_line() {
        let err = check_btf(std::path::Path::new("/nonexistent/vmlinux"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("CONFIG_DEBUG_INFO_BTF"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("6.12.118"), (6, 12));
        assert_eq!(parse_version("7.3.4+deb13-amd64"), (7, 3));
        assert_eq!(parse_version("garbage"), (0, 0));
    }

    #[test]
    fn linux_6_12_takes_every_fallback_but_custom_slice() {
        let lines = plan(&linux_6_12()).unwrap();
        assert_eq!(lines.len(), CHOICES.len() + 1);
        let fallbacks = lines.iter().filter(|l| l.contains(": fallback, ")).count();
        // Every choice but custom_slice falls back, and so does the queue head.
        assert_eq!(fallbacks, CHOICES.len(), "{lines:?}");
        assert!(lines
            .contains(&"sched_setattr() slice requests: sched_entity.custom_slice (6.12+)".into()));
        assert!(lines.contains(&"consume: fallback, scx_bpf_consume()".into()));
    }

    #[test]
    fn the_newest_tier_wins() {
        let mut k = linux_6_12();
        k.0.insert("scx_bpf_dsq_insert_vtime");
        k.0.insert("__scx_bpf_dsq_insert_vtime");
        let lines = plan(&k).unwrap();
        assert!(
            lines.contains(&"vtime insert: __scx_bpf_dsq_insert_vtime (6.19+)".into()),
            "{lines:?}"
        );
    }

    #[test]
    fn peek_needs_7_1_even_where_the_kfunc_exists() {
        let mut k = linux_6_12();
        k.0.insert(PEEK);
        k.1 = (6, 19);
        let lines = plan(&k).unwrap();
        assert!(lines.last().unwrap().contains("iterator walk"), "{lines:?}");
        k.1 = (7, 1);
        assert!(plan(&k).unwrap().last().unwrap().ends_with("(7.1+)"));
    }

    #[test]
    fn linux_6_11_is_refused_in_one_line_naming_what_it_lacks() {
        // 6.11 had sched_ext but neither cgroup support nor dispatch_from_dsq.
        let k = Fake(["scx_bpf_consume"].into(), (6, 11));
        let err = plan(&k).unwrap_err().to_string();
        assert!(err.contains("cgroup support"), "{err}");
        assert!(err.contains("Linux 6.12"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn each_required_piece_is_named_when_it_alone_is_missing() {
        for r in REQUIRED {
            let mut k = linux_6_12();
            for s in r.any_of {
                k.0.remove(s);
            }
            let err = plan(&k).unwrap_err().to_string();
            assert!(err.contains(r.what), "{err}");
        }
    }
}
