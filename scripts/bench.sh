#!/usr/bin/env bash
# The benchmark suite: hackbench and schbench tables in the layout of the
# latency nice thread, scx_latcfs against EEVDF and any upstream sched_ext
# scheduler installed, interleaved over rounds in one boot.
#
# usage: scripts/bench.sh [-r ROUNDS] [-q] [-o DIR]
#   -r ROUNDS  rounds, each running every scheduler once in turn (default 3)
#   -q         quick: fewer hackbench loops and shorter schbench runs
#   -o DIR     where results go (default bench-out/DATE)
#
# Schedulers: eevdf (the kernel's fair class: nothing attached), latcfs
# (default flags), latcfs-ln0, latcfs-ln-20 and latcfs-ln+19 (a rule puts
# the foreground cgroup at latency nice 0 / -20 / +19), and scx_bpfland and
# scx_lavd when found on PATH or in ~/.cargo/bin
# (`cargo install scx_bpfland scx_lavd`).
# Workloads, all in a foreground cgroup:
#   hackbench  process/thread x socket/pipe at nproc and 2*nproc groups;
#   schbench   -m 1 -t 1 (the foreground fits in the CPU the background
#              leaves) and -m 2 -t 2 (it does not), and -m 4 -t 2 on 4 or
#              more CPUs, while stress-ng loads a background cgroup to 50% of
#              every CPU (the latency nice thread's method), with schbench's
#              defaults otherwise (its per-CPU locks included); each run
#              lasts 60 s (10 s with -q) after 2 s of warmup, so that its
#              p99 rests on tens of samples. A real `schbench` on PATH is
#              used instead of latcfs-schbench.
#              LATCFS_SCHBENCH="MxT ..." picks other -m/-t pairs,
#              LATCFS_BENCH_SECS another run length (s) and
#              LATCFS_BENCH_LOOPS another hackbench -l.
# Also, per scheduler: the time from start to attached (load and verify) and
# the average run time per call of each BPF program (kernel.bpf_stats_enabled).
#
# LATCFS_BENCH_SCHEDS="eevdf latcfs ..." runs only those schedulers, and
# LATCFS_SCHBENCH_BIN picks the schbench binary (a real schbench built
# elsewhere, say).
#
# Output in DIR: raw.jsonl (one JSON object per measurement), schbench/*.json
# (each run's own JSON), progress.log, and from scripts/bench-report.py
# report.md (medians, spread, ratios to EEVDF, the targets) and *.png charts.
# On a sched_ext host as root it runs here; elsewhere in the qemu guest
# (LATCFS_BENCH_CPUS vCPUs, default 2; LATCFS_KERNEL picks the kernel image,
# as for scripts/vm-run.sh). Under qemu's emulation work runs
# about 100 times slower than on hardware: read the ratios, not the seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ROUNDS=3 QUICK=0 OUT=
usage() { echo "usage: $0 [-r ROUNDS] [-q] [-o DIR]" >&2; exit 2; }
while getopts "r:qo:" o; do
	case $o in
	r) ROUNDS=$OPTARG ;;
	q) QUICK=1 ;;
	o) OUT=$OPTARG ;;
	*) usage ;;
	esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "bench: -r wants a positive number of rounds" >&2; exit 2; }
# checked here, on the host, before anything is built or booted
for v in LATCFS_BENCH_SECS LATCFS_BENCH_LOOPS; do
	[[ "${!v:-1}" =~ ^[1-9][0-9]*$ ]] || { echo "bench: $v wants a positive number" >&2; exit 2; }
done

# --- on the host: build, run (here or in the guest), report ---------------
if [ "${LATCFS_IN_GUEST:-}" != 1 ]; then
	OUT=${OUT:-bench-out/$(date +%Y%m%d-%H%M%S)}
	mkdir -p "$OUT"
	OUT=$(realpath "$OUT")
	echo "bench: building (release)" >&2
	cargo build --locked --release >&2
	args=(-r "$ROUNDS" -o "$OUT")
	[ $QUICK = 0 ] || args+=(-q)
	if host_has_sched_ext; then
		LATCFS_IN_GUEST=1 scripts/bench.sh "${args[@]}"
	else
		LATCFS_OUT=$OUT scripts/vm-run.sh --cpus "${LATCFS_BENCH_CPUS:-2}" -- \
			env LATCFS_IN_GUEST=1 HOME="$HOME" LATCFS_SCHBENCH="${LATCFS_SCHBENCH:-}" \
			LATCFS_SCHBENCH_BIN="${LATCFS_SCHBENCH_BIN:-}" LATCFS_BENCH_SCHEDS="${LATCFS_BENCH_SCHEDS:-}" \
			LATCFS_BENCH_SECS="${LATCFS_BENCH_SECS:-}" LATCFS_BENCH_LOOPS="${LATCFS_BENCH_LOOPS:-}" \
			scripts/bench.sh "${args[@]}"
	fi
	/usr/bin/python3 scripts/bench-report.py "$OUT"
	echo "bench: report in $OUT/report.md" >&2
	exit 0
