# The shell library: sourced by scripts/*.sh and, through tests/vm/lib.sh,
# by the VM test suites, so that each helper below has one home.

# Can this machine run the scheduler itself (root, and a sched_ext kernel)?
host_has_sched_ext() {
	[ "$(id -u)" -eq 0 ] && [ -r /sys/kernel/sched_ext/state ]
}

# in_guest [VM-RUN-OPTIONS...] -- ARGS...: for a benchmark script. On a
# machine that cannot run the scheduler, build the release binaries here
# (never in the guest) and run the calling script again with ARGS inside a
# sched_ext guest (scripts/vm-run.sh VM-RUN-OPTIONS); it does not return
# then. Inside that guest, or on a sched_ext host as root, it returns.
in_guest() {
	local vm=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do vm+=("$1"); shift; done
	shift
	if [ "${LATCFS_IN_GUEST:-}" != 1 ] && ! host_has_sched_ext; then
		cargo build --locked --release >&2
		exec scripts/vm-run.sh "${vm[@]}" -- env LATCFS_IN_GUEST=1 "scripts/${0##*/}" "$@"
	fi
	[ -x target/release/scx_latcfs ] || cargo build --locked --release >&2
}

# latcfs_attached: scx_latcfs is the attached sched_ext scheduler.
latcfs_attached() {
	[ "$(cat /sys/kernel/sched_ext/state 2>/dev/null)" = enabled ] &&
		[[ "$(cat /sys/kernel/sched_ext/root/ops 2>/dev/null)" == latcfs* ]]
}

# wait_attached PID SECS: wait up to SECS for the scx_latcfs started as PID
# to attach; fails at once if PID exits first.
wait_attached() {
	local pid=$1 i
	for i in $(seq 1 $(($2 * 5))); do
		latcfs_attached && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.2
	done
	latcfs_attached
}

# For the benchmarks, run inside the guest or on a sched_ext host.
# bench_attach BIN STATS LOG [FLAGS...]: start scx_latcfs with FLAGS, its
# stdout in STATS and stderr in LOG, and wait until it is attached; its pid
# is in SCHED.
bench_attach() {
	local bin=$1 stats=$2 log=$3; shift 3
	"$bin" "$@" > "$stats" 2> "$log" &
	SCHED=$!
	wait_attached $SCHED 60 && return 0
	echo "bench: scx_latcfs $* did not attach: $(tail -n2 "$log")" >&2
	exit 1
}

# bench_detach: stop the scheduler bench_attach started; it must exit 0.
bench_detach() {
	[ -n "${SCHED:-}" ] || return 0
	kill -INT $SCHED
	wait $SCHED || { echo "bench: scx_latcfs exited $?" >&2; exit 1; }
	SCHED=
}

# stat_sum NAME FILE: counter NAME summed over the "latcfs: name=value ..."
# stats lines in FILE (the scheduler's --stats output).
stat_sum() {
	awk -v k="$1" '/^latcfs: / { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) s += kv[2] } }
		END { print s + 0 }' "$2"
}

# stat_last NAME FILE: the last value of NAME there: for a level (cg_active)
# rather than an event count.
stat_last() {
	awk -v k="$1" '/^latcfs: / { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) v = kv[2] } }
		END { print v + 0 }' "$2"
}

# median: the median of the numbers on stdin, one a line.
median() {
	sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# bpf_prog_costs: the attached programs that ran (struct_ops and tracing),
# as a JSON list of {"name", "ns", "cnt"}: run time and runs since
# kernel.bpf_stats_enabled was set.
bpf_prog_costs() {
	bpftool -j prog show 2>/dev/null | /usr/bin/python3 -c '
import json, sys
ps = [p for p in json.load(sys.stdin) if p.get("type") in ("struct_ops", "tracing") and p.get("run_cnt")]
print(json.dumps([{"name": p["name"], "ns": p["run_time_ns"], "cnt": p["run_cnt"]} for p in ps]))'
}

# cg_usage CGROUP: the CPU time its tasks have used, in µs (cpu.stat's
# usage_usec).
cg_usage() { awk '$1 == "usage_usec" { print $2 }' "$1/cpu.stat"; }
