#!/usr/bin/env bash
# Check that every external command the build, the tests and the benchmark
# scripts call is here. Prints nothing and exits 0 if so; otherwise names
# every missing one in one line and exits 1. scripts/setup.sh installs all
# of them; scripts/test.sh runs this before anything else.
#
# usage: scripts/check-deps.sh [--host-only]
#   --host-only  skip what only the VM boot needs (qemu, virtme-ng,
#                busybox): for a host whose own kernel has sched_ext.
set -uo pipefail
cd "$(dirname "$0")/.."

# Build and lints.
need=(cargo rustc rustfmt cargo-clippy clang clang-19 pkg-config git)
# What the in-guest suites and the benchmarks run (the guest shares this
# machine's /, so the same binaries serve both).
need+=(hackbench stress-ng taskset chrt renice nice timeout setpriv unshare mount lscpu
       dmesg pgrep ps nproc awk sed grep sort seq mktemp tee find python3
       bpftool depmod)
if [ "${1:-}" != --host-only ]; then
	need+=(qemu-system-x86_64 busybox)
fi

missing=()
for c in "${need[@]}"; do
	command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
# virtme-ng lives in the venv scripts/setup.sh makes, or on PATH.
if [ "${1:-}" != --host-only ] && ! command -v vng >/dev/null 2>&1 &&
	[ ! -x "${LATCFS_PREFIX:-/opt/scx_latcfs}/venv/bin/vng" ]; then
	missing+=(vng)
fi
# Python modules of Debian's python3, which the scripts call by path: json
# for the tests, matplotlib for the benchmark charts.
for m in json matplotlib; do
	/usr/bin/python3 -c "import $m" 2>/dev/null || missing+=("python3:$m")
done

if [ ${#missing[@]} -gt 0 ]; then
	echo "check-deps: missing: ${missing[*]} (run scripts/setup.sh as root)" >&2
	exit 1
fi
