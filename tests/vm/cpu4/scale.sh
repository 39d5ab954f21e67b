#!/usr/bin/env bash
# The per-LLC queues (bpf/domain.bpf.h) in the 4-vCPU guest of
# scripts/test.sh: four LLCs of one CPU (qemu sockets, an L3 each), in two
# NUMA nodes (CPUs 0-1 and 2-3).
#
# Each share test starts its hogs crowded where one queue per LLC without
# stealing would leave them: one kind on node 0, the other on node 1,
# then lets them run anywhere. Changing a task's affinity does not move it
# out of its queue, so only stealing by key (an LLC whose tasks are owed
# more CPU than another's) can spread them; left crowded, each node's CPUs
# serve their own crowd and the shares come out 1:1 whatever the weights.
#
# LATCFS names the binary under test.
set -u
cd "$(dirname "$0")/../../.."
. tests/vm/lib.sh

PROBE=$(dirname "$LATCFS")/latcfs-probe
# How long each share is measured, in s, after the hogs have had 2 s to spread.
WINDOW=${LATCFS_SCALE_SECS:-6}

# crowd N CPUS [CGROUP]: start N spinning probes restricted to CPUS (in
# CGROUP, if given); their pids in LAST, and appended to HOGS.
crowd() {
	local n=$1 cpus=$2 cg=${3:-} i
	LAST=()
	for i in $(seq 1 "$n"); do
		if [ -n "$cg" ]; then
			scripts/in-cgroup "$cg" taskset -c "$cpus" "$PROBE" spin 600 > /dev/null 2>&1 &
		else
			taskset -c "$cpus" "$PROBE" spin 600 > /dev/null 2>&1 &
		fi
		HOGS+=($!) LAST+=($!)
	done
}

# release PID...: let them run on every CPU (they stay in their queue).
release() {
	local pid
	for pid in "$@"; do taskset -p -c 0-3 "$pid" > /dev/null; done
}

# ratio A B: A / B with two decimals (0 if B is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

# within X LO HI: LO <= X <= HI.
within() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x >= lo && x <= hi) }'; }

# Still attached, and nothing in the kernel log.
sched_ok() {
	local errs
	is_attached || { fail "detached: $(tail -n3 "$WORK/sched.err" | tr '\n' ' ')"; return 1; }
	errs=$(sched_ext_errors)
	[ -z "$errs" ] || { fail "kernel log: $errs"; return 1; }
}

test_nice_shares_spread() {
	# 6 nice 0 hogs crowded on node 0 and 6 nice 5 hogs on node 1, then
	# free: CFS gives each nice 0 hog 1024 / 335 = 3.05 times the CPU of a
	# nice 5 hog. Left crowded, it would be 1 to 1.
	start_sched --stats 1 || return 1
	local a b t0a t0b t1a t1b
	crowd 6 0-1; a=${LAST[*]}
	crowd 6 2-3; b=${LAST[*]}
	renice -n 5 -p $b > /dev/null
	sleep 1
	release $a $b
	sleep 2
	t0a=$(cpu_ticks $a) t0b=$(cpu_ticks $b)
	sleep "$WINDOW"
	t1a=$(cpu_ticks $a) t1b=$(cpu_ticks $b)
	sched_ok || { kill_hogs; return 1; }
	kill_hogs
	stop_sched INT
	local r
	r=$(ratio $((t1a - t0a)) $((t1b - t0b)))
	echo "  nice 0 / nice 5 CPU per hog: $r (CFS 3.05); steal=$(counter steal) shared=$(counter shared)"
	within "$r" 2.0 4.5 || { fail "nice 0 / nice 5 = $r, not within 2.0-4.5"; return 1; }
	[ "$(counter steal)" -gt 0 ] || { fail "no task was taken from another LLC"; return 1; }
}

