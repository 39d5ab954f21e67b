#!/usr/bin/env bash
# Latency nice benchmark, after the method of the latency nice thread:
# hackbench (process/thread x socket/pipe) runs in one cgroup while stress-ng
# loads another to 50% of every CPU, under
#   eevdf    the kernel's own scheduler (no sched_ext scheduler attached)
#   off      scx_latcfs without latency nice rules (the feature unused)
#   ln0      scx_latcfs, the hackbench cgroup at latency nice 0
#   ln-20    ... at -20
#   ln+19    ... at +19
# interleaved over ROUNDS rounds in one boot. Prints a table of median
# hackbench times and their ratio to EEVDF, and ln0 against off (the "latency
# nice 0 costs nothing" target: within 3%).
#
# usage: scripts/bench-latency.sh [ROUNDS [GROUPS [LOOPS]]]   (default 3 4 200)
# On a sched_ext host as root it runs here; elsewhere in the qemu guest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ROUNDS=${1:-3} GROUPS_=${2:-4} LOOPS=${3:-200}

in_guest -- "$@"
BIN=target/release/scx_latcfs
CG=/sys/fs/cgroup
OUT=$(mktemp -d)
echo +cpu > $CG/cgroup.subtree_control
mkdir -p $CG/bench-fg $CG/bench-bg

stress-ng --cpu "$(nproc)" --cpu-load 50 --temp-path "$OUT" --quiet &
BG=$!
echo $BG > $CG/bench-bg/cgroup.procs
for t in /proc/$BG/task/*; do echo "${t##*/}" > $CG/bench-bg/cgroup.threads 2>/dev/null || true; done
sleep 1
for p in $(pgrep -P $BG); do echo $p > $CG/bench-bg/cgroup.procs; done
trap 'kill $BG 2>/dev/null; [ -n "${SCHED:-}" ] && kill -INT $SCHED 2>/dev/null; wait' EXIT

attach() { bench_attach "$BIN" "$OUT/sched.out" "$OUT/sched.log" "$@"; }
detach() { bench_detach; }

modes=("process socket:" "thread socket:-T" "process pipe:-p" "thread pipe:-p -T")
configs=(eevdf off ln0 ln-20 ln+19)
for r in $(seq 1 "$ROUNDS"); do
	for c in "${configs[@]}"; do
		case $c in
		eevdf) ;;
		off) attach ;;
		ln0) attach --latency-nice $CG/bench-fg=0 ;;
		ln-20) attach --latency-nice $CG/bench-fg=-20 ;;
		ln+19) attach --latency-nice $CG/bench-fg=19 ;;
		esac
		for m in "${modes[@]}"; do
			name=${m%%:*} flags=${m#*:}
			t=$(scripts/in-cgroup $CG/bench-fg hackbench \
				-g "$GROUPS_" -l "$LOOPS" $flags | awk '/^Time:/ {print $2}')
			[ -n "$t" ] || { echo "bench: hackbench $flags failed under $c" >&2; exit 1; }
			echo "$c|$name|$t" >> "$OUT/results"
			printf 'round %d %-6s %-15s %ss\n' "$r" "$c" "$name" "$t" >&2
		done
		detach
	done
done

med() { grep -F "$1|$2|" "$OUT/results" | cut -d'|' -f3 | median; }

echo
echo "hackbench -g $GROUPS_ -l $LOOPS in a cgroup, stress-ng at 50% in another; $(nproc) CPUs, kernel $(uname -r), $ROUNDS rounds"
echo "median seconds (ratio to EEVDF); lower is better"
echo
printf '| %-15s |' mode; for c in "${configs[@]}"; do printf ' %-14s |' "$c"; done; printf ' %-9s |\n' "ln0/off"
printf '|%s|' "-----------------"; for c in "${configs[@]}"; do printf '%s|' "----------------"; done; printf '%s|\n' "-----------"
for m in "${modes[@]}"; do
	name=${m%%:*}
	base=$(med eevdf "$name")
	printf '| %-15s |' "$name"
	for c in "${configs[@]}"; do
		v=$(med "$c" "$name")
		printf ' %-14s |' "$(awk -v v="$v" -v b="$base" 'BEGIN {printf "%.3f (%.2f)", v, v / b}')"
	done
	printf ' %-9s |\n' "$(awk -v a="$(med ln0 "$name")" -v b="$(med off "$name")" 'BEGIN {printf "%.3f", a / b}')"
done
