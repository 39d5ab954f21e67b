#!/usr/bin/env bash
# Latency nice tests: rules by cgroup, pid and command name, the runtime
# subcommand, and the policy's promises: no extra CPU share, a bounded
# bypass of the fair queue, and no latency work at all while every latency
# nice is 0. (Lower wakeup latency at -20 is tested in wakeup.sh.)
#
# Run as root on a sched_ext kernel with cgroup v2 (scripts/test.sh boots one
# in a VM). LATCFS names the binary under test; latcfs-probe sits beside it.
set -u
cd "$(dirname "$0")/../.."
. tests/vm/lib.sh

PROBE=$(dirname "$LATCFS")/latcfs-probe
echo +cpu > $CG/cgroup.subtree_control
# fg and lat hold tasks; tree/leaf checks that a rule reaches descendants
# (a cgroup that passes the cpu controller down may hold no tasks itself).
mkdir -p $CG/fg $CG/lat $CG/tree
echo +cpu > $CG/tree/cgroup.subtree_control
mkdir -p $CG/tree/leaf

hogs() { # hogs N: start N unpinned CPU hogs; their pids in HOGS
	HOGS=()
	local i
	for i in $(seq 1 "$1"); do
		sh -c 'while :; do :; done' &
		HOGS+=($!)
	done
}

nice_of() { "$LATCFS" latency-nice get --pid "$1"; }

# expect_nice PID VALUE: the scheduler gives PID latency nice VALUE (waits
# up to 5 s: a task looks a changed rule up at its next run).
expect_nice() {
	local got
	wait_for 5 eval '[ "$(nice_of '"$1"')" = "'"$2"'" ]' && return 0
	got=$(nice_of "$1" 2>&1)
	fail "pid $1 ($(cat /proc/"$1"/comm 2>/dev/null)) has latency nice '$got', expected $2"
	return 1
}

one_line_error() { # one_line_error EXPECTED CMD...: fails with one line containing EXPECTED
	local want=$1 rc=0; shift
	"$@" > "$WORK/bad.out" 2> "$WORK/bad.err" || rc=$?
	[ $rc -ne 0 ] || { fail "$* exited 0"; return 1; }
	[ "$(wc -l < "$WORK/bad.err")" -eq 1 ] && grep -qF -- "$want" "$WORK/bad.err" ||
		{ fail "$* said '$(head -c 300 "$WORK/bad.err")', expected one line with '$want'"; return 1; }
	echo "  refused ($rc): $(cat "$WORK/bad.err")"
}

test_bad_input() {
	one_line_error "-21 is not in -20..=19" "$LATCFS" --latency-nice "$CG/fg=-21" &&
	one_line_error "no such cgroup" "$LATCFS" --latency-nice /sys/fs/cgroup/nonexistent=-5 &&
	one_line_error "no such process" "$LATCFS" --latency-nice pid:999999=-5 &&
	one_line_error "not a target" "$LATCFS" --latency-nice fg=-5 &&
	one_line_error "no running scx_latcfs instance" "$LATCFS" latency-nice set --pid 1 -5 &&
	one_line_error "no running scx_latcfs instance" "$LATCFS" latency-nice get --pid 1 &&
	is_detached || { fail "state $(state)"; return 1; }
	start_sched || return 1
	one_line_error "no such process" "$LATCFS" latency-nice set --pid 999999 -5 &&
	one_line_error "no such cgroup" "$LATCFS" latency-nice set --cgroup $CG/nonexistent -5 &&
	one_line_error "20 is not in -20..=19" "$LATCFS" latency-nice set --pid 1 20 &&
	one_line_error "no such process" "$LATCFS" latency-nice get --pid 999999 || return 1
	stop_sched INT
	[ ! -e /sys/fs/bpf/scx_latcfs ] || { fail "pins left behind in /sys/fs/bpf/scx_latcfs"; return 1; }
}