test_cgroup_shares_spread() {
	# cpu.weight 100 and 300, 6 hogs each, crowded on node 0 and node 1:
	# 300 earns 3 of the 4 CPUs, 100 the other (crowded: 2 and 2).
	echo +cpu > $CG/cgroup.subtree_control
	mkdir -p $CG/lo $CG/hi
	echo 100 > $CG/lo/cpu.weight
	echo 300 > $CG/hi/cpu.weight
	start_sched --stats 1 || return 1
	local a b u0a u0b u1a u1b
	crowd 6 0-1 $CG/lo; a=${LAST[*]}
	crowd 6 2-3 $CG/hi; b=${LAST[*]}
	sleep 1
	release $a $b
	sleep 2
	u0a=$(cg_usage $CG/lo) u0b=$(cg_usage $CG/hi)
	sleep "$WINDOW"
	u1a=$(cg_usage $CG/lo) u1b=$(cg_usage $CG/hi)
	sched_ok || { kill_hogs; return 1; }
	kill_hogs
	stop_sched INT
	rmdir $CG/lo $CG/hi
	local r
	r=$(ratio $((u1b - u0b)) $((u1a - u0a)))
	echo "  weight 300 / weight 100 CPU: $r (3); steal=$(counter steal) shared=$(counter shared)"
	within "$r" 2.0 4.5 || { fail "300 / 100 = $r, not within 2.0-4.5"; return 1; }
}

test_nested_shares_spread() {
	# root -> A(100){B(100), C(100)}, D(200): 1/6, 1/6, 2/3 of the machine.
	# 2 hogs in B crowded on CPU 0, 2 in C on CPU 1, 4 in D on node 1.
	echo +cpu > $CG/cgroup.subtree_control
	mkdir -p $CG/A $CG/D
	echo +cpu > $CG/A/cgroup.subtree_control
	mkdir -p $CG/A/B $CG/A/C
	echo 200 > $CG/D/cpu.weight
	start_sched --stats 1 || return 1
	local b c d u0 u1 tot s
	crowd 2 0 $CG/A/B; b=${LAST[*]}
	crowd 2 1 $CG/A/C; c=${LAST[*]}
	crowd 4 2-3 $CG/D; d=${LAST[*]}
	sleep 1
	release $b $c $d
	sleep 2
	u0=($(cg_usage $CG/A/B) $(cg_usage $CG/A/C) $(cg_usage $CG/D))
	sleep "$WINDOW"
	u1=($(cg_usage $CG/A/B) $(cg_usage $CG/A/C) $(cg_usage $CG/D))
	sched_ok || { kill_hogs; return 1; }
	kill_hogs
	stop_sched INT
	rmdir $CG/A/B $CG/A/C $CG/A $CG/D
	tot=$((u1[0] - u0[0] + u1[1] - u0[1] + u1[2] - u0[2]))
	s=($(ratio $((u1[0] - u0[0])) $tot) $(ratio $((u1[1] - u0[1])) $tot) $(ratio $((u1[2] - u0[2])) $tot))
	echo "  B C D: ${s[*]} (0.17 0.17 0.67); steal=$(counter steal)"
	within "${s[0]}" 0.09 0.25 && within "${s[1]}" 0.09 0.25 && within "${s[2]}" 0.55 0.80 ||
		{ fail "B C D = ${s[*]}, not within 0.09-0.25, 0.09-0.25, 0.55-0.80"; return 1; }
}

# outside CPUS PID...: print "PID CPU" for each PID whose last CPU (stat
# field 39) is not in the list CPUS (e.g. "1 2"); one awk for all.
outside() {
	local cpus=$1 pid files=(); shift
	for pid in "$@"; do files+=("/proc/$pid/stat"); done
	awk -v ok=" $cpus " 'index(ok, " " $39 " ") == 0 { print $1, $39 }' "${files[@]}" 2>/dev/null
}

