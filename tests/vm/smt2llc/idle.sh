#!/usr/bin/env bash
# Idle CPU selection tests, for a guest with SMT siblings and two LLCs
# (scripts/test.sh boots it as qemu -smp 8,sockets=2,cores=2,threads=2):
# the prev/recent steps hit and are counted, each can be switched off,
# affinity masks hold while the scheduler picks CPUs, and tasks with a
# restricted cpumask scan their LLC first.
#
# LATCFS names the binary under test; latcfs-probe sits beside it.
set -u
cd "$(dirname "$0")/../../.."
. tests/vm/lib.sh

PROBE=$(dirname "$LATCFS")/latcfs-probe

# pingpong_under [FLAGS...]: a pipe ping-pong pair for 4 s under the
# scheduler started with FLAGS; leaves the stats in $WORK/sched.out.
pingpong_under() {
	start_sched --stats 1 "$@" || return 1
	"$PROBE" pingpong 4 > "$WORK/pp.out" || { fail "pingpong failed"; return 1; }
	sleep 1.5
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || { fail "exit $SCHED_RC"; return 1; }
	echo "  ${*:-default}: $(cat "$WORK/pp.out")"
	echo "    search=$(counter sis_search) target=$(counter sis_target) prev=$(counter sis_prev)" \
		"recent=$(counter sis_recent) recent_miss=$(counter sis_recent_miss) llc=$(counter sis_llc)" \
		"any=$(counter sis_any) fail=$(counter sis_fail)"
}

test_topology_seen() {
	expect_topology "$(nproc) CPUs, 2 LLCs, NUMA nodes: 1, SMT on"
}

test_prev_and_recent_hit() {
	pingpong_under || return 1
	local hits=$(( $(counter sis_prev) + $(counter sis_recent) ))
	[ "$hits" -gt 0 ] || { fail "no prev or recent hit in a ping-pong"; return 1; }
	[ "$(counter sis_search)" -gt 0 ] || { fail "no search counted"; return 1; }
	grep -qE 'recent_rate=([0-9.]+%|-) fast_rate=[0-9.]+%' "$WORK/sched.out" ||
		{ fail "no hit rates on the stats line"; return 1; }
	echo "    last line: $(grep -oE 'recent_rate=.*' "$WORK/sched.out" | tail -n1)"
}

test_no_recent_cpu() {
	pingpong_under --no-recent-cpu || return 1
	[ "$(counter sis_recent)" -eq 0 ] && [ "$(counter sis_recent_miss)" -eq 0 ] ||
		{ fail "recent counters moved with --no-recent-cpu"; return 1; }
	[ "$(counter sis_search)" -gt 0 ] || { fail "no search counted"; return 1; }
}

test_no_prev_cpu() {
	pingpong_under --no-prev-cpu || return 1
	[ "$(counter sis_prev)" -eq 0 ] || { fail "prev hits with --no-prev-cpu"; return 1; }
}

