#!/usr/bin/env bash
# cgroup weight benchmark: fairness error and the cost of the cgroup
# bookkeeping, with the fast paths (default) and without them
# (--no-cgroup-fast-paths), interleaved over ROUNDS rounds in one boot.
#
# Each round and mode: the nested example (root -> A(100){B(100), C(100)},
# D(200), two hogs in each leaf) for SECS seconds, measured with cpu.stat
# against the ideal 1/6, 1/6, 2/3; then root-only hackbench and a storm of
# 2000 `sleep 0 &` in a child cgroup. BPF run time per call of runnable and
# quiescent (where the bookkeeping lives) comes from kernel.bpf_stats_enabled.
#
# usage: scripts/bench-cgroup.sh [ROUNDS [SECS]]   (default 2 8)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ROUNDS=${1:-2} SECS=${2:-8}
in_guest -- "$@"
BIN=target/release/scx_latcfs
CG=/sys/fs/cgroup
OUT=$(mktemp -d)
echo +cpu > $CG/cgroup.subtree_control
mkdir -p $CG/A $CG/D $CG/S
echo +cpu > $CG/A/cgroup.subtree_control
mkdir -p $CG/A/B $CG/A/C
echo 200 > $CG/D/cpu.weight
sysctl -q kernel.bpf_stats_enabled=1

run_mode() { # run_mode NAME FLAGS...
	local name=$1; shift
	bench_attach "$BIN" "$OUT/sched.out" "$OUT/sched.log" "$@"
	local hogs=() cg b0 c0 d0
	for cg in $CG/A/B $CG/A/C $CG/D; do
		for _ in 1 2; do scripts/in-cgroup $cg sh -c 'while :; do :; done' & hogs+=($!); done
	done
	sleep 1
	b0=$(cg_usage $CG/A/B) c0=$(cg_usage $CG/A/C) d0=$(cg_usage $CG/D)
	sleep "$SECS"
	local b=$(( $(cg_usage $CG/A/B) - b0 )) c=$(( $(cg_usage $CG/A/C) - c0 )) d=$(( $(cg_usage $CG/D) - d0 ))
	kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null || true
	hackbench -g 2 -l 100 > /dev/null
	scripts/in-cgroup $CG/S bash -c 'for i in $(seq 1 2000); do sleep 0 & done; wait'
	local costs
	costs=$(bpf_prog_costs | /usr/bin/python3 -c '
import json, sys
ps = {p["name"]: p for p in json.load(sys.stdin)}
out = []
for n in ("latcfs_runnable", "latcfs_quiescent", "latcfs_stopping"):
    p = ps.get(n)
    out.append("%s=%.0fns/%d" % (n[7:], p["ns"] / p["cnt"], p["cnt"]) if p else n[7:] + "=-")
print(" ".join(out))')
	bench_detach
	local err
	err=$(awk -v b=$b -v c=$c -v d=$d 'BEGIN { t = b + c + d; e1 = (b/t - 1/6) / (1/6); e2 = (c/t - 1/6) / (1/6); e3 = (d/t - 2/3) / (2/3);
		m = e1 < 0 ? -e1 : e1; if ((e2 < 0 ? -e2 : e2) > m) m = e2 < 0 ? -e2 : e2; if ((e3 < 0 ? -e3 : e3) > m) m = e3 < 0 ? -e3 : e3;
		printf "B=%.3f C=%.3f D=%.3f maxerr=%.1f%%", b/t, c/t, d/t, 100 * m }')
	echo "$name $err $costs" | tee -a "$OUT/results"
}

for r in $(seq 1 "$ROUNDS"); do
	run_mode fast
	run_mode slow --no-cgroup-fast-paths
done
echo
echo "nested shares (ideal B=0.167 C=0.167 D=0.667) and BPF ns per call / calls, $ROUNDS rounds, $(nproc) CPUs, $(uname -r)"
cat "$OUT/results"