test_nice_zero_costs_nothing() {
	# A rule that sets latency nice 0 is the feature in use at its default:
	# no latency dispatch, preemption or bypass may happen.
	start_sched --stats 1 --latency-nice "$CG/fg=0" || return 1
	run_in $CG/fg hackbench -g 4 -l 200 -p > /dev/null; local hb=$!
	hogs 3
	"$PROBE" wake 3 2000 > /dev/null
	wait $hb; kill_hogs
	sleep 1.5
	stop_sched INT
	local k v sums=""
	for k in lat_dispatch lat_preempt lat_refused lat_guard; do
		v=$(counter $k); sums+="$k=$v "
		[ "$v" -eq 0 ] || { fail "latency nice 0 did latency work: $sums"; return 1; }
	done
	echo "  $sums(shared=$(counter shared))"
}

test_offset_buys_no_bandwidth() {
	# Equal-weight hogs on one CPU at latency nice -20 and +19: the offset
	# orders service, it must not change the share.
	start_sched --stats 1 || return 1
	taskset -c 1 sh -c 'while :; do :; done' & local a=$!
	taskset -c 1 sh -c 'while :; do :; done' & local b=$!
	"$LATCFS" latency-nice set --pid $a -20 > /dev/null &&
	"$LATCFS" latency-nice set --pid $b 19 > /dev/null || { kill $a $b; return 1; }
	expect_nice $a -20 && expect_nice $b 19 || { kill $a $b; return 1; }
	local a0 b0
	a0=$(cpu_ticks $a); b0=$(cpu_ticks $b)
	sleep 8
	local ta tb
	ta=$(( $(cpu_ticks $a) - a0 )); tb=$(( $(cpu_ticks $b) - b0 ))
	kill $a $b; wait $a $b 2>/dev/null
	sleep 1.5
	echo "  -20: $ta ticks, +19: $tb ticks; lat_dispatch=$(counter lat_dispatch)"
	stop_sched INT
	[ "$tb" -gt 0 ] && [ "$ta" -gt 0 ] || { fail "a hog got no CPU ($ta:$tb)"; return 1; }
	# 50/50 expected; accept 1:2 either way under TCG noise
	[ $((ta)) -le $((2 * tb)) ] && [ $((tb)) -le $((2 * ta)) ] ||
		{ fail "split $ta:$tb is not near 1:1"; return 1; }
	[ "$(counter lat_dispatch)" -gt 0 ] || { fail "the -20 hog never went through the latency queue"; return 1; }
}

test_starvation_guard() {
	# Six latency-sensitive spinners with a huge offset and one fair spinner
	# on one CPU: without the guard the fair one would wait ~6 x 100 ms at a
	# time; the 20 ms budget must keep its longest gap far below that.
	start_sched --stats 1 --latency-us 100000 --latency-budget-us 20000 \
		--latency-nice "$CG/lat=-20" || return 1
	local i pids=()
	for i in 1 2 3 4 5 6; do
		scripts/in-cgroup $CG/lat taskset -c 1 sh -c 'while :; do :; done' &
		pids+=($!)
	done
	sleep 1
	taskset -c 1 "$PROBE" spin 6 > "$WORK/spin.out"
	kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null
	sleep 1.5
	stop_sched INT
	local gap
	gap=$(grep -o 'max_gap_us=[0-9]*' "$WORK/spin.out" | cut -d= -f2)
	echo "  fair spinner: $(cat "$WORK/spin.out"); lat_guard=$(counter lat_guard) lat_dispatch=$(counter lat_dispatch)"
	[ "$(counter lat_guard)" -gt 0 ] || { fail "the starvation guard never fired"; return 1; }
	[ "${gap:-999999999}" -lt 300000 ] || { fail "the fair spinner waited ${gap} us at once"; return 1; }
}

