// Builds the BPF scheduler (bpf/main.bpf.c) into a libbpf-rs skeleton and
// turns bpf/intf.h into Rust with bindgen; scx_cargo supplies vmlinux.h and
// the sched_ext BPF headers. Also builds bpf/arith.h for the host, for the
// unit tests.
use std::process::Command;

fn main() {
    scx_cargo::BpfBuilder::new()
        .expect("scx_cargo: cannot find a usable clang (set BPF_CLANG)")
        .enable_intf("bpf/intf.h", "bpf_intf.rs")
        .enable_skel("bpf/main.bpf.c", "bpf")
        .build()
        .expect("building the BPF scheduler failed");

    // bpf/arith.h for the host too, so that the unit tests (src/arith.rs)
    // exercise the BPF side's own arithmetic.
    cc::Build::new()
        .file("tests/arith/host.c")
        .include("bpf")
        .warnings(true)
        .extra_warnings(true)
        .compile("latcfs_arith");
    println!("cargo:rerun-if-changed=bpf/arith.h");
    println!("cargo:rerun-if-changed=tests/arith/host.c");

    // The git revision for --version; "unknown" outside a git checkout.
    let rev = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=LATCFS_GIT_REV={rev}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs");
}