test_pinned_mix() {
	# The stall suite's pinned mixes, spread over LLCs and nodes: a hog
	# pinned to CPU 0 beside a nice 19 task pinned there that runs 3 ms
	# every 10 ms; three hogs restricted to CPUs 1-2 (two LLCs in two
	# nodes); 8 nice 19 hogs in a cgroup of cpu.weight 1; a sleeper pinned
	# to CPU 3 beside a hog, waking every 10 ms (as in stall.sh, 250 ms is
	# half the wait bound: it must be served for its place in the queue,
	# not rescued). Every task runs, none waits 2 s at a stretch, and the
	# pinned and restricted tasks are only ever seen on their CPUs.
	echo +cpu > $CG/cgroup.subtree_control
	local secs=10 pids=() i pid f gap worst=0 bad=
	mkdir -p $CG/w1
	echo 1 > $CG/w1/cpu.weight
	rm -f "$WORK"/pm.*
	start_sched --stats 1 || return 1
	taskset -c 0 "$PROBE" spin $secs > "$WORK/pm.pinned" 2>&1 & pids+=($!)
	taskset -c 0 "$PROBE" burst $secs 3000 7000 > "$WORK/pm.periodic" 2>&1 & pids+=($!)
	renice -n 19 -p $! > /dev/null
	local pinned=("${pids[@]}") restricted=()
	for i in 1 2 3; do
		taskset -c 1-2 "$PROBE" spin $secs > "$WORK/pm.r$i" 2>&1 & pids+=($!) restricted+=($!)
	done
	for i in $(seq 1 8); do
		scripts/in-cgroup $CG/w1 nice -n 19 "$PROBE" spin $secs > "$WORK/pm.w$i" 2>&1 & pids+=($!)
	done
	taskset -c 3 "$PROBE" spin $secs > "$WORK/pm.h3" 2>&1 & pids+=($!)
	taskset -c 3 "$PROBE" wake $secs 10000 > "$WORK/pm.sleeper" 2>&1 & local sleeper=$!
	for i in $(seq 1 $((secs - 1))); do
		sleep 1
		bad+=$(outside 0 "${pinned[@]}")$(outside "1 2" "${restricted[@]}")
	done
	for pid in "${pids[@]}" "$sleeper"; do wait "$pid"; done
	sched_ok || return 1
	stop_sched INT
	rmdir $CG/w1
	[ "$SCHED_RC" -eq 0 ] || { fail "the scheduler exited $SCHED_RC"; return 1; }
	[ -z "$bad" ] || { fail "ran outside their mask (pid, CPU): $bad"; return 1; }
	for f in "$WORK"/pm.*; do
		case "$f" in *.sleeper) continue ;; esac
		gap=$(sed -n 's/.*max_gap_us=\([0-9]*\).*/\1/p' "$f")
		grep -qE '(loops|bursts)=[1-9]' "$f" && [ -n "$gap" ] ||
			{ fail "${f##*/pm.} did not run: $(head -c 200 "$f")"; return 1; }
		[ "$gap" -le "$worst" ] || worst=$gap
	done
	local smax
	smax=$(sed -n 's/.*max_us=\([0-9]*\).*/\1/p' "$WORK/pm.sleeper")
	echo "  longest wait $((worst / 1000)) ms; sleeper max $((${smax:-0} / 1000)) ms; rescue=$(counter rescue) steal=$(counter steal)"
	[ "$worst" -le 2000000 ] || { fail "a task waited $((worst / 1000)) ms at a stretch"; return 1; }
	[ -n "$smax" ] && [ "$smax" -le 250000 ] || { fail "the sleeper woke ${smax:-?} us late"; return 1; }
}

