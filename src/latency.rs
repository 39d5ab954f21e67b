//! Latency nice rules: parsing them, resolving their targets, writing them
//! into the BPF maps, and the pinned maps through which
//! `scx_latcfs latency-nice` reaches a running instance.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::bpf_intf;

pub const NICE_MIN: i32 = bpf_intf::latcfs_consts_LATCFS_LAT_NICE_MIN;
pub const NICE_MAX: i32 = bpf_intf::latcfs_consts_LATCFS_LAT_NICE_MAX;
const COMM_LEN: usize = bpf_intf::latcfs_consts_LATCFS_COMM_LEN as usize;
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Where a running instance pins the maps the subcommand needs.
pub const PIN_DIR: &str = "/sys/fs/bpf/scx_latcfs";

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

/// A rule with its target checked and turned into a map key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Rule(bpf_intf::latcfs_rule_kind, u64),
    Comm([u8; COMM_LEN]),
}

/// The cgroup id (its inode number on cgroup2) of a cgroup directory.
pub fn cgroup_id(path: &Path) -> Result<u64> {
    let meta = fs::metadata(path).map_err(|e| anyhow!("no such cgroup {}: {e}", path.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a cgroup directory", path.display());
    }
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .with_context(|| format!("bad path {}", path.display()))?;
    // SAFETY: statfs() writes only into `st`, which is large enough.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        bail!(
            "cannot statfs {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    if st.f_type as i64 != CGROUP2_SUPER_MAGIC {
        bail!("{} is not on a cgroup v2 file system", path.display());
    }
    Ok(meta.ino())
}

pub fn check_pid(pid: u32) -> Result<()> {
    if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
        bail!("no such process: pid {pid}");
    }
    Ok(())
}

/// The process (thread group) `tid` belongs to, from /proc/TID/status.
fn tgid_of(tid: u32) -> Result<u32> {
    let status = fs::read_to_string(format!("/proc/{tid}/status"))
        .map_err(|e| anyhow!("no such process: pid {tid} ({e})"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow!("no Tgid in /proc/{tid}/status"))
}

/// A pid rule's target: a process, not one of its other threads (a rule
/// is kept per process, so a thread id would never match).
fn check_process(pid: u32) -> Result<()> {
    check_pid(pid)?;
    let tgid = tgid_of(pid)?;
    if tgid != pid {
        bail!("pid {pid} is a thread of process {tgid}: rules apply to whole processes, use pid {tgid}");
    }
    Ok(())
}

/// A cgroup rule's target must have the cpu controller (or be the root):
/// tasks are matched by the cgroup the cpu controller puts them in.
fn check_cpu_controller(path: &Path) -> Result<()> {
    let root = path.parent().is_none_or(|p| cgroup_id(p).is_err());
    if root || path.join("cpu.weight").exists() {
        return Ok(());
    }
    bail!(
        "cgroup {} does not have the cpu controller: enable it with `echo +cpu > {}/cgroup.subtree_control`",
        path.display(),
        path.parent().map_or_else(|| "/".into(), |p| p.display().to_string())
    )
}

impl Target {
    /// Check that the target exists and make its map key.
    pub fn key(&self) -> Result<Key> {
        Ok(match self {
            Target::Pid(pid) => {
                check_process(*pid)?;
                Key::Rule(bpf_intf::latcfs_rule_kind_LATCFS_RULE_PID, *pid as u64)
            }
            Target::Cgroup(path) => {
                let id = cgroup_id(path)?;
                check_cpu_controller(path)?;
                Key::Rule(bpf_intf::latcfs_rule_kind_LATCFS_RULE_CGROUP, id)
            }
            Target::Comm(comm) => {
                let mut k = [0u8; COMM_LEN];
                k[..comm.len()].copy_from_slice(comm.as_bytes());
                Key::Comm(k)
            }
        })
    }
}

impl Target {
    /// The map key of a rule to remove: like key(), but a process may
    /// have exited since.
    pub fn key_to_remove(&self) -> Result<Key> {
        match self {
            Target::Pid(pid) => Ok(Key::Rule(
                bpf_intf::latcfs_rule_kind_LATCFS_RULE_PID,
                *pid as u64,
            )),
            Target::Cgroup(path) => Ok(Key::Rule(
                bpf_intf::latcfs_rule_kind_LATCFS_RULE_CGROUP,
                cgroup_id(path)?,
            )),
            Target::Comm(_) => self.key(),
        }
    }
}

impl Key {
    /// The rule's target as `list` prints it: the cgroup's path if it
    /// still exists under `cgroot`.
    pub fn describe(&self, cgroot: &Path) -> String {
        match self {
            Key::Comm(k) => {
                let end = k.iter().position(|&b| b == 0).unwrap_or(k.len());
                format!("comm:{}", String::from_utf8_lossy(&k[..end]))
            }
            Key::Rule(kind, id) if *kind == bpf_intf::latcfs_rule_kind_LATCFS_RULE_PID => {
                format!("pid:{id}")
            }
            Key::Rule(_, id) => find_cgroup(cgroot, *id).map_or_else(
                || format!("cgroup id {id} (removed)"),
                |p| p.display().to_string(),
            ),
        }
    }
}

/// Where cgroup v2 is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Whether the cgroup of id `id` is gone: opening it by its file handle (a
/// kernfs handle is the 8-byte id) fails with ESTALE. Any other failure
/// (no cgroup2 at CGROUP_ROOT, no privilege) counts as not gone.
fn cgroup_gone(id: u64) -> bool {
    const FILEID_KERNFS: i32 = 0xfe;
    #[repr(C)]
    struct Handle {
        bytes: u32,
        kind: i32,
        id: u64,
    }
    let Ok(root) = fs::File::open(CGROUP_ROOT) else {
        return false;
    };
    let mut h = Handle {
        bytes: 8,
        kind: FILEID_KERNFS,
        id,
    };
    // SAFETY: open_by_handle_at reads the handle and returns an fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            std::os::fd::AsRawFd::as_raw_fd(&root),
            &mut h as *mut Handle,
            libc::O_RDONLY | libc::O_DIRECTORY,
        )
    };
    if fd >= 0 {
        // SAFETY: the fd is ours and closed once.
        unsafe { libc::close(fd as i32) };
        return false;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::ESTALE)
}

