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
# hogs_in CGROUP N: start N CPU hogs in CGROUP, adding their pids to HOGS.
hogs_in() {
	local i
	for i in $(seq 1 "$2"); do
		run_in "$1" sh -c 'while :; do :; done'
		HOGS+=($!)
	done
}

# measure SECS CGROUP...: sleep SECS and set USED[i] to the CPU time (usec)
# each CGROUP used meanwhile.
measure() {
	local secs=$1 i; shift
	local before=()
	for i in "$@"; do before+=("$(cg_usage "$i")"); done
	sleep "$secs"
	USED=()
	i=0
	for cg in "$@"; do
		USED+=($(( $(cg_usage "$cg") - before[i] )))
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

# nested_start: the nested example, root -> A(100){B(100), C(100)}, D(200),
# with two hogs in each leaf, under a scheduler started with --stats 1.
nested_start() {
	new_cg $CG/A 100 && echo +cpu > $CG/A/cgroup.subtree_control &&
		new_cg $CG/A/B 100 && new_cg $CG/A/C 100 && new_cg $CG/D 200 || return 1
	start_sched --stats 1 || return 1
	hogs_in $CG/A/B 2
	hogs_in $CG/A/C 2
	hogs_in $CG/D 2
}

test_nested() {
	# root -> A(100){B(100), C(100)}, D(200): B = C = 1/6, D = 2/3.
	nested_start || return 1
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
	if [ -e /proc/sys/kernel/sched_autogroup_enabled ]; then
		[ "$skip" -ge $((n * 9 / 10)) ] || fail "cg_move_skip=$skip, want one per exit"
	else
		# Built without CONFIG_SCHED_AUTOGROUP (our 6.12 image): exits
		# move nothing, so there is nothing to elide, and nothing may
		# count as a move either.
		echo "  no autogroup on this kernel: exits make no moves"
		[ "$move" -eq 0 ] || fail "cg_move=$move without any move"
	fi
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

# warned WHAT: the count the loader logged for cgroups it could not track
# (WHAT=tracked) or flattened (WHAT=deeper), summed over its warnings.
warned() {
	case $1 in
	tracked) grep -o '[0-9]* cgroups could not be tracked' "$WORK/sched.err" ;;
	deeper) grep -o '[0-9]* cgroups are deeper' "$WORK/sched.err" ;;
	esac | awk '{ s += $1 } END { print s + 0 }'
}

test_many_cgroups() {
	# 17,000 cgroups with the cpu controller, more than the 16,384 entries
	# the BPF side once had: every mkdir succeeds while attached, the
	# scheduler stays, attaches again with them all present, and tracks
	# every one.
	local n=17000 dir=$CG/many errs made
	mkdir -p $dir && echo +cpu > $dir/cgroup.subtree_control || return 1
	start_sched || return 1
	errs=$(cd $dir && mkdir $(seq -f c%g 1 $n) 2>&1 | wc -l)
	made=$(ls -d $dir/c[0-9]* | wc -l)
	is_attached || { fail "detached while creating $n cgroups: $(state)"; return 1; }
	stop_sched INT
	echo "  $made of $n cgroups made while attached ($errs mkdir errors)"
	start_sched || { rmdir $dir/c[0-9]* $dir; return 1; }
	sleep 3
	local untracked; untracked=$(warned tracked)
	stop_sched INT
	rmdir $dir/c[0-9]* $dir
	echo "  attached again with them present: $untracked untracked"
	[ "$errs" -eq 0 ] && [ "$made" -eq $n ] ||
		{ fail "$errs of $n cgroup mkdirs failed while attached"; return 1; }
	[ "$untracked" -eq 0 ] && [ "$SCHED_RC" -eq 0 ] && no_errors ||
		fail "$untracked cgroups untracked, loader rc $SCHED_RC"
}

test_capacity() {
	# With room for 50 cgroups (a test flag), 100 present at load and 100
	# more made while attached: the attach and every mkdir succeed, the
	# loader logs the untracked ones, and their hogs run.
	local dir=$CG/cap errs
	mkdir -p $dir && echo +cpu > $dir/cgroup.subtree_control || return 1
	(cd $dir && mkdir $(seq -f a%g 1 100)) || return 1
	start_sched --test-cgroup-capacity 50 || { rmdir $dir/a* $dir; return 1; }
	errs=$(cd $dir && mkdir $(seq -f b%g 1 100) 2>&1 | wc -l)
	hogs_in $dir/a100 1
	hogs_in $dir/b100 1
	sleep 3
	measure 3 $dir/a100 $dir/b100
	kill_hogs
	local untracked; untracked=$(warned tracked)
	is_attached || { fail "detached: $(state)"; rmdir $dir/[ab]* $dir; return 1; }
	stop_sched INT
	rmdir $dir/[ab]* $dir
	echo "  capacity 50: $errs mkdir errors, $untracked cgroups logged untracked;" \
		"hogs in untracked cgroups used ${USED[0]} and ${USED[1]} usec"
	[ "$errs" -eq 0 ] || { fail "$errs of 100 mkdirs failed at capacity"; return 1; }
	[ "$untracked" -ge 150 ] || { fail "$untracked cgroups logged untracked, want at least 150"; return 1; }
	[ "${USED[0]}" -gt 0 ] && [ "${USED[1]}" -gt 0 ] && [ "$SCHED_RC" -eq 0 ] && no_errors ||
		fail "hogs used ${USED[*]} usec, loader rc $SCHED_RC"
}

