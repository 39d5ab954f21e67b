# Sourced by the scripts: can this machine run the scheduler itself?
host_has_sched_ext() {
	[ "$(id -u)" -eq 0 ] && [ -r /sys/kernel/sched_ext/state ]
}

# For the benchmarks, run inside the guest or on a sched_ext host.
# bench_attach BIN STATS LOG [FLAGS...]: start scx_latcfs with FLAGS, its
# stdout in STATS and stderr in LOG, and wait until it is attached; its pid
# is in SCHED.
bench_attach() {
	local bin=$1 stats=$2 log=$3; shift 3
	"$bin" "$@" > "$stats" 2> "$log" &
	SCHED=$!
	for _ in $(seq 1 300); do
		[[ "$(cat /sys/kernel/sched_ext/root/ops 2>/dev/null)" == latcfs* ]] && return 0
		kill -0 $SCHED 2>/dev/null || break
		sleep 0.2
	done
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