/// The directory under `root` whose cgroup id is `id`.
fn find_cgroup(root: &Path, id: u64) -> Option<PathBuf> {
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let meta = fs::symlink_metadata(&d).ok()?;
        if meta.ino() == id {
            return Some(d);
        }
        if let Ok(rd) = fs::read_dir(&d) {
            dirs.extend(
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    None
}

fn rule_key_bytes(kind: bpf_intf::latcfs_rule_kind, id: u64) -> Vec<u8> {
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

/// The maps of the running instance, opened through their pins.
pub struct Pinned {
    pub rules: MapHandle,
    pub comm: MapHandle,
    pub ctl: MapHandle,
    pub task_ctx: MapHandle,
}

impl Pinned {
    pub fn open() -> Result<Self> {
        let running = fs::read_to_string(format!("{}/root/ops", crate::preflight::SCHED_EXT_SYSFS))
            .map(|s| s.starts_with("latcfs"))
            .unwrap_or(false);
        if !running {
            bail!("no running scx_latcfs instance (start one with `scx_latcfs`)");
        }
        let open = |name: &str| {
            let path = Path::new(PIN_DIR).join(name);
            MapHandle::from_pinned_path(&path)
                .with_context(|| format!("opening the running instance's map {}", path.display()))
        };
        Ok(Self {
            rules: open("lat_rules")?,
            comm: open("lat_comm")?,
            ctl: open("lat_ctl")?,
            task_ctx: open("task_ctx_stor")?,
        })
    }

    pub fn rule_maps(&self) -> RuleMaps<'_, MapHandle> {
        RuleMaps {
            rules: &self.rules,
            comm: &self.comm,
            ctl: &self.ctl,
        }
    }

    /// The latency nice a task currently has in the scheduler.
    pub fn task_nice(&self, pid: u32) -> Result<i32> {
        Ok(task_ctx(&self.task_ctx, pid, 0)?.lat_nice as i32)
    }
}

/// PIDFD_THREAD (include/uapi/linux/pidfd.h): a pidfd for one thread.
const PIDFD_THREAD: u32 = libc::O_EXCL as u32;

/// A task's struct task_ctx from the task storage map `map`, by a pidfd
/// opened with `flags` (0 for a process, PIDFD_THREAD for a thread).
fn task_ctx(map: &impl MapCore, pid: u32, flags: u32) -> Result<bpf_intf::task_ctx> {
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

/// Make sure a bpf file system is mounted at /sys/fs/bpf.
fn ensure_bpffs() -> Result<()> {
    const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
    let dir = std::ffi::CString::new("/sys/fs/bpf").unwrap_or_default();
    // SAFETY: statfs() writes only into `st`.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(dir.as_ptr(), &mut st) } == 0 && st.f_type as i64 == BPF_FS_MAGIC {
        return Ok(());
    }
    let bpf = std::ffi::CString::new("bpf").unwrap_or_default();
    // SAFETY: all arguments are valid NUL-terminated strings.
    if unsafe {
        libc::mount(
            bpf.as_ptr(),
            dir.as_ptr(),
            bpf.as_ptr(),
            0,
            std::ptr::null(),
        )
    } != 0
    {
        bail!(
            "cannot mount bpffs on /sys/fs/bpf: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// The pins of a running instance; removed when dropped.
pub struct Pins {
    paths: Vec<PathBuf>,
}

impl Pins {
    /// Pin `maps` (name, map) under PIN_DIR, clearing what an instance that
    /// was killed may have left there.
    pub fn create(maps: &mut [(&str, &mut libbpf_rs::MapMut)]) -> Result<Self> {
        ensure_bpffs()?;
        let dir = Path::new(PIN_DIR);
        if dir.exists() {
            fs::remove_dir_all(dir).with_context(|| format!("removing stale pins in {PIN_DIR}"))?;
        }
        fs::create_dir_all(dir).with_context(|| format!("creating {PIN_DIR}"))?;
        let mut pins = Pins { paths: vec![] };
        for (name, map) in maps.iter_mut() {
            let name: &str = name;
            let path = dir.join(name);
            map.pin(&path)
                .with_context(|| format!("pinning {name} at {}", path.display()))?;
            pins.paths.push(path);
        }
        Ok(pins)
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = fs::remove_file(p);
        }
        let _ = fs::remove_dir(PIN_DIR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
