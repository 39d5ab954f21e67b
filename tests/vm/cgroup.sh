#!/usr/bin/env bash
# cgroup weight tests: cpu.weight shares between siblings and through a
# nested hierarchy, run-time weight changes, cgroup churn, the fork storm of
# the move-elision seed (LATCFS_STORM tasks, default 10000) and the root fast
# path.
#
# Run as root on a sched_ext kernel with cgroup v2 (scripts/test.sh boots one
# in a VM, 2 CPUs). Shares are measured with each cgroup's cpu.stat
# usage_usec, with bounds wide enough for TCG's noise.
set -u
cd "$(dirname "$0")/../.."
. tests/vm/lib.sh

echo +cpu > $CG/cgroup.subtree_control
HOGS=()

# hogs_in CGROUP N: start N CPU hogs in CGROUP, adding their pids to HOGS.
hogs_in() {
	local i
	for i in $(seq 1 "$2"); do
		run_in "$1" sh -c 'while :; do :; done'
		HOGS+=($!)
	done
}
kill_hogs() { kill "${HOGS[@]}" 2>/dev/null; wait "${HOGS[@]}" 2>/dev/null; HOGS=(); }

usage() { awk '$1 == "usage_usec" { print $2 }' "$1/cpu.stat"; }

# measure SECS CGROUP...: sleep SECS and set USED[i] to the CPU time (usec)
# each CGROUP used meanwhile.
measure() {
	local secs=$1 i; shift
	local before=()
	for i in "$@"; do before+=("$(usage "$i")"); done
	sleep "$secs"
	USED=()
	i=0
	for cg in "$@"; do
		USED+=($(( $(usage "$cg") - before[i] )))
		i=$((i + 1))
	done
}

# ratio A B: A/B with two decimals
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b ? a / b : 0 }'; }
# within X LO HI: LO <= X <= HI
within() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x >= lo && x <= hi) }'; }

new_cg() { # new_cg PATH WEIGHT
	mkdir -p "$1" && echo "$2" > "$1/cpu.weight"
}
rm_cg() { rmdir "$@" 2>/dev/null; true; }

no_errors() {
	local errs
	errs=$(sched_ext_errors)
	[ -z "$errs" ] || fail "sched_ext error: $errs"
}

test_siblings() {
	# cpu.weight 100 against 300, two hogs each: 1:3, also with the light
	# cgroup at latency nice -20 (order from latency nice, share from weight).
	new_cg $CG/w100 100 && new_cg $CG/w300 300 || return 1
	start_sched --stats 1 --latency-nice $CG/w100=-20 || return 1
	hogs_in $CG/w100 2
	hogs_in $CG/w300 2
	sleep 1
	measure 8 $CG/w100 $CG/w300
	kill_hogs
	local r; r=$(ratio "${USED[1]}" "${USED[0]}")
	stop_sched INT
	echo "  usage w100=${USED[0]} w300=${USED[1]} usec: w300/w100 = $r (ideal 3);" \
		"cg_recompute=$(counter cg_recompute) lat_dispatch=$(counter lat_dispatch)"
	rm_cg $CG/w100 $CG/w300
	within "$r" 2.0 4.5 || fail "w300/w100 = $r, want about 3"
}

test_nested() {
	# root -> A(100){B(100), C(100)}, D(200): B = C = 1/6, D = 2/3.
	new_cg $CG/A 100 && echo +cpu > $CG/A/cgroup.subtree_control &&
		new_cg $CG/A/B 100 && new_cg $CG/A/C 100 && new_cg $CG/D 200 || return 1
	start_sched --stats 1 || return 1
	hogs_in $CG/A/B 2
	hogs_in $CG/A/C 2
	hogs_in $CG/D 2
	sleep 1
	measure 10 $CG/A/B $CG/A/C $CG/D
	local active; active=$(gauge cg_active)
	kill_hogs
	stop_sched INT
	local total=$((USED[0] + USED[1] + USED[2]))
	local b c d
	b=$(ratio "${USED[0]}" $total) c=$(ratio "${USED[1]}" $total) d=$(ratio "${USED[2]}" $total)
	echo "  shares B=$b C=$c D=$d (ideal 0.17 0.17 0.67); cg_active=$active"
	rm_cg $CG/A/B $CG/A/C $CG/A $CG/D
	[ "$active" -eq 4 ] || { fail "cg_active=$active while A, B, C and D are busy"; return 1; }
	within "$b" 0.09 0.26 && within "$c" 0.09 0.26 && within "$d" 0.50 0.82 ||
		fail "shares B=$b C=$c D=$d, want about 1/6 1/6 2/3"
}

