#!/usr/bin/env bash
# Wakeup latency and slices (preempt.bpf.h, slice.bpf.h), as behaviour:
#  - among tasks of equal latency nice, a short sleeper runs before a hog:
#    it preempts the hog when it wakes instead of waiting for a slice end;
#  - a waking latency nice -20 task preempts a nice 0 hog where at latency
#    nice 0 it would not (a protection its offset buys away);
#  - tasks that keep waking each other (hackbench's pipes) do not preempt
#    each other, at latency nice 0 or all at -20: a running task is
#    protected for --wakeup-gran-us, less only the offset a wakee has
#    beyond its own;
#  - while tasks wait, a slice ends between ticks, on time (slice timer),
#    and timer arms stay within a factor of 2 of fires;
#  - a task's sched_runtime (sched_setattr) is its slice;
#  - a task preempted by the task it woke goes on right after it, not
#    behind the queue (a handoff completes without waiting out a slice);
#  - a resumed task preempted again resumes with what it has left (a
#    worker waking two partners in a row is not sent behind the queue);
#  - while many tasks wait, wakees do not overtake them all: hackbench
#    switches tasks about as often as under EEVDF, not 2 to 3 times as often.
# The fairness invariants stay in foundation.sh, cgroup.sh and stall.sh.
#
# Run as root on a sched_ext kernel with 2 or more CPUs, HZ=250 (the tick
# is 4 ms: what "between ticks" means below).
set -u
cd "$(dirname "$0")/../.."
. tests/vm/lib.sh

PROBE=$(dirname "$LATCFS")/latcfs-probe
SECS=8

field() { sed -n "s/.*[[:space:]]$1=\([0-9]*\).*/\1/p; s/^$1=\([0-9]*\).*/\1/p" "$2" | head -n1; }

test_sleeper_before_hog() {
	# A hog and a sleeper waking every 10 ms, both on CPU 1, both at
	# latency nice 0. Waiting for the hog's slice end would delay each
	# wakeup by up to a slice (3 ms, more without a slice timer);
	# preempting it, at once or when its 1 ms protection ends, by 1 ms
	# at most and the switch.
	start_sched --stats 1 || return 1
	taskset -c 1 "$PROBE" spin $SECS > "$WORK/hog.out" 2>&1 &
	local hog=$!
	sleep 0.5
	taskset -c 1 "$PROBE" wake $((SECS - 1)) 10000 > "$WORK/wake.out" 2>&1
	wait $hog
	sleep 1.2
	local p50 p90 pre late
	p50=$(field p50_us "$WORK/wake.out") p90=$(field p90_us "$WORK/wake.out")
	pre=$(counter preempt) late=$(counter preempt_late)
	stop_sched INT
	echo "  sleeper beside a hog: wakeup delay p50 ${p50:-?} us, p90 ${p90:-?} us; preempt=$pre preempt_late=$late"
	[ -n "$p90" ] || { fail "the sleeper reported nothing: $(cat "$WORK/wake.out")"; return 1; }
	[ $((pre + late)) -gt 0 ] || { fail "no wakeup preemption"; return 1; }
	[ "$p90" -lt 3000 ] || fail "p90 wakeup delay $p90 us: the sleeper waited for the hog's slice (3 ms) to end"
}

# run_sleeper_beside_hog FLAGS...: a hog and a sleeper on CPU 1 under
# FLAGS; sets P90 (the sleeper's wakeup delay) and LP (lat_preempt).
run_sleeper_beside_hog() {
	start_sched --stats 1 "$@" || return 1
	taskset -c 1 sh -c 'while :; do :; done' &
	local hog=$!
	sleep 0.5
	taskset -c 1 "$PROBE" wake $((SECS - 2)) 10000 > "$WORK/wake.out" 2>&1
	kill $hog; wait $hog 2>/dev/null
	sleep 1.2
	P90=$(field p90_us "$WORK/wake.out") LP=$(counter lat_preempt)
	stop_sched INT
	[ -n "$P90" ] || fail "the sleeper reported nothing: $(cat "$WORK/wake.out")"
}

test_lat_nice_preempts() {
	# With a 5 ms --wakeup-gran-us, the hog is protected from a latency
	# nice 0 wakee for 5 ms after each slice start, longer than its 3 ms
	# slice, so a sleeper at 0 waits for the slice end. At -20 its 6 ms
	# offset buys the protection away and beats the hog's key by more
	# than 5 ms (credit plus offset), and it preempts.
	local p0 p20 lp
	run_sleeper_beside_hog --wakeup-gran-us 5000 || return 1
	p0=$P90
	run_sleeper_beside_hog --wakeup-gran-us 5000 --latency-nice comm:latcfs-probe=-20 || return 1
	p20=$P90 lp=$LP
	echo "  sleeper beside a nice 0 hog, gran 5 ms: p90 wakeup delay $p0 us at latency nice 0, $p20 us at -20 (lat_preempt=$lp)"
	[ "$lp" -gt 0 ] || { fail "no latency-nice preemption"; return 1; }
	[ "$p20" -lt "$p0" ] || fail "p90 at -20 ($p20 us) is not below p90 at 0 ($p0 us)"
}

