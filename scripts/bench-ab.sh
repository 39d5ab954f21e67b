#!/usr/bin/env bash
# A/B of scx_latcfs builds under schbench, inside a sched_ext guest:
#
#   scripts/vm-run.sh -- env AB_DIR=DIR VARS="eevdf a b a-20" scripts/bench-ab.sh
#
# Each name in VARS is a run: "eevdf" (no BPF scheduler), NAME (the binary
# DIR/latcfs-NAME with the default flags) or NAME-20 (the same with the
# foreground cgroup at latency nice -20). The runs are interleaved, ROUNDS
# times (default 2): schbench -m M -t T -r SECS (default 2, 2, 40) in cgroup
# fg while `stress-ng --cpu 2 --cpu-load 50` loads cgroup bg. One line per
# run: wakeup p50/p90/p99/p99.9 and request p99 in µs, average RPS, and the
# CPU time each cgroup used during the run and the scheduler's preemption
# counters summed over the run.
#
# SCHBENCH is the real schbench (default: schbench on PATH, else
# latcfs-schbench from target/release).
set -u
cd "$(dirname "$0")/.."
. scripts/lib.sh
VARS=${VARS:-eevdf}
ROUNDS=${ROUNDS:-2} M=${M:-2} T=${T:-2} SECS=${SECS:-40}
AB_DIR=${AB_DIR:-target/release}
SB=${SCHBENCH:-$(command -v schbench || echo target/release/latcfs-schbench)}
CG=/sys/fs/cgroup
echo +cpu > $CG/cgroup.subtree_control
mkdir -p $CG/fg $CG/bg
W=$(mktemp -d)
trap 'rm -rf "$W"; rmdir $CG/fg $CG/bg 2>/dev/null' EXIT

usage() { cg_usage $CG/$1; }

counters() {
	python3 -c '
import json, sys
t = {}
for l in open(sys.argv[1]):
    try:
        d = json.loads(l)
    except ValueError:
        continue
    for k in ("preempt", "preempt_resume", "preempt_defer", "preempt_late", "rescue"):
        if isinstance(d.get(k), (int, float)):
            t[k] = t.get(k, 0) + d[k]
print(" ".join("%s=%d" % kv for kv in t.items()))' "$1"
}

for r in $(seq 1 "$ROUNDS"); do
	for v in $VARS; do
		base=${v%-20} extra=() S=
		[ "$base" != "$v" ] && extra=(--latency-nice $CG/fg=-20)
		if [ "$base" != eevdf ]; then
			"$AB_DIR/latcfs-$base" --stats 1 --json "${extra[@]}" > $W/st 2> $W/err & S=$!
			wait_attached $S 30 || echo "bench-ab: latcfs-$base did not attach" >&2
		fi
		scripts/in-cgroup $CG/bg stress-ng --cpu 2 --cpu-load 50 --quiet --temp-path /tmp &
		B=$!
		sleep 1
		u0=$(usage fg) b0=$(usage bg)
		scripts/in-cgroup $CG/fg "$SB" -m "$M" -t "$T" -r "$SECS" -w 2 -i 0 > $W/sb 2>&1
		u1=$(usage fg) b1=$(usage bg)
		kill $B
		wait $B 2>/dev/null
		c=
		if [ -n "$S" ]; then kill -INT $S; wait $S; c=$(counters $W/st); fi
		w=$(awk '/Wakeup Latencies/ { s = "w" } /Request Latencies/ { s = "q" }
			/RPS percentiles/ { s = "r" }
			/th:/ { sub(/\*/, ""); n = $1; sub(/:/, "", n); v[s n] = $2 }
			/average rps/ { a = $3 }
			END { printf "p50 %s p90 %s p99 %s p999 %s req99 %s rps %s",
				v["w50.0th"], v["w90.0th"], v["w99.0th"], v["w99.9th"], v["q99.0th"], a }' $W/sb)
		echo "round $r $v: $w cpu fg $(((u1 - u0) / 1000)) bg $(((b1 - b0) / 1000)) ms $c"
	done
done