test_rescue_across_llcs() {
	# A nice 19 hog waits in CPU 0's LLC while a SCHED_FIFO task holds CPU
	# 0 (RT throttling and the deadline servers that would lend CPU 0 to
	# fair or sched_ext tasks off), and CPU 1, the only other CPU it may
	# use, runs two nice -20 hogs. CPU 1's LLC always has work, so it never
	# steals for want of it, and the nice 19 hog's key is far ahead of the
	# nice -20 hogs', so it never steals by key either: only the wait
	# bound's walk into the other LLCs (bound.bpf.h) serves it. Without
	# it, the hog waits out the RT task's whole run.
	local rt_secs=5 rt_rt srv f n19 hogs=() i gap
	local -A saved=()
	start_sched --stats 1 || return 1
	taskset -c 0 nice -n 19 "$PROBE" spin $((rt_secs + 3)) > "$WORK/rs.n19" 2>&1 & n19=$!
	for i in 1 2; do
		taskset -c 1 nice -n -20 "$PROBE" spin $((rt_secs + 3)) > /dev/null 2>&1 & hogs+=($!)
	done
	rt_rt=$(cat /proc/sys/kernel/sched_rt_runtime_us)
	echo -1 > /proc/sys/kernel/sched_rt_runtime_us
	mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
	for f in /sys/kernel/debug/sched/*_server/cpu0/runtime; do
		[ -w "$f" ] || continue
		saved[$f]=$(cat "$f")
		echo 0 > "$f" 2>/dev/null || echo "  cannot turn off $f"
	done
	sleep 1
	chrt -f 1 taskset -c 0 "$PROBE" spin $rt_secs > "$WORK/rs.rt" 2>&1 & local rt=$!
	sleep 0.5
	# now CPU 1 may run it too; it stays queued in CPU 0's LLC
	taskset -p -c 0,1 $n19 > /dev/null
	wait $rt
	echo "$rt_rt" > /proc/sys/kernel/sched_rt_runtime_us
	for f in "${!saved[@]}"; do echo "${saved[$f]}" > "$f"; done
	wait $n19 "${hogs[@]}"
	sleep 1.2 # one more stats line
	sched_ok || return 1
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || { fail "the scheduler exited $SCHED_RC"; return 1; }
	gap=$(sed -n 's/.*max_gap_us=\([0-9]*\).*/\1/p' "$WORK/rs.n19")
	echo "  nice 19 hog: longest wait $((${gap:-0} / 1000)) ms while the RT task held CPU 0 for $rt_secs s; rescue=$(counter rescue) steal=$(counter steal); servers off: ${!saved[*]}"
	[ -n "$gap" ] || { fail "the nice 19 hog reported nothing: $(head -c 200 "$WORK/rs.n19")"; return 1; }
	[ "$(counter rescue)" -gt 0 ] || { fail "no rescue"; return 1; }
	[ "$gap" -le 2000000 ] ||
		fail "the nice 19 hog waited $((gap / 1000)) ms at a stretch behind the RT task (bound 2 s; the wait bound is 500 ms)"
}

test_workloads() {
	# hackbench beside stress-ng on every CPU: both complete, and most
	# dispatches are served from the CPU's own LLC.
	start_sched --stats 1 || return 1
	stress-ng --cpu 4 --timeout 10 --temp-path /tmp > "$WORK/sn.out" 2>&1 & local s=$!
	local rc=0 src=0
	hackbench -g 2 -l 100 > "$WORK/hb.out" 2>&1 || rc=$?
	wait $s || src=$?
	sleep 1.5
	sched_ok || return 1
	stop_sched INT
	[ $rc -eq 0 ] || { fail "hackbench failed: $(tail -n2 "$WORK/hb.out")"; return 1; }
	[ $src -eq 0 ] || { fail "stress-ng exited $src: $(tail -n2 "$WORK/sn.out")"; return 1; }
	local own steal
	own=$(($(counter shared) + $(counter lat_dispatch))) steal=$(counter steal)
	echo "  dispatches from the own LLC: $own, from another: $steal; rescue=$(counter rescue)"
	[ $((own + steal)) -gt 0 ] && [ "$own" -ge "$steal" ] ||
		{ fail "only $own of $((own + steal)) dispatches from the CPU's own LLC"; return 1; }
}

run_test "nice 0 and nice 5 hogs crowded on two nodes share machine-wide" test_nice_shares_spread
run_test "cgroups of weight 100 and 300 crowded on two nodes share 1:3" test_cgroup_shares_spread
run_test "the nested cgroup example holds across LLCs" test_nested_shares_spread
run_test "pinned and low-weight mixes across LLCs: no stall, pins hold" test_pinned_mix
run_test "a task queued behind an RT task is rescued from another LLC" test_rescue_across_llcs
run_test "hackbench beside stress-ng, served mostly from the own LLC" test_workloads
finish