test_cgroup_rule() {
	start_sched --latency-nice "$CG/fg=-20" --latency-nice "$CG/tree=-20" || return 1
	run_in $CG/fg sleep 60; local in=$!
	run_in $CG/tree/leaf sleep 60; local sub=$!
	sleep 60 & local out=$!
	sleep 0.5
	expect_nice $in -20 && expect_nice $sub -20 && expect_nice $out 0 || { kill $in $sub $out; return 1; }
	echo $out > $CG/fg/cgroup.procs
	expect_nice $out -20 || { kill $in $sub $out; return 1; }
	echo $out > $CG/cgroup.procs
	expect_nice $out 0 || { kill $in $sub $out; return 1; }
	echo "  started in fg: -20, in tree/leaf: -20, outside: 0, moved in: -20, moved out: 0"
	kill $in $sub $out; wait $in $sub $out 2>/dev/null
	stop_sched INT
}

test_runtime_changes() {
	start_sched --stats 1 --latency-nice comm:latcfs-probe=-7 || return 1
	# comm rule: a task that execs the program takes the value
	"$PROBE" wake 30 5000 > /dev/null & local probe=$!
	expect_nice $probe -7 || { kill $probe; return 1; }
	# pid rule at run time; a child forked afterwards inherits it
	bash -c 'sleep 3; sleep 60 & wait' & local sh=$!
	expect_nice $sh 0 || { kill $probe $sh; return 1; }
	"$LATCFS" latency-nice set --pid $sh -12 || { kill $probe $sh; return 1; }
	local child=
	wait_for 10 eval 'child=$(pgrep -P '"$sh"' -x sleep | head -n1); [ -n "$child" ] && [ "$(tr "\0" " " < /proc/$child/cmdline 2>/dev/null)" = "sleep 60 " ]'
	[ -n "$child" ] || { kill $probe $sh; fail "no child forked"; return 1; }
	expect_nice $sh -12 && expect_nice "$child" -12 || { kill $probe $sh $child; return 1; }
	# cgroup rule at run time, for a task already in the cgroup
	run_in $CG/fg bash -c 'while :; do sleep 0.2; done'; local fgt=$!
	expect_nice $fgt 0 || { kill $probe $sh $fgt; return 1; }
	"$LATCFS" latency-nice set --cgroup $CG/fg 5 || { kill $probe $sh $fgt; return 1; }
	expect_nice $fgt 5 || { kill $probe $sh $fgt; return 1; }
	# the effect shows in the stats: a -20 waker among hogs preempts
	local before
	sleep 1.2; before=$(counter lat_preempt)
	"$LATCFS" latency-nice set --pid $probe -20 > /dev/null
	hogs 4
	sleep 3
	kill_hogs
	sleep 1.2
	echo "  comm: -7, pid: -12, its child: -12, cgroup: 5; lat_preempt $before -> $(counter lat_preempt)"
	kill $probe $sh $child $fgt; wait $probe $sh $fgt 2>/dev/null
	stop_sched INT
	[ "$(counter lat_preempt)" -gt "$before" ] || { fail "setting -20 at run time changed nothing in the stats"; return 1; }
}

