//! How `scx_latcfs latency-nice` reaches a running instance: the
//! instance pins the maps it needs under PIN_DIR for as long as it runs
//! (`PinGuard`), and the subcommand opens them there (`Instance`).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use libbpf_rs::MapHandle;

use super::maps::{task_ctx, RuleMaps};

/// Where a running instance pins the maps the subcommand needs.
pub const PIN_DIR: &str = "/sys/fs/bpf/scx_latcfs";

/// The maps of the running instance, opened through their pins.
pub struct Instance {
    pub rules: MapHandle,
    pub comm: MapHandle,
    pub ctl: MapHandle,
    pub task_ctx: MapHandle,
}

impl Instance {
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

/// The running instance's own pins, made by `create()` and removed when
/// this is dropped (`Instance` opens them from another process).
pub struct PinGuard {
    paths: Vec<PathBuf>,
}

impl PinGuard {
    /// Pin `maps` (name, map) under PIN_DIR, clearing what an instance that
    /// was killed may have left there.
    pub fn create(maps: &mut [(&str, &mut libbpf_rs::MapMut)]) -> Result<Self> {
        ensure_bpffs()?;
        let dir = Path::new(PIN_DIR);
        if dir.exists() {
            fs::remove_dir_all(dir).with_context(|| format!("removing stale pins in {PIN_DIR}"))?;
        }
        fs::create_dir_all(dir).with_context(|| format!("creating {PIN_DIR}"))?;
        let mut pins = PinGuard { paths: vec![] };
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

impl Drop for PinGuard {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = fs::remove_file(p);
        }
        let _ = fs::remove_dir(PIN_DIR);
    }
}
