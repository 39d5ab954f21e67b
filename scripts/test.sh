#!/usr/bin/env bash
# Run every test: formatting and lints, the unit tests, then the VM tests.
#
# The VM tests need a sched_ext kernel. As root on a host whose own kernel
# has sched_ext they run right here; anywhere else they run in one qemu
# guest (scripts/vm-run.sh), which scripts/setup.sh must have prepared. If
# the guest cannot boot, the VM tests fail: they are never skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

step() { printf '\n### %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --check
step "cargo clippy"
cargo clippy --locked --all-targets -- -D warnings
step "unit tests"
cargo test --locked
step "build"
cargo build --locked

export LATCFS=target/debug/scx_latcfs
if host_has_sched_ext; then
	step "VM tests, on this host (its kernel has sched_ext)"
	tests/vm/all.sh tests/vm
	tests/vm/all.sh tests/vm/smt2llc
	tests/vm/all.sh tests/vm/cpu4
else
	step "VM tests, in a qemu guest with 2 CPUs"
	scripts/vm-run.sh -- tests/vm/all.sh tests/vm
	step "VM tests, in a qemu guest with SMT siblings and 2 LLCs"
	LATCFS_QEMU_OPTS="-smp 8,sockets=2,cores=2,threads=2" \
		scripts/vm-run.sh --cpus 8 -- tests/vm/all.sh tests/vm/smt2llc
	step "VM tests, in a qemu guest with 4 CPUs (hotplug)"
	scripts/vm-run.sh --cpus 4 -- tests/vm/all.sh tests/vm/cpu4
	step "VM tests, on the oldest installed sched_ext kernel"
	scripts/vm-run.sh --oldest -- env LATCFS_STORM=1000 \
		tests/vm/all.sh tests/vm/foundation.sh tests/vm/cgroup.sh
fi
