#!/usr/bin/env bash
# Reliability tests: overload with mixed latency nice, a thread storm,
# attach/detach cycles under load, SIGKILL of the loader, a BPF-side error,
# cpuset affinity. (The 10,000-task fork storm is in cgroup.sh, hotplug in
# foundation.sh and cpu4/hotplug.sh.)
#
# Run as root on a sched_ext kernel with cgroup v2 (scripts/test.sh boots one
# in a VM, 2 CPUs).
set -u
cd "$(dirname "$0")/../.."
. tests/vm/lib.sh

echo +cpu +cpuset > $CG/cgroup.subtree_control
PINS=/sys/fs/bpf/scx_latcfs

no_errors() {
	local errs
	errs=$(sched_ext_errors)
	[ -z "$errs" ] || fail "sched_ext error: $errs"
}

test_overload() {
	# 3 hogs per CPU at latency nice -20, 0 and +19, forks and a pipe
	# ping-pong, for 30 s (a stall shows within 2 s): still attached, no
	# stall, every hog ran.
	mkdir -p $CG/ln_lo $CG/ln_hi || return 1
	start_sched --latency-nice $CG/ln_lo=-20 --latency-nice $CG/ln_hi=19 || return 1
	local hogs=() cg i
	for cg in $CG/ln_lo $CG $CG/ln_hi; do
		for i in 1 2; do
			run_in $cg sh -c 'while :; do :; done'
			hogs+=($!)
		done
	done
	stress-ng --temp-path "$WORK" --fork 2 --pipe 1 --timeout 30 > "$WORK/stress.out" 2>&1 &
	local st=$!
	sleep 30
	wait $st
	local strc=$? ticks=() t
	for i in "${hogs[@]}"; do ticks+=($(cpu_ticks $i)); done
	kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
	local attached=0
	is_attached && attached=1
	stop_sched INT
	rmdir $CG/ln_lo $CG/ln_hi
	echo "  hog CPU ticks (-20 -20 0 0 +19 +19): ${ticks[*]}; stress-ng rc $strc"
	[ $attached -eq 1 ] && [ "$SCHED_RC" -eq 0 ] || { fail "attached=$attached rc=$SCHED_RC: $(tail -n2 "$WORK/sched.err")"; return 1; }
	[ $strc -eq 0 ] || { fail "stress-ng rc $strc: $(tail -n2 "$WORK/stress.out")"; return 1; }
	for t in "${ticks[@]}"; do
		[ "$t" -gt 25 ] || { fail "a hog ran only $t ticks in 30s"; return 1; }
	done
	no_errors
}

test_thread_storm() {
	# Thousands of threads created and joined, while a process storm runs.
	start_sched || return 1
	stress-ng --temp-path "$WORK" --pthread 2 --pthread-max 64 --pthread-ops 2000 --timeout 60 > "$WORK/st.out" 2>&1 &
	local a=$!
	stress-ng --temp-path "$WORK" --clone 2 --clone-ops 2000 --timeout 60 > "$WORK/cl.out" 2>&1
	local rc2=$?
	wait $a
	local rc1=$?
	stop_sched INT
	echo "  stress-ng --pthread (2 x 2000 ops, up to 64 threads each) rc $rc1, --clone (2 x 2000) rc $rc2"
	[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$SCHED_RC" -eq 0 ] && no_errors ||
		fail "pthread rc $rc1, clone rc $rc2, loader rc $SCHED_RC"
}

test_attach_cycles() {
	# 5 attach/detach cycles with a hog and a pipe ping-pong running
	# throughout (loading verifies the BPF program: about 11 s a cycle
	# under TCG, so more cycles would mostly cost CI time).
	stress-ng --temp-path "$WORK" --cpu 1 --pipe 1 > /dev/null 2>&1 &
	local load=$! i t0=$SECONDS
	for i in $(seq 1 5); do
		start_sched || { kill $load; return 1; }
		sleep 0.5
		stop_sched INT
		if [ "$SCHED_RC" -ne 0 ] || ! is_detached; then
			kill $load
			fail "cycle $i: rc $SCHED_RC, state $(state)"
			return 1
		fi
	done
	kill $load; wait $load 2>/dev/null
	echo "  5 cycles in $((SECONDS - t0))s: each attached, exit 0, state disabled"
	[ ! -e $PINS ] || { fail "pins left in $PINS"; return 1; }
	no_errors
}

test_sigkill() {
	# Killed outright, the loader cannot clean up: the kernel must still
	# fall back to the fair class, and a new instance must attach.
	start_sched || return 1
	kill -KILL $SCHED_PID
	wait $SCHED_PID 2>/dev/null
	SCHED_PID=
	wait_for 30 is_detached || { fail "still $(state) after SIGKILL"; return 1; }
	start_sched || return 1
	"$LATCFS" latency-nice get --pid $$ > /dev/null || { fail "the new instance's pins do not work"; return 1; }
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] && is_detached && [ ! -e $PINS ] ||
		fail "second instance: rc $SCHED_RC, state $(state), pins $(ls $PINS 2>/dev/null)"
}

