#!/usr/bin/env bash
# Idle selection's NUMA step, in the 4-vCPU guest of scripts/test.sh: two
# nodes (CPUs 0-1 and 2-3), each of two LLCs of one CPU (four qemu
# sockets, an L3 each). A waking task whose target CPU is busy finds its LLC busy too,
# and must look in the rest of its node before the other node.
#
# LATCFS names the binary under test.
set -u
cd "$(dirname "$0")/../../.."
. tests/vm/lib.sh

# node_of CPU: the NUMA node sysfs links CPU to.
node_of() {
	local n
	for n in /sys/devices/system/cpu/cpu$1/node*; do echo "${n##*node}"; return; done
	echo 0
}

test_topology_seen() {
	[ "$(node_of 0)" = "$(node_of 1)" ] && [ "$(node_of 0)" != "$(node_of 2)" ] ||
		{ fail "expected nodes {0,1} and {2,3}, got $(node_of 0) $(node_of 1) $(node_of 2) $(node_of 3)"; return 1; }
	expect_topology "4 CPUs, 4 LLCs, NUMA nodes: 2, SMT off"
}

test_node_before_machine() {
	# hackbench's pipes on all 4 CPUs: a wakeup whose target is busy has
	# nothing more in its LLC and scans its node (sis_node) before the
	# machine (sis_any). The sibling is tried first, so the node step
	# finds a CPU about as often as the machine-wide scan or more (measured
	# 193 / 55 and 165 / 87); without the step, sis_node stays 0.
	start_sched --stats 1 || return 1
	local i rc=0
	for i in 1 2 3; do
		hackbench -g 1 -l 300 -p > "$WORK/nh.out" 2>&1 || rc=$?
	done
	sleep 1.5
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || { fail "exit $SCHED_RC"; return 1; }
	[ $rc -eq 0 ] || { fail "hackbench failed: $(tail -n2 "$WORK/nh.out")"; return 1; }
	local node any
	node=$(counter sis_node) any=$(counter sis_any)
	echo "  search=$(counter sis_search) target=$(counter sis_target) prev=$(counter sis_prev)" \
		"recent=$(counter sis_recent) llc=$(counter sis_llc) node=$node any=$any fail=$(counter sis_fail)"
	[ "$node" -ge 20 ] || { fail "only $node placements in the target's node"; return 1; }
	[ $((2 * node)) -ge "$any" ] ||
		{ fail "placements left the node $any times, more than twice the $node that stayed in it"; return 1; }
}

run_test "the loader sees 4 LLCs in 2 NUMA nodes" test_topology_seen
run_test "a wakeup looks in its node before the machine" test_node_before_machine
finish
