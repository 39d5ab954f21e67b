#!/usr/bin/env bash
# Idle CPU selection benchmark, after the recent_used_cpu patch's method: a
# pipe ping-pong (latcfs-probe pingpong, as perf bench sched pipe) and
# hackbench, under EEVDF and under scx_latcfs with each selection step on and
# off, interleaved over ROUNDS rounds in one boot of a guest with SMT
# siblings and two LLCs. Prints, per configuration, the median ping-pong rate
# and hackbench time with their ratio to EEVDF, and the hit rates the
# scheduler counted (recent: hits/(hits+misses); fast: target+prev+recent
# hits/searches).
#
# usage: scripts/bench-idle.sh [ROUNDS [SECS]]   (default 3 rounds, 4 s ping-pong)
# On a sched_ext host as root it runs here on the host's own topology.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ROUNDS=${1:-3} SECS=${2:-4}

LATCFS_QEMU_OPTS="-smp 8,sockets=2,cores=2,threads=2" in_guest --cpus 8 -- "$@"
BIN=target/release/scx_latcfs
PROBE=target/release/latcfs-probe
OUT=$(mktemp -d)
SCHED=
trap '[ -n "$SCHED" ] && kill -INT $SCHED 2>/dev/null; wait' EXIT

attach() { bench_attach "$BIN" "$OUT/stats" "$OUT/sched.log" --stats 1 "$@"; }
detach() {
	sleep 1.2 # one more stats line
	bench_detach
}
sum() { stat_sum "$1" "$OUT/stats"; }

configs=(eevdf default no-recent no-prev no-both)
for r in $(seq 1 "$ROUNDS"); do
	for c in "${configs[@]}"; do
		case $c in
		eevdf) ;;
		default) attach ;;
		no-recent) attach --no-recent-cpu ;;
		no-prev) attach --no-prev-cpu ;;
		no-both) attach --no-prev-cpu --no-recent-cpu ;;
		esac
		pp=$("$PROBE" pingpong "$SECS" | grep -o 'per_sec=[0-9]*' | cut -d= -f2)
		hb=$(hackbench -g 4 -l 200 -p | awk '/^Time:/ {print $2}')
		if [ "$c" != eevdf ]; then
			detach
			echo "$c|rates|$(sum sis_recent) $(sum sis_recent_miss) $(sum sis_target) $(sum sis_prev) $(sum sis_search)" >> "$OUT/results"
		fi
		echo "$c|pp|$pp" >> "$OUT/results"
		echo "$c|hb|$hb" >> "$OUT/results"
		printf 'round %d %-9s pingpong %s/s  hackbench -p %ss\n' "$r" "$c" "$pp" "$hb" >&2
	done
done

med() { grep -F "$1|$2|" "$OUT/results" | cut -d'|' -f3 | median; }
rates() { # summed over rounds: recent hit rate, fast hit rate
	grep -F "$1|rates|" "$OUT/results" | cut -d'|' -f3 |
		awk '{rh += $1; rm += $2; fast += $3 + $4 + $1; s += $5}
		     END { printf "%s | %s", (rh + rm) ? sprintf("%.1f%%", 100 * rh / (rh + rm)) : "-", s ? sprintf("%.1f%%", 100 * fast / s) : "-" }'
}

echo
echo "latcfs-probe pingpong ${SECS}s and hackbench -g 4 -l 200 -p; $(nproc) CPUs ($(lscpu | awk -F: '/^Socket|^Core|^Thread/ {gsub(/ /, "", $2); printf "%s ", $2}')sockets/cores/threads), kernel $(uname -r), $ROUNDS rounds"
echo
echo "| config | pingpong round trips/s (ratio to EEVDF) | hackbench -p s (ratio) | recent hit rate | fast hit rate |"
echo "|---|---|---|---|---|"
bpp=$(med eevdf pp) bhb=$(med eevdf hb)
for c in "${configs[@]}"; do
	pp=$(med "$c" pp) hb=$(med "$c" hb)
	r="- | -"
	[ "$c" = eevdf ] || r=$(rates "$c")
	awk -v c="$c" -v pp="$pp" -v bpp="$bpp" -v hb="$hb" -v bhb="$bhb" -v r="$r" \
		'BEGIN { printf "| %s | %.0f (%.2f) | %.3f (%.2f) | %s |\n", c, pp, pp / bpp, hb, hb / bhb, r }'
done
