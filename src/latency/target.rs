//! A rule's target checked against the running system and turned into
//! the key of the map that holds it.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

use super::rule::{Target, COMM_LEN};
use crate::bpf_intf;

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

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

pub(super) fn check_pid(pid: u32) -> Result<()> {
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
pub(super) fn cgroup_gone(id: u64) -> bool {
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