test_rules_survive_restart() {
	# Rules set at run time, the command line's, and a value inherited at
	# fork survive the restart CPU hotplug makes the kernel ask for.
	local cpu=/sys/devices/system/cpu/cpu1/online
	[ -w $cpu ] || { fail "cpu1 cannot be taken offline here"; return 1; }
	start_sched --latency-nice comm:latcfs-probe=-7 || return 1
	run_in $CG/fg bash -c 'while :; do sleep 0.2; done'; local fgt=$!
	bash -c 'sleep 3; sleep 120 & wait' & local sh=$!
	"$LATCFS" latency-nice set --cgroup $CG/fg -13 > /dev/null &&
		"$LATCFS" latency-nice set --pid $sh 9 > /dev/null || { kill $fgt $sh; return 1; }
	local child=
	wait_for 10 eval 'child=$(pgrep -P '"$sh"' -x sleep | head -n1); [ -n "$child" ] && [ "$(tr "\0" " " < /proc/$child/cmdline 2>/dev/null)" = "sleep 120 " ]'
	[ -n "$child" ] || { kill $fgt $sh; fail "no child forked"; return 1; }
	expect_nice $fgt -13 && expect_nice $sh 9 && expect_nice $child 9 || { kill $fgt $sh $child; return 1; }
	echo 0 > $cpu
	sleep 1
	wait_for 60 is_attached || { echo 1 > $cpu; kill $fgt $sh $child; fail "not attached again after cpu1 went offline"; return 1; }
	echo 1 > $cpu
	sleep 1
	wait_for 60 is_attached || { kill $fgt $sh $child; fail "not attached again after cpu1 came back"; return 1; }
	local restarts; restarts=$(grep -c 'asked for a restart' "$WORK/sched.err")
	"$PROBE" wake 5 5000 > /dev/null & local probe=$!
	expect_nice $fgt -13 && expect_nice $sh 9 && expect_nice $child 9 && expect_nice $probe -7 ||
		{ kill $fgt $sh $child $probe; return 1; }
	echo "  after $restarts restarts: cgroup rule -13, pid rule 9, inherited 9, comm rule -7 still apply;" \
		"$(grep 'asked for a restart' "$WORK/sched.err" | tail -n1)"
	kill $fgt $sh $child $probe; wait $fgt $sh $probe 2>/dev/null
	stop_sched INT
	[ "$restarts" -ge 1 ] || fail "no restart logged"
}

test_unset_and_list() {
	# list prints every rule as --latency-nice takes it; unset removes one,
	# and the task it applied to goes back to the next rule that applies.
	start_sched --latency-nice "$CG/fg=-4" || return 1
	run_in $CG/fg bash -c 'while :; do sleep 0.2; done'; local fgt=$!
	"$LATCFS" latency-nice set --pid $fgt -11 > /dev/null &&
		"$LATCFS" latency-nice set --comm nothing-runs-me 3 > /dev/null || { kill $fgt; return 1; }
	expect_nice $fgt -11 || { kill $fgt; return 1; }
	"$LATCFS" latency-nice list > "$WORK/list" || { kill $fgt; fail "list failed"; return 1; }
	sort "$WORK/list" > "$WORK/list.sorted"
	printf '%s\n' "$CG/fg=-4" "comm:nothing-runs-me=3" "pid:$fgt=-11" | sort > "$WORK/list.want"
	cmp -s "$WORK/list.sorted" "$WORK/list.want" ||
		{ kill $fgt; fail "list printed '$(tr '\n' ' ' < "$WORK/list")'"; return 1; }
	"$LATCFS" latency-nice unset --pid $fgt > /dev/null || { kill $fgt; fail "unset --pid failed"; return 1; }
	expect_nice $fgt -4 || { kill $fgt; return 1; }
	"$LATCFS" latency-nice unset --cgroup $CG/fg > /dev/null || { kill $fgt; fail "unset --cgroup failed"; return 1; }
	expect_nice $fgt 0 || { kill $fgt; return 1; }
	one_line_error "there is no such rule" "$LATCFS" latency-nice unset --cgroup $CG/fg ||
		{ kill $fgt; return 1; }
	"$LATCFS" latency-nice list > "$WORK/list" || { kill $fgt; return 1; }
	echo "  listed: $(tr '\n' ' ' < "$WORK/list.sorted"); after unset --pid: -4, --cgroup: 0; left: $(tr '\n' ' ' < "$WORK/list")"
	kill $fgt; wait $fgt 2>/dev/null
	stop_sched INT
	[ "$(cat "$WORK/list")" = "comm:nothing-runs-me=3" ] || fail "rules left: $(cat "$WORK/list")"
}

