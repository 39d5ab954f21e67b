#!/usr/bin/env bash
# Per-LLC queues against the single-queue core (issue 15), in one boot:
#
#   scripts/vm-run.sh [--cpus N ...] -- env AB_DIR=DIR VARS="eevdf single llc" \
#       scripts/bench-scale.sh
#
# Each name in VARS is a run: "eevdf" (no BPF scheduler) or NAME, the
# binary DIR/latcfs-NAME with its default flags. The runs are interleaved,
# ROUNDS times (default 3). Each run is hackbench -g HB_GROUPS (default: 2 per
# CPU) -l LOOPS (default 30) in four modes (process/thread x socket/pipe),
# with kernel.bpf_stats_enabled set. One line per run: the four hackbench
# times in s, ns per call of ops.enqueue() and ops.dispatch() over the run,
# and the dispatches served from the CPU's own LLC (shared + lat_dispatch)
# against those taken from another (steal; the single-queue core has no
# such counter and prints 0).
#
# Under TCG on 2 host cores the vCPUs are threads of two host CPUs: the
# cost per call includes waiting for a DSQ lock held by a vCPU that is not
# running, and says nothing about contention on real hardware.
set -u
cd "$(dirname "$0")/.."
. scripts/lib.sh
VARS=${VARS:-eevdf}
ROUNDS=${ROUNDS:-3} LOOPS=${LOOPS:-30}
AB_DIR=${AB_DIR:-target/release}
HB_GROUPS=${HB_GROUPS:-$((2 * $(nproc)))}
W=$(mktemp -d)
trap 'bench_detach; sysctl -qw kernel.bpf_stats_enabled=0; rm -rf "$W"' EXIT

# cost NAME: ns per call of the attached struct_ops program NAME.
cost() {
	bpf_prog_costs | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p["name"] == sys.argv[1]:
        print(p["ns"] // max(p["cnt"], 1)); break
else:
    print("-")' "$1"
}

echo "bench-scale: $(nproc) CPUs, $(uname -r), hackbench -g $HB_GROUPS -l $LOOPS, $ROUNDS rounds of: $VARS"
for r in $(seq 1 "$ROUNDS"); do
	for v in $VARS; do
		SCHED=
		if [ "$v" != eevdf ]; then
			sysctl -qw kernel.bpf_stats_enabled=1
			bench_attach "$AB_DIR/latcfs-$v" $W/st $W/err --stats 1
		fi
		t=()
		for mode in "" "-T" "-p" "-p -T"; do
			# shellcheck disable=SC2086
			t+=("$(hackbench -g "$HB_GROUPS" -l "$LOOPS" $mode | awk '/^Time:/ { print $2 }')")
		done
		line="round $r $v: hackbench ${t[*]}"
		if [ -n "$SCHED" ]; then
			enq=$(cost latcfs_enqueue) disp=$(cost latcfs_dispatch)
			bench_detach
			sysctl -qw kernel.bpf_stats_enabled=0
			own=$(($(stat_sum shared $W/st) + $(stat_sum lat_dispatch $W/st)))
			line+=" enqueue_ns $enq dispatch_ns $disp own_llc $own steal $(stat_sum steal $W/st)"
		fi
		echo "$line"
	done
done
