# Shared helpers for the in-guest test suites: a tiny test runner and the
# start/stop of the scheduler under test. Sourced, not run.
#
# Each test is a shell function; `run_test NAME FUNC` runs it, prints
# "ok - NAME" or "not ok - NAME: why", and `finish` prints the closing
# "N passed, N failed" line and returns non-zero if anything failed.
#
# What the benchmark scripts need too (running in a cgroup, reading the
# stats lines, waiting for the attach) is in scripts/lib.sh, sourced here.

. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

LATCFS=${LATCFS:-target/debug/scx_latcfs}
SYSFS=/sys/kernel/sched_ext
WORK=$(mktemp -d /tmp/latcfs-test.XXXXXX)
PASSED=0
FAILED=0
FAILED_NAMES=()
SCHED_PID=
# Kernel log lines before this suite started: later checks look past them.
DMESG_START=$(dmesg | wc -l)

fail() { echo "$*" > "$WORK/why"; return 1; }

# LATCFS_TESTS=REGEX (for development) runs only the tests whose name
# matches it; the others are left out of the counts.
run_test() {
	local name=$1 fn=$2 t0=$SECONDS
	if [ -n "${LATCFS_TESTS:-}" ]; then
		local rc=0
		[[ "$name" =~ $LATCFS_TESTS ]] || rc=$?
		[ $rc -ne 2 ] || { echo "not ok - LATCFS_TESTS='$LATCFS_TESTS' is not a regular expression"; FAILED=$((FAILED + 1)); FAILED_NAMES+=("$name"); return 0; }
		[ $rc -eq 0 ] || return 0
	fi
	rm -f "$WORK/why"
	echo "--- $name"
	if "$fn"; then
		echo "ok - $name ($((SECONDS - t0))s)"
		PASSED=$((PASSED + 1))
	else
		echo "not ok - $name: $(cat "$WORK/why" 2>/dev/null || echo 'failed')"
		FAILED=$((FAILED + 1))
		FAILED_NAMES+=("$name")
		# A failed test must not leave its scheduler behind for the next.
		[ -z "$SCHED_PID" ] || stop_sched TERM >/dev/null 2>&1
	fi
	return 0
}

finish() {
	# (all.sh fails a run in which no suite passed a test)
	[ -z "${LATCFS_TESTS:-}" ] || [ $((PASSED + FAILED)) -gt 0 ] ||
		echo "LATCFS_TESTS='$LATCFS_TESTS' matches no test here"
	[ $FAILED -eq 0 ] || printf 'failed: %s\n' "${FAILED_NAMES[*]}"
	echo "vm-tests: $PASSED passed, $FAILED failed"
	[ $FAILED -eq 0 ]
}

state() { cat "$SYSFS/state" 2>/dev/null; }
ops() { cat "$SYSFS/root/ops" 2>/dev/null; }

# wait_for SECS CMD...: poll CMD every 0.2s until it succeeds or SECS pass.
wait_for() {
	local deadline=$((SECONDS + $1)); shift
	until "$@"; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 0.2
	done
}

is_attached() { latcfs_attached; }
is_detached() { [ "$(state)" = disabled ]; }

# start_sched [FLAGS...]: start the scheduler in the background, its stdout
# in $WORK/sched.out and stderr in $WORK/sched.err, and wait until the
# kernel reports it attached.
start_sched() {
	"$LATCFS" "$@" > "$WORK/sched.out" 2> "$WORK/sched.err" &
	SCHED_PID=$!
	if ! wait_attached "$SCHED_PID" 60; then
		fail "did not attach within 60s (state $(state)): $(tail -n3 "$WORK/sched.err" | tr '\n' ' ')"
		return 1
	fi
	# The loader opens its stats socket right after the attach succeeds
	# (bound, it is in /proc/net/unix; a stale socket file is not).
	wait_for 10 grep -q ' /var/run/scx/root/stats$' /proc/net/unix ||
		{ fail "attached, but nothing listens on the stats socket after 10s"; return 1; }
}

# stop_sched SIG: send SIG, wait for the loader; SCHED_RC holds its status.
stop_sched() {
	kill -"$1" "$SCHED_PID" 2>/dev/null
	wait "$SCHED_PID"
	SCHED_RC=$?
	SCHED_PID=
	# Whatever the kernel logs from here on is the next scheduler's.
	DMESG_START=$(dmesg | wc -l)
}

# counter NAME: one scheduler counter summed over every stats line the
# scheduler under test has printed so far (start it with --stats).
counter() { stat_sum "$1" "$WORK/sched.out"; }

CG=/sys/fs/cgroup

# expect_topology LINE: started and stopped, the loader logged "topology: LINE".
expect_topology() {
	start_sched || return 1
	stop_sched INT
	grep -E 'topology:' "$WORK/sched.err" | sed 's/^/  /'
	grep -q "topology: $1" "$WORK/sched.err" ||
		{ fail "loader saw '$(grep topology: "$WORK/sched.err")'"; return 1; }
}

# run_in CGROUP CMD...: run CMD in the background inside CGROUP; $! is it.
run_in() {
	local cg=$1; shift
	scripts/in-cgroup "$cg" "$@" &
	sleep 0.2
	local want=${cg#$CG}
	[ "$(cat /proc/$!/cgroup 2>/dev/null)" = "0::${want:-/}" ] ||
		echo "warning: pid $! is in $(cat /proc/$!/cgroup 2>/dev/null), not ${cg#$CG}" >&2
}

# gauge NAME: the latest value of a level (not an event count) on the
# scheduler's stats lines.
gauge() { stat_last "$1" "$WORK/sched.out"; }

# cpu_ticks PID...: the CPU time (utime+stime, in clock ticks) they have
# used, summed (one awk for all).
cpu_ticks() {
	local pid files=()
	[ $# -gt 0 ] || { echo 0; return; }
	for pid in "$@"; do files+=("/proc/$pid/stat"); done
	awk '{ s += $14 + $15 } END { print s + 0 }' "${files[@]}"
}

# The hogs a test started (their pids), for kill_hogs.
HOGS=()
# kill_hogs: stop and reap them.
kill_hogs() {
	[ ${#HOGS[@]} -eq 0 ] || { kill "${HOGS[@]}" 2>/dev/null; wait "${HOGS[@]}" 2>/dev/null; }
	HOGS=()
}

# The kernel log lines, since the last scheduler stopped (or the suite
# started), that mean the BPF scheduler failed.
sched_ext_errors() {
	dmesg | tail -n +$((DMESG_START + 1)) | grep -iE 'sched_ext.*(error|stall|watchdog|fail)' || true
}
