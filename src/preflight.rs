//! Checks made before anything is loaded, each failing with one clear line.

use std::fs;
use std::path::Path;

use anyhow::{bail, Result};

/// Where the kernel exposes sched_ext's state.
pub const SCHED_EXT_SYSFS: &str = "/sys/kernel/sched_ext";

pub fn check_root() -> Result<()> {
    // SAFETY: geteuid() has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("must be run as root: attaching a sched_ext scheduler needs CAP_SYS_ADMIN");
    }
    Ok(())
}

/// The kernel has sched_ext and no other sched_ext scheduler is attached.
/// `sysfs` is normally SCHED_EXT_SYSFS; tests point it elsewhere.
pub fn check_sched_ext(sysfs: &Path) -> Result<()> {
    let state_path = sysfs.join("state");
    let Ok(state) = fs::read_to_string(&state_path) else {
        bail!(
            "this kernel has no sched_ext ({} is missing): boot one built with CONFIG_SCHED_CLASS_EXT=y",
            state_path.display()
        );
    };
    match state.trim() {
        "disabled" => Ok(()),
        other => {
            let ops = fs::read_to_string(sysfs.join("root/ops"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into());
            bail!("another sched_ext scheduler is already attached: {ops} (state {other}); stop it first")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fake_sysfs(name: &str, state: Option<&str>, ops: Option<&str>) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("latcfs-preflight-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("root")).unwrap();
        if let Some(s) = state {
            fs::write(dir.join("state"), s).unwrap();
        }
        if let Some(o) = ops {
            fs::write(dir.join("root/ops"), o).unwrap();
        }
        dir
    }

    #[test]
    fn missing_sched_ext_is_refused() {
        let dir = fake_sysfs("missing", None, None);
        let err = check_sched_ext(&dir).unwrap_err().to_string();
        assert!(err.contains("no sched_ext"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn disabled_is_fine() {
        let dir = fake_sysfs("disabled", Some("disabled\n"), None);
        check_sched_ext(&dir).unwrap();
    }

    #[test]
    fn another_scheduler_is_named() {
        let dir = fake_sysfs("other", Some("enabled\n"), Some("bpfland_1.1.2\n"));
        let err = check_sched_ext(&dir).unwrap_err().to_string();
        assert!(err.contains("already attached: bpfland_1.1.2"), "{err}");
        assert!(!err.contains('\n'));
    }
}