test_mutual_wakers_protected() {
	# hackbench's pipe pairs wake each other all the time, each wakee
	# with sleeper credit. Without the protection nearly every wakeup
	# preempted the waker (half a million times a run); with it, few do.
	# The same at latency nice -20 (all of them): only the offset a wakee
	# has beyond the running task's buys the protection away, and before
	# that rule every -20 wakeup preempted (hackbench 2-5 times slower).
	mutual_wakers "latency nice 0" || return 1
	mutual_wakers "latency nice -20" --latency-nice comm:hackbench=-20
}

# mutual_wakers LABEL [SCHEDULER FLAGS...]
mutual_wakers() {
	local label=$1; shift
	start_sched --stats 1 "$@" || return 1
	hackbench -g 2 -l 200 -p > /dev/null 2>&1 || { fail "hackbench failed"; return 1; }
	sleep 1.2
	local pre enq defer late
	pre=$(counter preempt) enq=$(counter enq) defer=$(counter preempt_defer) late=$(counter preempt_late)
	stop_sched INT
	echo "  hackbench -g 2 -l 200 -p, $label: preempt=$pre preempt_defer=$defer preempt_late=$late of enq=$enq"
	[ "$enq" -gt 1000 ] || { fail "only $enq enqueues counted"; return 1; }
	[ $((pre * 20)) -lt "$enq" ] || { fail "$pre preemptions for $enq enqueues: wakers are not protected"; return 1; }
	# a deferred preemption is armed at most once per victim slice
	[ $((defer * 5)) -lt "$enq" ] || fail "$defer deferred preemptions armed for $enq enqueues: a re-arm storm"
}

test_slice_between_ticks() {
	# Two hogs on CPU 1 with 1 ms slices: each waits for the other's slice.
	# At the tick it would be 4 ms (HZ=250); the slice timer ends it at 1.
	start_sched --stats 1 --slice-us 1000 || return 1
	taskset -c 1 "$PROBE" spin $SECS > "$WORK/a.out" 2>&1 &
	local a=$!
	taskset -c 1 "$PROBE" spin $SECS > "$WORK/b.out" 2>&1 &
	local b=$!
	wait $a $b
	sleep 1.2
	local ga gb arm fire cut
	ga=$(field gap_p50_us "$WORK/a.out") gb=$(field gap_p50_us "$WORK/b.out")
	arm=$(counter slice_timer_arm) fire=$(counter slice_timer_fire) cut=$(counter slice_cut)
	stop_sched INT
	echo "  two hogs, 1 ms slices: median wait ${ga:-?} / ${gb:-?} us; slice_timer_arm=$arm fire=$fire slice_cut=$cut"
	[ -n "$ga" ] && [ -n "$gb" ] || { fail "a hog reported nothing"; return 1; }
	[ "$cut" -gt 0 ] || { fail "no slice ended by the timer"; return 1; }
	[ "$arm" -le $((2 * fire + 20)) ] || { fail "$arm timer arms for $fire fires: a re-arm storm"; return 1; }
	[ "$ga" -lt 3000 ] && [ "$gb" -lt 3000 ] || fail "median waits $ga / $gb us: slices ended at the 4 ms tick, not at 1 ms"
}

test_sched_runtime() {
	# Two hogs on CPU 1; one asks for a 20 ms slice with sched_setattr's
	# sched_runtime. The other then waits about 20 ms at a stretch, not 3.
	start_sched || return 1
	taskset -c 1 "$PROBE" spin $SECS 20000 > "$WORK/long.out" 2>&1 &
	local a=$!
	taskset -c 1 "$PROBE" spin $SECS > "$WORK/dfl.out" 2>&1 &
	local b=$!
	wait $a $b
	local glong gdfl
	glong=$(field gap_p50_us "$WORK/long.out") gdfl=$(field gap_p50_us "$WORK/dfl.out")
	stop_sched INT
	echo "  median waits: of the 20 ms-slice hog ${glong:-?} us, of the default one ${gdfl:-?} us"
	[ -n "$glong" ] && [ -n "$gdfl" ] || { fail "a hog reported nothing: $(cat "$WORK/long.out")"; return 1; }
	[ "$gdfl" -ge 12000 ] || fail "the default hog's median wait is $gdfl us: the 20 ms sched_runtime was not its neighbour's slice"
}