fi

# --- the run itself (in the guest, or on a sched_ext host) ----------------
STEP=setup
trap 'echo "bench: failed at step: $STEP" >&2' ERR
exec 2> >(tee -a "$OUT/progress.log" >&2)
progress() { echo "bench: $*" >&2; }

BIN=target/release/scx_latcfs
SCHBENCH=${LATCFS_SCHBENCH_BIN:-$(command -v schbench || echo target/release/latcfs-schbench)}
CG=/sys/fs/cgroup
NCPU=$(nproc)
if [ $QUICK = 1 ]; then LOOPS=50 SECS=10; else LOOPS=200 SECS=60; fi
LOOPS=${LATCFS_BENCH_LOOPS:-$LOOPS} SECS=${LATCFS_BENCH_SECS:-$SECS}
SCHB=${LATCFS_SCHBENCH:-1x1 2x2}
[ -n "${LATCFS_SCHBENCH:-}" ] || [ "$NCPU" -lt 4 ] || SCHB+=" 4x2"
mkdir -p "$OUT/schbench"
echo +cpu > $CG/cgroup.subtree_control
mkdir -p $CG/bench-fg $CG/bench-bg
sysctl -q kernel.bpf_stats_enabled=1

scheds=(eevdf latcfs latcfs-ln0 latcfs-ln-20 latcfs-ln+19)
declare -A PEER
for p in scx_bpfland scx_lavd; do
	path=$(command -v $p || true)
	[ -n "$path" ] || [ ! -x "$HOME/.cargo/bin/$p" ] || path=$HOME/.cargo/bin/$p
	[ -z "$path" ] || { PEER[$p]=$path; scheds+=($p); }
done
if [ -n "${LATCFS_BENCH_SCHEDS:-}" ]; then
	want=" $LATCFS_BENCH_SCHEDS "
	kept=()
	for s in "${scheds[@]}"; do [[ "$want" != *" $s "* ]] || kept+=("$s"); done
	scheds=("${kept[@]}")
fi
progress "schedulers: ${scheds[*]}; $NCPU CPUs, kernel $(uname -r), $ROUNDS rounds, $SCHBENCH"
progress "schbench -m x -t: $SCHB"


record() { echo "$1" >> "$OUT/raw.jsonl"; }
now_ms() { date +%s%3N; }

SCHED=
attach() { # attach NAME: start scheduler NAME, record its time to attach
	local name=$1 t0 cmd
	case $name in
	eevdf) return 0 ;;
	latcfs) cmd=("$BIN") ;;
	latcfs-ln0) cmd=("$BIN" --latency-nice $CG/bench-fg=0) ;;
	latcfs-ln-20) cmd=("$BIN" --latency-nice $CG/bench-fg=-20) ;;
	latcfs-ln+19) cmd=("$BIN" --latency-nice $CG/bench-fg=19) ;;
	*) cmd=("${PEER[$name]}") ;;
	esac
	t0=$(now_ms)
	"${cmd[@]}" > "$OUT/sched.out" 2> "$OUT/sched.err" &
	SCHED=$!
	for _ in $(seq 1 600); do
		[ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && [ -n "$(cat /sys/kernel/sched_ext/root/ops 2>/dev/null)" ] && break
		kill -0 $SCHED 2>/dev/null || { progress "$name exited: $(tail -n2 "$OUT/sched.err")"; return 1; }
		sleep 0.1
	done
	[ "$(cat /sys/kernel/sched_ext/state)" = enabled ] || { progress "$name did not attach"; return 1; }
	record "{\"round\":$ROUND,\"sched\":\"$name\",\"bench\":\"load\",\"ms\":$(( $(now_ms) - t0 ))}"
}