test_rule_targets() {
	# A thread id and a cgroup without the cpu controller would never
	# match: both are refused. A pid rule goes with its process, so a
	# process that reuses the pid does not inherit it.
	mkdir -p $CG/tree/leaf/nocpu
	start_sched || return 1
	"$PROBE" handoff 30 100 > /dev/null & local probe=$!
	local tid=
	wait_for 5 eval 'tid=$(ls /proc/'"$probe"'/task | grep -vx '"$probe"' | head -n1); [ -n "$tid" ]'
	[ -n "$tid" ] || { kill $probe; fail "the probe has no second thread"; return 1; }
	one_line_error "is a thread of process $probe" "$LATCFS" latency-nice set --pid $tid -5 &&
		one_line_error "does not have the cpu controller" "$LATCFS" latency-nice set --cgroup $CG/tree/leaf/nocpu -5 ||
		{ kill $probe; rmdir $CG/tree/leaf/nocpu; return 1; }
	kill $probe; wait $probe 2>/dev/null
	rmdir $CG/tree/leaf/nocpu
	sh -c 'sleep 1' & local gone=$!
	"$LATCFS" latency-nice set --pid $gone -9 > /dev/null || return 1
	wait $gone
	wait_for 5 eval '! "$LATCFS" latency-nice list | grep -q "^pid:'"$gone"'="'
	local left; left=$("$LATCFS" latency-nice list | grep -c "^pid:$gone=")
	stop_sched INT
	echo "  a thread id and a cgroup without cpu refused; pid rule of an exited process: $left left"
	[ "$left" -eq 0 ] || fail "the pid rule of exited process $gone is still listed"
}

test_concurrent_start() {
	# Two instances started at once: one attaches, the other exits with one
	# clear error, and the winner's pins (which latency-nice uses) stay.
	local a b i
	for i in 1 2 3; do
		"$LATCFS" > "$WORK/a.out" 2> "$WORK/a.err" & a=$!
		"$LATCFS" > "$WORK/b.out" 2> "$WORK/b.err" & b=$!
		wait_for 60 is_attached || { kill $a $b; fail "neither attached"; return 1; }
		sleep 2
		local alive=() loser=
		kill -0 $a 2>/dev/null && alive+=($a) || loser=a
		kill -0 $b 2>/dev/null && alive+=($b) || loser=b
		[ ${#alive[@]} -eq 1 ] || { kill $a $b; fail "round $i: ${#alive[@]} instances running"; return 1; }
		local rc=0
		if [ $loser = a ]; then wait $a || rc=$?; else wait $b || rc=$?; fi
		[ $rc -ne 0 ] || { kill "${alive[@]}"; fail "round $i: the loser exited 0"; return 1; }
		grep -q "another sched_ext scheduler is already attached" "$WORK/$loser.err" ||
			{ kill "${alive[@]}"; fail "round $i: the loser said '$(head -c 300 "$WORK/$loser.err")'"; return 1; }
		"$LATCFS" latency-nice list > /dev/null ||
			{ kill "${alive[@]}"; fail "round $i: the winner's pins are gone after the loser exited"; return 1; }
		kill -INT "${alive[0]}"; wait "${alive[0]}"
		wait_for 10 is_detached || { fail "round $i: still attached after SIGINT"; return 1; }
	done
	echo "  3 rounds: one instance attached each time, the other exited non-zero: '$(grep "already attached" "$WORK/a.err" "$WORK/b.err" | tail -n1)'"
	[ ! -e /sys/fs/bpf/scx_latcfs ] || fail "pins left behind"
}

echo "kernel $(uname -r), $(nproc) CPUs, binary $LATCFS"
run_test "bad latency nice input is refused" test_bad_input
run_test "latency nice 0 does no latency work" test_nice_zero_costs_nothing
run_test "-20 vs +19 hogs split the CPU evenly" test_offset_buys_no_bandwidth
run_test "the starvation guard bounds the fair wait" test_starvation_guard
run_test "cgroup rules apply to started and moved tasks" test_cgroup_rule
run_test "comm, pid and cgroup rules change at run time" test_runtime_changes
run_test "rules set at run time survive a restart" test_rules_survive_restart
run_test "latency-nice list and unset" test_unset_and_list
run_test "thread ids and cgroups without cpu are refused; pid rules die with their process" test_rule_targets
run_test "of two instances started at once, one attaches and keeps its pins" test_concurrent_start
finish