test_preempted_waker_resumes() {
	# A worker spins 5 ms, hands a byte to its partner and waits for the
	# answer, as schbench's workers do with their message thread; a hog
	# at latency nice -20, always first in the queue, shares CPU 1. The
	# partner preempts the worker while it is still on its way to block.
	# Back in the queue, the worker would wait out the hog's slice (3 ms)
	# before it reads the answer; resumed behind the partner, it reads it
	# as soon as the partner has written it.
	ln -sf "$(realpath "$PROBE")" "$WORK/lathog"
	start_sched --stats 1 --latency-nice comm:lathog=-20 || return 1
	taskset -c 1 "$WORK/lathog" spin $SECS > /dev/null 2>&1 &
	local hog=$!
	sleep 0.5
	taskset -c 1 "$PROBE" handoff $((SECS - 2)) 5000 > "$WORK/handoff.out" 2>&1
	wait $hog
	sleep 1.2
	local p50 n pre res
	p50=$(field p50_us "$WORK/handoff.out") n=$(field samples "$WORK/handoff.out")
	pre=$(counter preempt) res=$(counter preempt_resume)
	stop_sched INT
	echo "  handoff beside a -20 hog: answer p50 ${p50:-?} us over ${n:-?} rounds; preempt=$pre preempt_resume=$res"
	[ -n "$p50" ] || { fail "the worker reported nothing: $(cat "$WORK/handoff.out")"; return 1; }
	[ "$res" -gt 0 ] || { fail "no preempted task resumed"; return 1; }
	[ "$p50" -lt 1500 ] || fail "answer p50 $p50 us: the preempted worker waited behind the hog's slice"
}

test_resumed_task_resumes_again() {
	# The worker hands a byte to two partners in a row, all at latency
	# nice -20 beside a nice 0 hog on CPU 1: the first partner preempts
	# the worker, which resumes; the second preempts the resumed worker.
	# That one must resume too, with what is left of its resumption: sent
	# back into the queue, the worker of schbench's kind waited behind the
	# hogs, which doubled schbench's wakeup p99. So nearly every
	# preemption here resumes (pinned, nothing idle elsewhere stops it).
	ln -sf "$(realpath "$PROBE")" "$WORK/lathog"
	start_sched --stats 1 --latency-nice "comm:$(basename "$PROBE")=-20" || return 1
	taskset -c 1 "$WORK/lathog" spin $SECS > /dev/null 2>&1 &
	local hog=$!
	sleep 0.5
	taskset -c 1 "$PROBE" handoff $((SECS - 2)) 5000 2 > "$WORK/handoff2.out" 2>&1
	wait $hog
	sleep 1.2
	local p50 n pre res
	p50=$(field p50_us "$WORK/handoff2.out") n=$(field samples "$WORK/handoff2.out")
	pre=$(counter preempt) res=$(counter preempt_resume)
	stop_sched INT
	echo "  handoff to two partners beside a hog: answers p50 ${p50:-?} us over ${n:-?} rounds; preempt=$pre preempt_resume=$res"
	[ -n "$p50" ] || { fail "the worker reported nothing: $(cat "$WORK/handoff2.out")"; return 1; }
	[ $((2 * pre)) -ge $((3 * n)) ] || fail "$pre preemptions in $n rounds: the partners did not preempt the worker twice a round"
	[ $((10 * res)) -ge $((8 * pre)) ] || fail "$res of $pre preempted tasks resumed: a resumed task preempted again went back into the queue"
}

# ctxt_during CMD...: context switches on the machine while CMD runs.
ctxt_during() {
	local c0 c1
	c0=$(awk '/^ctxt/ {print $2}' /proc/stat)
	"$@" > /dev/null 2>&1 || return 1
	c1=$(awk '/^ctxt/ {print $2}' /proc/stat)
	echo $((c1 - c0))
}

test_deep_queue_keeps_order() {
	# hackbench's 160 tasks on 2 CPUs: each wakee has a message or two to
	# read. With the full sleeper credit every wakee went to the front of
	# the queue, ahead of the tasks with much to do, and the machine
	# switched tasks 2 to 3 times as often as under EEVDF (and ran up to
	# 1.5 times slower); the credit now shrinks with the queue.
	local eevdf ours
	eevdf=$(ctxt_during hackbench -g 4 -l 100) || { fail "hackbench failed under EEVDF"; return 1; }
	start_sched --stats 1 || return 1
	ours=$(ctxt_during hackbench -g 4 -l 100) || { fail "hackbench failed"; return 1; }
	stop_sched INT
	echo "  hackbench -g 4 -l 100: $eevdf context switches under EEVDF, $ours under scx_latcfs"
	[ "$ours" -le $((eevdf * 16 / 10)) ] || fail "$ours context switches, more than 1.6 times EEVDF's $eevdf"
}

run_test "a short sleeper preempts a hog of equal latency nice" test_sleeper_before_hog
run_test "a waking latency nice -20 task preempts where 0 does not" test_lat_nice_preempts
run_test "tasks that wake each other do not preempt each other" test_mutual_wakers_protected
run_test "while tasks wait, slices end between ticks" test_slice_between_ticks
run_test "sched_runtime sets a task's slice" test_sched_runtime
run_test "a task preempted by the task it woke goes on after it" test_preempted_waker_resumes
run_test "a resumed task preempted again resumes with what it has left" test_resumed_task_resumes_again
run_test "wakees do not overtake a deep queue" test_deep_queue_keeps_order
finish