bpf_costs() { # the struct_ops and tracing programs of the attached scheduler
	[ -n "$SCHED" ] || return 0
	local progs
	progs=$(bpf_prog_costs)
	record "{\"round\":$ROUND,\"sched\":\"$1\",\"bench\":\"bpf\",\"progs\":$progs}"
}

detach() {
	[ -n "$SCHED" ] || return 0
	kill -INT $SCHED
	wait $SCHED || progress "scheduler exited $? (ignored)"
	SCHED=
	for _ in $(seq 1 100); do
		[ "$(cat /sys/kernel/sched_ext/state)" = disabled ] && return 0
		sleep 0.1
	done
	progress "still $(cat /sys/kernel/sched_ext/state) after detach"
	return 1
}

in_fg() { scripts/in-cgroup $CG/bench-fg "$@"; }

BG=
bg_load() { # stress-ng at 50% of every CPU in the background cgroup
	scripts/in-cgroup $CG/bench-bg stress-ng --cpu "$NCPU" --cpu-load 50 --temp-path "$OUT" --quiet &
	BG=$!
	sleep 1
}
bg_stop() {
	[ -n "$BG" ] || return 0
	kill $BG 2>/dev/null || true
	wait $BG 2>/dev/null || true
	BG=
}
trap 'bg_stop; detach || true' EXIT

# An upstream scheduler that cannot attach to this kernel is left out, not
# fatal (scx_bpfland 1.1.4 fails to load on 7.3.4+deb13, for one).
ROUND=0
kept=()
for s in "${scheds[@]}"; do
	if [ -n "${PEER[$s]:-}" ]; then
		if ! attach "$s"; then
			progress "leaving $s out: it does not attach to this kernel"
			SCHED=
			continue
		fi
		detach
		sed -i '/"round":0,/d' "$OUT/raw.jsonl"
	fi
	kept+=("$s")
done
scheds=("${kept[@]}")

modes=("process-socket:" "thread-socket:-T" "process-pipe:-p" "thread-pipe:-p -T")
# Each round starts one scheduler further along, so that none always runs
# first after EEVDF (in a fixed order on 6.17, the scheduler right after
# EEVDF ran hackbench 17-61% slower on 7 of 8 rows than the same code one
# place later).
for ROUND in $(seq 1 "$ROUNDS"); do
	k=$(((ROUND - 1) % ${#scheds[@]}))
	for s in "${scheds[@]:k}" "${scheds[@]:0:k}"; do
		STEP="attach $s (round $ROUND)"
		attach "$s"
		for g in $NCPU $((2 * NCPU)); do
			for m in "${modes[@]}"; do
				name=${m%%:*} flags=${m#*:}
				STEP="hackbench $name -g $g under $s (round $ROUND)"
				# shellcheck disable=SC2086
				t=$(in_fg hackbench -g $g -l $LOOPS $flags | awk '/^Time:/ {print $2}')
				[ -n "$t" ]
				record "{\"round\":$ROUND,\"sched\":\"$s\",\"bench\":\"hackbench\",\"mode\":\"$name\",\"groups\":$g,\"loops\":$LOOPS,\"seconds\":$t}"
				progress "round $ROUND $s hackbench $name -g $g: ${t}s"
			done
		done
		bg_load
		for mt in $SCHB; do
			m=${mt%x*} t=${mt#*x}
			STEP="schbench -m $m -t $t under $s (round $ROUND)"
			f=$OUT/schbench/$s-m$m-t$t-r$ROUND.json
			in_fg "$SCHBENCH" -m "$m" -t "$t" -r $SECS -w 2 -i 0 -j "$f" > "$f.txt" 2>&1
			record "{\"round\":$ROUND,\"sched\":\"$s\",\"bench\":\"schbench\",\"m\":$m,\"t\":$t,\"file\":\"schbench/${f##*/}\"}"
			progress "round $ROUND $s schbench -m $m -t $t: $(grep -A3 'Wakeup' "$f.txt" | awk '/99.0th/ {v = $3} END {print "wakeup p99 " v " us"}')"
		done
		bg_stop
		STEP="BPF costs of $s (round $ROUND)"
		bpf_costs "$s"
		STEP="detach $s (round $ROUND)"
		detach
	done
done
progress "done: $(wc -l < "$OUT/raw.jsonl") measurements"
