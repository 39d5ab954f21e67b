//! Latency nice rules:
//!
//! - `rule`: what `--latency-nice` and the subcommand take (`Rule`,
//!   `Target`) and their parsing;
//! - `target`: a rule's target checked against the running system (the
//!   process, the cgroup) and turned into a map `Key`;
//! - `maps`: the BPF maps that hold the rules (`RuleMaps`), and the
//!   per-task values read back from the task storage;
//! - `pins`: how `scx_latcfs latency-nice` reaches a running instance: it
//!   pins the maps (`PinGuard`), the subcommand opens them (`Instance`).

mod maps;
mod pins;
mod rule;
mod target;

pub use maps::{inherited_values, RuleMaps};
pub use pins::{Instance, PinGuard};
pub use rule::{parse_comm, parse_nice, Rule, Target};
pub use target::{Key, CGROUP_ROOT};

#[cfg(test)]
mod tests {
    use super::maps::rule_key_bytes;
    use super::*;
    use crate::bpf_intf;

    #[test]
    fn rule_parsing() {
        assert_eq!(
            "/sys/fs/cgroup/fg=-20".parse::<Rule>().unwrap(),
            Rule {
                target: Target::Cgroup("/sys/fs/cgroup/fg".into()),
                nice: -20
            }
        );
        assert_eq!(
            "pid:42=19".parse::<Rule>().unwrap(),
            Rule {
                target: Target::Pid(42),
                nice: 19
            }
        );
        assert_eq!(
            "comm:schbench=-5".parse::<Rule>().unwrap(),
            Rule {
                target: Target::Comm("schbench".into()),
                nice: -5
            }
        );
        // the value is after the last '=', so a path may contain '='
        assert_eq!(
            "/sys/fs/cgroup/a=b=0".parse::<Rule>().unwrap().target,
            Target::Cgroup("/sys/fs/cgroup/a=b".into())
        );
    }

    #[test]
    fn bad_rules() {
        for bad in [
            "/x=-21",
            "/x=20",
            "/x=abc",
            "/x",
            "pid:abc=0",
            "comm:=0",
            "comm:waytoolongcommandname=0",
            "relative/path=0",
        ] {
            assert!(bad.parse::<Rule>().is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn nice_range() {
        assert_eq!(parse_nice("-20"), Ok(-20));
        assert_eq!(parse_nice("19"), Ok(19));
        assert!(parse_nice("-21").is_err());
        assert!(parse_nice("20").is_err());
    }

    #[test]
    fn key_layout_matches_the_bpf_struct() {
        assert_eq!(
            rule_key_bytes(bpf_intf::latcfs_rule_kind_LATCFS_RULE_PID, 7).len(),
            std::mem::size_of::<bpf_intf::latcfs_rule_key>()
        );
    }

    #[test]
    fn comm_key_is_zero_padded() {
        let Key::Comm(k) = Target::Comm("hackbench".into()).key().unwrap() else {
            panic!("not a comm key")
        };
        assert_eq!(&k[..9], b"hackbench");
        assert!(k[9..].iter().all(|&b| b == 0));
    }

    #[test]
    fn missing_targets_are_refused() {
        let e = Target::Cgroup("/definitely/not/a/cgroup".into())
            .key()
            .unwrap_err();
        assert!(e.to_string().contains("no such cgroup"), "{e}");
        let e = Target::Cgroup("/proc".into()).key().unwrap_err();
        assert!(e.to_string().contains("not on a cgroup v2"), "{e}");
        let e = Target::Pid(u32::MAX - 1).key().unwrap_err();
        assert!(e.to_string().contains("no such process"), "{e}");
    }
}