test_weight_change() {
	# Two cgroups at 100 share evenly; raising one to 400 while its hogs run
	# gives it about 4x the other.
	new_cg $CG/x 100 && new_cg $CG/y 100 || return 1
	start_sched --stats 1 || return 1
	hogs_in $CG/x 2
	hogs_in $CG/y 2
	sleep 1
	measure 6 $CG/x $CG/y
	local before; before=$(ratio "${USED[1]}" "${USED[0]}")
	echo 400 > $CG/y/cpu.weight
	sleep 1
	measure 6 $CG/x $CG/y
	local after; after=$(ratio "${USED[1]}" "${USED[0]}")
	kill_hogs
	stop_sched INT
	echo "  y/x at 100:100 = $before, at 100:400 = $after"
	rm_cg $CG/x $CG/y
	within "$before" 0.6 1.6 || { fail "y/x = $before at equal weights"; return 1; }
	within "$after" 2.5 6.0 || fail "y/x = $after after cpu.weight 400, want about 4"
}

test_move() {
	# A running hog moved between cgroups moves its bookkeeping with it.
	new_cg $CG/m1 100 && new_cg $CG/m2 100 || return 1
	start_sched --stats 0.5 || return 1
	hogs_in $CG/m1 1
	local i
	for i in 1 2 3 4 5; do
		echo "${HOGS[0]}" > $CG/m2/cgroup.procs
		sleep 0.3
		echo "${HOGS[0]}" > $CG/m1/cgroup.procs
		sleep 0.3
	done
	kill_hogs
	sleep 1
	stop_sched INT
	local moves; moves=$(counter cg_move)
	echo "  10 moves of a running hog: cg_move=$moves"
	rm_cg $CG/m1 $CG/m2
	no_errors && [ "$moves" -ge 5 ] || fail "cg_move=$moves after 10 moves of a runnable task"
}

test_churn() {
	# 200 cgroups created, populated, emptied by moves and destroyed while
	# hackbench runs: the scheduler stays attached, without an error.
	start_sched || return 1
	hackbench -g 2 -l 2000 > /dev/null 2>&1 &
	local hb=$! i cg prev= s
	mkdir -p $CG/churn
	echo +cpu > $CG/churn/cgroup.subtree_control
	for i in $(seq 1 200); do
		cg=$CG/churn/c$i
		mkdir $cg && echo $((i * 37 % 1000 + 1)) > $cg/cpu.weight || { kill $hb; return 1; }
		sh -c 'sleep 0.05' &
		s=$!
		echo $s > $cg/cgroup.procs 2>/dev/null
		[ -z "$prev" ] || echo $s > $prev/cgroup.procs 2>/dev/null
		wait $s
		[ -z "$prev" ] || rmdir $prev
		prev=$cg
	done
	wait $hb
	local hbrc=$?
	rmdir $CG/churn/c* $CG/churn 2>/dev/null
	is_attached || { fail "detached during churn: $(state)"; return 1; }
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] && [ $hbrc -eq 0 ] && no_errors ||
		fail "loader rc $SCHED_RC, hackbench rc $hbrc"
}

test_storm() {
	# The seed's storm, from a shell in a child cgroup: every exit makes an
	# autogroup move, which the core dequeues and requeues; each requeue that
	# changes nothing leaves the bookkeeping alone.
	new_cg $CG/storm 100 || return 1
	start_sched --stats 1 || return 1
	local t0=$SECONDS n=${LATCFS_STORM:-10000}
	run_in $CG/storm bash -c 'for i in $(seq 1 $0); do sleep 0 & done; wait' $n
	wait $!
	local rc=$? secs=$((SECONDS - t0))
	sleep 1.5
	stop_sched INT
	local skip move
	skip=$(counter cg_move_skip) move=$(counter cg_move)
	echo "  $n x 'sleep 0 &' in ${secs}s: cg_move_skip=$skip cg_move=$move"
	rm_cg $CG/storm
	[ $rc -eq 0 ] && no_errors || { fail "storm rc $rc"; return 1; }
	[ "$skip" -ge $((n * 9 / 10)) ] || fail "cg_move_skip=$skip, want one per exit"
}

test_root_fast() {
	# Root-cgroup tasks only: the fast path takes every runnable, and no
	# share is ever computed.
	start_sched --stats 1 || return 1
	hackbench -g 2 -l 200 > /dev/null 2>&1
	sleep 1.5
	stop_sched INT
	local fast recompute
	fast=$(counter cg_root_fast) recompute=$(counter cg_recompute)
	echo "  hackbench in the root: cg_root_fast=$fast cg_recompute=$recompute"
	[ "$fast" -gt 1000 ] && [ "$recompute" -eq 0 ] ||
		fail "cg_root_fast=$fast cg_recompute=$recompute"
}

run_test "cpu.weight 100:300 siblings split 1:3" test_siblings
run_test "nested A{B,C},D shares 1/6 1/6 2/3" test_nested
run_test "cpu.weight change applies to running tasks" test_weight_change
run_test "moving a running task moves its bookkeeping" test_move
run_test "200 cgroups churned under hackbench" test_churn
run_test "a 'sleep 0 &' storm elides no-op requeues" test_storm
run_test "root tasks take the fast path" test_root_fast
finish
