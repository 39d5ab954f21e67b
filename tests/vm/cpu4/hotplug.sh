#!/usr/bin/env bash
# CPU hotplug on a 4-vCPU guest (scripts/test.sh boots one): CPUs go offline
# and come back, one at a time and two together, while hackbench runs. The
# kernel asks a scheduler without hotplug callbacks to restart; the loader
# restarts each time and is attached at the end, with the topology it then
# sees, and every workload completes.
set -u
cd "$(dirname "$0")/../../.."
. tests/vm/lib.sh

# online CPU 0|1: the write, bounded. A hotplug that blocks for good would
# otherwise hold the whole boot until vm-run.sh kills it, with no word of
# where: after 120 s, log the blocked tasks (sysrq-w) and fail.
online() {
	local w i
	( echo "$2" > /sys/devices/system/cpu/cpu$1/online ) &
	w=$!
	for i in $(seq 1200); do
		kill -0 $w 2>/dev/null || { wait $w; return; }
		sleep 0.1
	done
	echo w > /proc/sysrq-trigger
	dmesg | tail -n 80 | sed 's/^/  dmesg: /'
	fail "cpu$1 online=$2 still blocked after 120 s (state $(state))"
	return 1
}

test_topology() {
	[ "$(nproc)" -eq 4 ] || fail "this suite needs 4 CPUs, the guest has $(nproc)"
}

test_hotplug_under_load() {
	start_sched --stats 1 || return 1
	local pid=$SCHED_PID step
	( while :; do hackbench -g 2 -l 100 > /dev/null 2>&1 || exit 1; done ) &
	local load=$!
	for step in "3 0" "3 1" "1 0" "2 0" "1 1" "2 1"; do
		online $step || { kill $load; fail "cpu${step% *} online=${step#* } refused"; return 1; }
		sleep 2
		wait_for 60 is_attached || { kill $load; fail "not attached after cpu${step% *} online=${step#* } (state $(state))"; return 1; }
	done
	sleep 2
	kill -0 $load 2>/dev/null || { fail "hackbench failed during hotplug"; return 1; }
	kill $load; wait $load 2>/dev/null
	kill -0 $pid 2>/dev/null || { fail "the loader exited instead of restarting"; return 1; }
	local restarts
	restarts=$(grep -c 'asked for a restart' "$WORK/sched.err")
	stop_sched INT
	echo "  6 hotplug steps, 4 CPUs online again: $restarts restarts, exit $SCHED_RC"
	[ "$restarts" -ge 1 ] && [ "$SCHED_RC" -eq 0 ] && is_detached ||
		fail "restarts $restarts, rc $SCHED_RC, state $(state)"
}

test_start_with_cpu_offline() {
	# Started while a CPU is offline, it sees 3 CPUs; bringing it back
	# restarts it onto all 4.
	online 2 0 || return 1
	start_sched || { online 2 1; return 1; }
	hackbench -g 2 -l 100 > /dev/null 2>&1 || { online 2 1; fail "hackbench failed on 3 CPUs"; return 1; }
	online 2 1
	sleep 2
	wait_for 60 is_attached || { fail "not attached after cpu2 came back"; return 1; }
	hackbench -g 2 -l 100 > /dev/null 2>&1 || { fail "hackbench failed on 4 CPUs"; return 1; }
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || fail "rc $SCHED_RC"
}

run_test "the guest has 4 CPUs" test_topology
run_test "CPUs go offline and online under load" test_hotplug_under_load
run_test "started with a CPU offline, it takes it back" test_start_with_cpu_offline
finish
