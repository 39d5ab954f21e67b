//! A latency nice rule as the user gives it: `TARGET=VALUE`.

use std::path::PathBuf;
use std::str::FromStr;

use crate::bpf_intf;

pub const NICE_MIN: i32 = bpf_intf::latcfs_consts_LATCFS_LAT_NICE_MIN;
pub const NICE_MAX: i32 = bpf_intf::latcfs_consts_LATCFS_LAT_NICE_MAX;
pub(super) const COMM_LEN: usize = bpf_intf::latcfs_consts_LATCFS_COMM_LEN as usize;

/// What a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every thread of a process.
    Pid(u32),
    /// Tasks running a program of this name (as in /proc/PID/comm).
    Comm(String),
    /// Every task in a cgroup (v2, cpu controller) and its descendants.
    Cgroup(PathBuf),
}

/// `TARGET=VALUE` as given to `--latency-nice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub target: Target,
    pub nice: i32,
}

pub fn parse_nice(s: &str) -> Result<i32, String> {
    let v: i32 = s
        .trim()
        .parse()
        .map_err(|_| format!("latency nice '{s}' is not an integer"))?;
    if !(NICE_MIN..=NICE_MAX).contains(&v) {
        return Err(format!(
            "latency nice {v} is not in {NICE_MIN}..={NICE_MAX}"
        ));
    }
    Ok(v)
}

pub fn parse_comm(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() >= COMM_LEN || s.contains('\0') {
        return Err(format!(
            "command name '{s}' must be 1 to {} bytes",
            COMM_LEN - 1
        ));
    }
    Ok(s.to_string())
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Pid(pid) => write!(f, "pid {pid}"),
            Target::Comm(comm) => write!(f, "command {comm}"),
            Target::Cgroup(path) => write!(f, "cgroup {}", path.display()),
        }
    }
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(pid) = s.strip_prefix("pid:") {
            let pid: u32 = pid.parse().map_err(|_| format!("'{pid}' is not a pid"))?;
            return Ok(Target::Pid(pid));
        }
        if let Some(comm) = s.strip_prefix("comm:") {
            return parse_comm(comm).map(Target::Comm);
        }
        if s.starts_with('/') {
            return Ok(Target::Cgroup(PathBuf::from(s)));
        }
        Err(format!(
            "'{s}' is not a target: expected /path/of/cgroup, pid:N or comm:NAME"
        ))
    }
}

impl FromStr for Rule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (target, nice) = s
            .rsplit_once('=')
            .ok_or_else(|| format!("'{s}' is not TARGET=VALUE"))?;
        Ok(Rule {
            target: target.parse()?,
            nice: parse_nice(nice)?,
        })
    }
}