test_affinity_respected() {
	# A ping-pong pair pinned to CPUs 2 and 5 (one per LLC) and a waker
	# pinned to 1 and 6, beside hogs on half the CPUs: their CPU, sampled
	# often, never leaves the mask. (Light load: 8 vCPUs under TCG on 2
	# host cores are slow enough already.)
	start_sched || return 1
	hogs=()
	local i
	for i in 1 2 3 4; do sh -c 'while :; do :; done' & hogs+=($!); done
	taskset -c 2,5 "$PROBE" pingpong 8 > /dev/null & local pp=$!
	taskset -c 1,6 "$PROBE" wake 8 1000 > /dev/null & local w=$!
	local bad=0 samples=0 t stat
	while kill -0 $pp 2>/dev/null || kill -0 $w 2>/dev/null; do
		for t in /proc/$pp/task/* /proc/$w/task/*; do
			read -r stat < "$t/stat" 2>/dev/null || continue
			set -- $stat
			# before it execs the probe, taskset itself may run anywhere
			[ "$2" = "(latcfs-probe)" ] || continue
			samples=$((samples + 1))
			case "$t" in
			/proc/$pp/*) [ "${39}" = 2 ] || [ "${39}" = 5 ] || bad=$((bad + 1)) ;;
			*) [ "${39}" = 1 ] || [ "${39}" = 6 ] || bad=$((bad + 1)) ;;
			esac
		done
		sleep 0.02
	done
	kill "${hogs[@]}"; wait "${hogs[@]}" 2>/dev/null
	stop_sched INT
	echo "  $samples samples, $bad outside the mask"
	[ "$samples" -gt 20 ] || { fail "only $samples samples"; return 1; }
	[ "$bad" -eq 0 ] || { fail "$bad samples outside the affinity mask"; return 1; }
}

# llc_of CPU: the CPUs sharing CPU's last-level cache, from sysfs (the
# cache's id is per CPU on qemu's AMD model, its shared list is not).
llc_of() {
	local d=/sys/devices/system/cpu/cpu$1/cache idx
	for idx in 3 2; do
		[ -r "$d/index$idx/shared_cpu_list" ] && { cat "$d/index$idx/shared_cpu_list"; return; }
	done
	echo "?"
}

test_restricted_keep_llc() {
	# hackbench's pipes confined to CPUs 1-3 and 5-7, a restricted mask
	# that spans both LLCs (0-3 and 4-7). A wakeup whose target and prev
	# are busy scans the target's LLC within the mask before the rest of
	# the mask: sis_llc counts those placements, sis_any the ones that
	# had to leave the LLC. Without the intersection, restricted tasks
	# skipped the LLC scan and took any idle CPU of their mask, in
	# whichever LLC: sis_llc counted only other tasks' placements (19,
	# against sis_any 290), where this change gives 244 against 150.
	[ "$(llc_of 1)" != "$(llc_of 5)" ] && [ "$(llc_of 1)" = "$(llc_of 3)" ] ||
		{ fail "expected LLCs 0-3 and 4-7, got CPU 1: $(llc_of 1), 3: $(llc_of 3), 5: $(llc_of 5)"; return 1; }
	start_sched --stats 1 || return 1
	local i rc=0
	for i in 1 2 3; do
		taskset -c 1-3,5-7 hackbench -g 1 -l 300 -p > "$WORK/rh.out" 2>&1 || rc=$?
	done
	sleep 1.5
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || { fail "exit $SCHED_RC"; return 1; }
	[ $rc -eq 0 ] || { fail "hackbench failed: $(tail -n2 "$WORK/rh.out")"; return 1; }
	local llc any node
	llc=$(counter sis_llc) node=$(counter sis_node) any=$(counter sis_any)
	echo "  search=$(counter sis_search) target=$(counter sis_target) prev=$(counter sis_prev)" \
		"recent=$(counter sis_recent) llc=$llc node=$node any=$any fail=$(counter sis_fail)"
	[ "$llc" -ge 60 ] || { fail "only $llc placements in the target's LLC for restricted tasks"; return 1; }
	[ $((2 * llc)) -ge "$any" ] ||
		{ fail "restricted placements left the LLC $any times, more than twice the $llc that stayed in it"; return 1; }
}

test_workloads() {
	start_sched || return 1
	local m
	for m in "" "-T" "-p" "-p -T"; do
		hackbench -g 4 -l 200 $m > "$WORK/wl.out" 2>&1 ||
			{ fail "hackbench $m failed"; return 1; }
	done
	stress-ng --cpu 8 --timeout 5s --quiet --temp-path "$WORK" || { fail "stress-ng failed"; return 1; }
	is_attached || { fail "detached"; return 1; }
	local errs
	errs=$(sched_ext_errors)
	[ -z "$errs" ] || { fail "kernel log: $errs"; return 1; }
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || { fail "exit $SCHED_RC"; return 1; }
}

echo "kernel $(uname -r), $(nproc) CPUs ($(lscpu | grep -E '^(Socket|Core|Thread)' | tr -s ' ' | tr '\n' ' '))"
run_test "the loader sees 2 LLCs and SMT" test_topology_seen
run_test "ping-pong hits prev/recent, rates reported" test_prev_and_recent_hit
run_test "--no-recent-cpu leaves the recent counters at 0" test_no_recent_cpu
run_test "--no-prev-cpu leaves the prev counter at 0" test_no_prev_cpu
run_test "affinity masks hold during selection" test_affinity_respected
run_test "tasks with a restricted cpumask keep to their LLC" test_restricted_keep_llc
run_test "hackbench and stress-ng complete on SMT x 2 LLCs" test_workloads
finish
