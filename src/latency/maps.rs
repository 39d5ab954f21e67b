//! The BPF maps that hold the rules, and the per-task values read back
//! from the task storage map.

use std::fs;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use super::rule::COMM_LEN;
use super::target::{cgroup_gone, check_pid, Key};
use crate::bpf_intf;

pub(super) fn rule_key_bytes(kind: bpf_intf::latcfs_rule_kind, id: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(std::mem::size_of::<bpf_intf::latcfs_rule_key>());
    b.extend_from_slice(&id.to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b
}

/// The rule maps of a loaded scheduler, from its skeleton or from the pins.
pub struct RuleMaps<'a, M: MapCore> {
    pub rules: &'a M,
    pub comm: &'a M,
    pub ctl: &'a M,
}

/// Capacities of the rule maps (bpf/latency.bpf.h).
const RULES_MAX: u32 = 4096;
const COMM_RULES_MAX: u32 = 1024;

impl<M: MapCore> RuleMaps<'_, M> {
    /// Write one rule. Tasks see it after bump_gen().
    pub fn set(&self, key: &Key, nice: i32) -> Result<()> {
        let v = nice.to_ne_bytes();
        let (res, full) = match key {
            Key::Rule(kind, id) => (
                self.rules
                    .update(&rule_key_bytes(*kind, *id), &v, MapFlags::ANY),
                format!("{RULES_MAX} pid and cgroup rules"),
            ),
            Key::Comm(k) => (
                self.comm.update(k, &v, MapFlags::ANY),
                format!("{COMM_RULES_MAX} command name rules"),
            ),
        };
        res.map_err(|e| {
            if e.kind() == libbpf_rs::ErrorKind::TooBig {
                anyhow!("the latency nice rule table is full ({full}): remove some with `scx_latcfs latency-nice unset`")
            } else {
                anyhow!(e).context("writing the latency nice rule")
            }
        })
    }

    /// Remove one rule; an error if there was none. Tasks see it after
    /// bump_gen().
    pub fn unset(&self, key: &Key) -> Result<()> {
        let res = match key {
            Key::Rule(kind, id) => self.rules.delete(&rule_key_bytes(*kind, *id)),
            Key::Comm(k) => self.comm.delete(k),
        };
        res.map_err(|e| {
            if e.kind() == libbpf_rs::ErrorKind::NotFound {
                anyhow!("there is no such rule")
            } else {
                anyhow!(e).context("removing the latency nice rule")
            }
        })
    }

    /// Every rule the maps hold.
    pub fn dump(&self) -> Result<Vec<(Key, i32)>> {
        let nice = |v: Option<Vec<u8>>| -> Option<i32> {
            v.and_then(|b| {
                b.get(..4)
                    .map(|b| i32::from_ne_bytes(b.try_into().unwrap_or([0; 4])))
            })
        };
        let mut out = vec![];
        for k in self.rules.keys() {
            let (Some(id), Some(kind)) = (k.get(..8), k.get(8..12)) else {
                continue;
            };
            let id = u64::from_ne_bytes(id.try_into().unwrap_or([0; 8]));
            let kind = u32::from_ne_bytes(kind.try_into().unwrap_or([0; 4]));
            let v = self
                .rules
                .lookup(&k, MapFlags::ANY)
                .context("reading a latency nice rule")?;
            if let Some(v) = nice(v) {
                out.push((Key::Rule(kind as bpf_intf::latcfs_rule_kind, id), v));
            }
        }
        for k in self.comm.keys() {
            let Ok(name) = <[u8; COMM_LEN]>::try_from(k.as_slice()) else {
                continue;
            };
            let v = self
                .comm
                .lookup(&k, MapFlags::ANY)
                .context("reading a latency nice rule")?;
            if let Some(v) = nice(v) {
                out.push((Key::Comm(name), v));
            }
        }
        Ok(out)
    }

    /// Remove the rules of processes and cgroups that no longer exist (the
    /// BPF side removes a pid rule when the process' last thread goes; this
    /// catches the rest). Returns how many.
    pub fn forget_dead(&self) -> Result<usize> {
        let mut n = 0;
        for (key, _) in self.dump()? {
            let Key::Rule(kind, id) = key else { continue };
            let gone = if kind == bpf_intf::latcfs_rule_kind_LATCFS_RULE_PID {
                !Path::new(&format!("/proc/{id}")).exists()
            } else {
                cgroup_gone(id)
            };
            if gone && self.rules.delete(&rule_key_bytes(kind, id)).is_ok() {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Tell every task to look its latency nice up again.
    pub fn bump_gen(&self) -> Result<()> {
        let zero = 0u32.to_ne_bytes();
        let cur = self
            .ctl
            .lookup(&zero, MapFlags::ANY)
            .context("reading lat_ctl")?
            .and_then(|v| {
                v.get(..8)
                    .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
            })
            .unwrap_or(0);
        self.ctl
            .update(&zero, &(cur + 1).to_ne_bytes(), MapFlags::ANY)
            .context("writing lat_ctl")
    }
}

/// PIDFD_THREAD (include/uapi/linux/pidfd.h): a pidfd for one thread.
const PIDFD_THREAD: u32 = libc::O_EXCL as u32;

/// A task's struct task_ctx from the task storage map `map`, by a pidfd
/// opened with `flags` (0 for a process, PIDFD_THREAD for a thread).
pub(super) fn task_ctx(map: &impl MapCore, pid: u32, flags: u32) -> Result<bpf_intf::task_ctx> {
    check_pid(pid)?;
    // SAFETY: pidfd_open takes a pid and flags and returns an fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, flags) };
    if fd < 0 {
        bail!("pidfd_open({pid}): {}", std::io::Error::last_os_error());
    }
    let fd = fd as i32;
    let res = map.lookup(&fd.to_ne_bytes(), MapFlags::ANY);
    // SAFETY: fd is ours and closed once.
    unsafe { libc::close(fd) };
    let bytes = res
        .with_context(|| format!("reading the scheduler state of pid {pid}"))?
        .ok_or_else(|| anyhow!("pid {pid} is not scheduled by scx_latcfs"))?;
    if bytes.len() < std::mem::size_of::<bpf_intf::task_ctx>() {
        bail!("unexpected task state size {}", bytes.len());
    }
    // SAFETY: the map value is a struct task_ctx (bpf/intf.h), length checked.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const bpf_intf::task_ctx) })
}

/// The per-task values tasks inherited at fork (not given by a rule), by
/// thread id, from the task storage map of a scheduler that is going away,
/// so that the next one can give them back. Threads that went away
/// meanwhile are skipped.
pub fn inherited_values(map: &impl MapCore) -> Vec<(u32, i32)> {
    let tids = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .flat_map(|pid| {
            fs::read_dir(format!("/proc/{pid}/task"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok())
        });
    tids.filter_map(|tid| {
        let t = task_ctx(map, tid, PIDFD_THREAD).ok()?;
        (t.has_own && !t.own_from_rule).then_some((tid, t.own_nice as i32))
    })
    .collect()
}