test_bpf_error() {
	# A BPF-side error: the loader reports the kernel's reason and its exit
	# dump and exits non-zero, and nothing stays attached or pinned.
	# a hog, so that the dump has a queued or running task to show
	sh -c 'while :; do :; done' &
	local hog=$!
	"$LATCFS" --test-error-after-ms 2000 > "$WORK/e.out" 2> "$WORK/e.err"
	local rc=$?
	kill $hog; wait $hog 2>/dev/null
	echo "  rc $rc: $(grep -m1 -i 'test error' "$WORK/e.err" "$WORK/e.out")"
	[ $rc -ne 0 ] || { fail "exit 0 after a BPF error"; return 1; }
	grep -q "test error, requested by --test-error-after-ms" "$WORK/e.err" "$WORK/e.out" ||
		{ fail "reason not printed: $(tail -n3 "$WORK/e.err")"; return 1; }
	# the kernel's exit dump, with what ops.dump/dump_cpu/dump_task add
	local l
	for l in 'latcfs: nr_lat_tasks [0-9]+ ' 'latcfs: llc 0 vtime_ref -?[0-9]+us' \
		'latcfs: llc 0 shared dsq: [0-9]+ queued' \
		'latcfs: cpu [0-9]+ ' 'latcfs: vtime -?[0-9]+us waited'; do
		grep -qE "$l" "$WORK/e.err" || { fail "the exit dump lacks /$l/: $(grep -c latcfs: "$WORK/e.err") latcfs lines"; return 1; }
	done
	echo "  exit dump: $(grep -c 'latcfs: ' "$WORK/e.err") lines from latcfs, e.g. $(grep -m1 'latcfs: llc 0 shared dsq' "$WORK/e.err")"
	is_detached && [ ! -e $PINS ] || fail "state $(state), pins $(ls $PINS 2>/dev/null)"
	# the error is the point of this test, not a failure of the next one
	DMESG_START=$(dmesg | wc -l)
}

test_cpuset() {
	# Hogs in a cpuset of CPU 1 never run on CPU 0.
	mkdir -p $CG/pin1 && echo 1 > $CG/pin1/cpuset.cpus || return 1
	start_sched || return 1
	local hogs=() i n=0 bad=0 p
	for i in 1 2 3; do
		run_in $CG/pin1 sh -c 'while :; do :; done'
		hogs+=($!)
	done
	sh -c 'while :; do :; done' & local free=$!
	for i in $(seq 1 40); do
		for p in "${hogs[@]}"; do
			n=$((n + 1))
			[ "$(awk '{print $39}' /proc/$p/stat)" = 1 ] || bad=$((bad + 1))
		done
		sleep 0.1
	done
	kill "${hogs[@]}" $free; wait "${hogs[@]}" $free 2>/dev/null
	stop_sched INT
	rmdir $CG/pin1
	echo "  $n samples of 3 hogs in cpuset 1: $bad on another CPU"
	[ $bad -eq 0 ] && no_errors || fail "$bad of $n samples outside the cpuset"
}

test_systemd_unit() {
	# The unit's command line with flags from its environment file (no
	# systemd in the guest: the shell does what systemd does with them).
	local cmd
	cmd=$(sed -n 's/^ExecStart=//p' dist/scx_latcfs.service)
	[ "$cmd" = '/usr/local/bin/scx_latcfs $LATCFS_FLAGS' ] || { fail "ExecStart is '$cmd'"; return 1; }
	local LATCFS_FLAGS
	. dist/scx_latcfs.default
	LATCFS_FLAGS="$LATCFS_FLAGS --slice-us 5000 --stats 0.5"
	# shellcheck disable=SC2086 # systemd splits $VAR on whitespace too
	start_sched $LATCFS_FLAGS || return 1
	wait_for 10 grep -q '^latcfs: ' "$WORK/sched.out" || { fail "no stats line"; return 1; }
	stop_sched TERM
	[ "$SCHED_RC" -eq 0 ] && is_detached || fail "systemd's SIGTERM: rc $SCHED_RC, state $(state)"
}

run_test "30 s of overload with mixed latency nice" test_overload
run_test "a thread and clone storm completes" test_thread_storm
run_test "5 attach/detach cycles under load" test_attach_cycles
run_test "after SIGKILL the kernel falls back, a new instance attaches" test_sigkill
run_test "a BPF-side error is reported, nothing stays attached" test_bpf_error
run_test "cpuset affinity holds" test_cpuset
run_test "the systemd unit's command line runs" test_systemd_unit
finish