test_exit_churn() {
	# The nested example, while 300 short-lived cgroups under A (three
	# churners at once) each lose their only task and are removed at once.
	# do_exit() runs cgroup_exit() before the task's last schedule, so the
	# rmdir, and then ops.cgroup_exit(), can come before the task's last
	# dequeue; the cgroup must not stay in A's sum, or B and C lose share
	# for good (cg_exit_active counts the cgroups that went while active).
	nested_start || return 1
	local j churners=()
	rm -f $WORK/churn.fail
	for j in 1 2 3; do
		(
			for i in $(seq $j 3 300); do
				t=$CG/A/t$i
				mkdir $t || { echo "mkdir $t" >> $WORK/churn.fail; exit; }
				scripts/in-cgroup $t true
				rmdir $t 2>/dev/null || { sleep 0.1; rmdir $t; } ||
					echo "rmdir $t" >> $WORK/churn.fail
			done
		) &
		churners+=($!)
	done
	wait "${churners[@]}"
	sleep 1
	measure 10 $CG/A/B $CG/A/C $CG/D
	kill_hogs
	stop_sched INT
	local total=$((USED[0] + USED[1] + USED[2])) b c d
	b=$(ratio "${USED[0]}" $total) c=$(ratio "${USED[1]}" $total) d=$(ratio "${USED[2]}" $total)
	echo "  after 300 churned cgroups: shares B=$b C=$c D=$d (ideal 0.17 0.17 0.67);" \
		"cg_exit_active=$(counter cg_exit_active)"
	rm_cg $CG/A/t* $CG/A/B $CG/A/C $CG/A $CG/D
	[ ! -s $WORK/churn.fail ] || { fail "churn failed: $(head -n3 $WORK/churn.fail)"; return 1; }
	within "$b" 0.117 0.217 && within "$c" 0.117 0.217 && within "$d" 0.617 0.717 ||
		fail "shares B=$b C=$c D=$d, want 1/6 1/6 2/3 within 0.05"
}

# deep_chain TOP DEPTH: cgroups TOP/l2/.../lDEPTH (TOP is level 1), each
# below TOP at cpu.weight 10000; prints the deepest one's path.
deep_chain() {
	local path=$1 l
	for l in $(seq 2 "$2"); do
		echo +cpu > $path/cgroup.subtree_control || return 1
		path=$path/l$l
		mkdir -p $path && echo 10000 > $path/cpu.weight || return 1
	done
	echo $path
}

test_deep() {
	# A 40-level chain whose top cgroup has cpu.weight 100, every level
	# below it 10000, beside a top-level cgroup of 300. Each level is the
	# only child of its parent, so hogs anywhere in the chain get the top
	# cgroup's share: 1:3. At depth 20 the weight walks must reach the top;
	# at depth 40, past the tracked depth, the cgroup is accounted as its
	# ancestor at that depth, and the loader says so.
	local l20 l40 r20 r40
	new_cg $CG/deep 100 && new_cg $CG/flat 300 || return 1
	l40=$(deep_chain $CG/deep 40) || { fail "could not make a 40-level chain"; return 1; }
	l20=${l40%%/l21/*}
	start_sched || return 1
	hogs_in $l20 2
	hogs_in $CG/flat 2
	sleep 1
	measure 6 $CG/deep $CG/flat
	r20=$(ratio "${USED[1]}" "${USED[0]}")
	# New hogs at depth 40 rather than moving these: while l20 holds
	# tasks with the threaded cpu controller enabled below it, it is a
	# thread root, and cgroup v2 may refuse tasks in domains below it
	# (Linux 6.12 refuses that move with EOPNOTSUPP).
	kill_hogs
	hogs_in $l40 2
	hogs_in $CG/flat 2
	local moved=yes
	[ "$(cat /proc/${HOGS[0]}/cgroup)" = "0::${l40#$CG}" ] || moved=no
	sleep 1
	measure 6 $CG/deep $CG/flat
	r40=$(ratio "${USED[1]}" "${USED[0]}")
	kill_hogs
	local deeper; deeper=$(warned deeper)
	stop_sched INT
	echo "  flat/deep with hogs at depth 20: $r20, at depth 40: $r40 (ideal 3);" \
		"$deeper cgroups logged as deeper than tracked"
	local p=$l40
	while [ "$p" != "$CG" ]; do rmdir $p; p=${p%/*}; done
	rm_cg $CG/flat
	[ $moved = yes ] || { fail "could not start the hogs at depth 40"; return 1; }
	within "$r20" 2.0 4.5 || { fail "flat/deep = $r20 at depth 20, want about 3"; return 1; }
	within "$r40" 2.0 4.5 || { fail "flat/deep = $r40 at depth 40, want about 3"; return 1; }
	[ "$deeper" -ge 8 ] && no_errors || fail "$deeper cgroups logged as too deep, want 8"
}

run_test "cpu.weight 100:300 siblings split 1:3" test_siblings
run_test "nested A{B,C},D shares 1/6 1/6 2/3" test_nested
run_test "cpu.weight change applies to running tasks" test_weight_change
run_test "moving a running task moves its bookkeeping" test_move
run_test "200 cgroups churned under hackbench" test_churn
run_test "a 'sleep 0 &' storm elides no-op requeues" test_storm
run_test "root tasks take the fast path" test_root_fast
run_test "17,000 cgroups: every mkdir succeeds, all tracked" test_many_cgroups
run_test "past the capacity, cgroups are untracked, never refused" test_capacity
run_test "cgroups removed before their task's last dequeue leave no weight" test_exit_churn
run_test "a 40-level hierarchy gets its share at depth 20 and 40" test_deep
finish
