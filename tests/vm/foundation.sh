#!/usr/bin/env bash
# Foundation tests: the scheduler attaches on a sched_ext kernel, runs real
# workloads, counts what it does, honours nice weights, detaches cleanly on
# SIGINT and SIGTERM, and refuses bad input with one clear line.
#
# Run as root on a sched_ext kernel (scripts/test.sh boots one in a VM).
# LATCFS names the binary under test.
set -u
cd "$(dirname "$0")/../.."
. tests/vm/lib.sh

# --- bad input: nothing may be attached afterwards ---------------------------

# expect_refused EXPECTED-SUBSTRING CMD...: CMD exits non-zero with exactly
# one line on stderr that contains EXPECTED-SUBSTRING, and attaches nothing
# (the state is what it was before).
expect_refused() {
	local want=$1; shift
	local rc=0 before
	before=$(state)
	"$@" > "$WORK/bad.out" 2> "$WORK/bad.err" || rc=$?
	[ $rc -ne 0 ] || { fail "$* exited 0"; return 1; }
	[ "$(wc -l < "$WORK/bad.err")" -eq 1 ] || { fail "$* printed $(wc -l < "$WORK/bad.err") lines on stderr: $(head -c 300 "$WORK/bad.err")"; return 1; }
	grep -qF -- "$want" "$WORK/bad.err" || { fail "$* said '$(cat "$WORK/bad.err")', expected '$want'"; return 1; }
	[ "$(state)" = "$before" ] || { fail "state went from $before to $(state) after $*"; return 1; }
	echo "  refused ($rc): $(cat "$WORK/bad.err")"
}

test_bad_flags() {
	expect_refused "--slice-us" "$LATCFS" --slice-us 0 &&
	expect_refused "--slice-us" "$LATCFS" --slice-us 100001 &&
	expect_refused "--slice-lag-us" "$LATCFS" --slice-lag-us 1000001 &&
	expect_refused "--stats" "$LATCFS" --stats 0 &&
	expect_refused "--bogus" "$LATCFS" --bogus
}

test_not_root() {
	expect_refused "must be run as root" setpriv --reuid=65534 --regid=65534 --clear-groups "$LATCFS"
}

test_no_sched_ext() {
	# Hide sched_ext's sysfs directory in a private mount namespace: to
	# the loader this is a kernel without sched_ext.
	expect_refused "no sched_ext" unshare -m sh -c \
		"mount -t tmpfs none $SYSFS && exec \"\$0\"" "$LATCFS"
}

test_second_instance() {
	start_sched || return 1
	expect_refused "already attached" "$LATCFS" || return 1
	is_attached || { fail "the first instance was detached"; return 1; }
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || { fail "the first instance exited $SCHED_RC"; return 1; }
}

# --- attached: workloads, counters, weights ----------------------------------------

test_attach() {
	start_sched --stats 1 || return 1
	echo "  state=$(state) ops=$(ops)"
	[[ "$(ops)" == latcfs_* ]] || { fail "root/ops is '$(ops)'"; return 1; }
}

# --- verifier baseline ------------------------------------------------------

# tests/verifier-baseline (its header says how to update it) holds each
# program's count per kernel: a program that grows past it by more than the
# margin stated there fails, so that growth is noticed and paid for.
test_verifier_baseline() {
	local kv now
	kv=$(uname -r | cut -d. -f1,2)
	start_sched -v || return 1
	stop_sched INT
	# the loader's -v lines "verifier: NAME COUNT"
	now=$(sed -n 's/^.*verifier: \(latcfs_[a-z_]*\) \([0-9]*\)$/\1 \2/p' "$WORK/sched.err" | sort)
	[ "$(echo "$now" | wc -w)" -ge 40 ] ||
		{ fail "the loader logged $(echo "$now" | wc -l) verifier counts at -v"; return 1; }
	echo "$now" | sed "s/^/  $kv /"
	# The verifier prunes the topology's dead branches (SMT, LLCs, nodes are
	# constants to it): counts compare only on the recorded topology.
	local topo want
	topo=$(sed -n 's/^.*topology: //p' "$WORK/sched.err" | head -n1)
	want=$(sed -n 's/^topology //p' tests/verifier-baseline)
	if [ "$topo" != "$want" ]; then
		echo "  topology '$topo', recorded for '$want': nothing to compare"
		return 0
	fi
	awk -v kv="$kv" '
		FNR == NR { if ($1 == "margin") margin = $2; else if ($1 == kv) { base[$2] = $3; nb++ }; next }
		{ seen[$1] = 1 }
		!($1 in base) { if (nb) bad = bad " " $1 " (not in the baseline)"; next }
		$2 > base[$1] * (1 + margin / 100) { bad = bad sprintf(" %s %d > %d +%d%%", $1, $2, base[$1], margin) }
		END {
			if (!nb) print "  no baseline for kernel " kv ": nothing to compare"
			for (p in base) if (!(p in seen)) bad = bad " " p " (no count logged)"
			if (bad != "") { print "  not within the baseline:" bad; exit 1 }
		}' tests/verifier-baseline - <<<"$now" ||
		{ fail "programs grew past tests/verifier-baseline for kernel $kv"; return 1; }
}

run_ok() { # run_ok DESCRIPTION CMD...
	local t0=$SECONDS
	"$@" > "$WORK/wl.out" 2>&1 || { fail "$1 failed: $(tail -n2 "$WORK/wl.out" | tr '\n' ' ')"; return 1; }
	echo "  $* ($((SECONDS - t0))s)"
}

test_workloads() {
	is_attached || { fail "not attached"; return 1; }
	run_ok hackbench -g 4 -l 200 &&
	run_ok hackbench -g 4 -l 200 -T &&
	run_ok hackbench -g 4 -l 200 -p &&
	run_ok hackbench -g 4 -l 200 -p -T &&
	run_ok stress-ng --cpu 4 --timeout 5s --quiet --temp-path "$WORK" &&
	{ is_attached || { fail "detached during the workloads"; return 1; }; }
}

test_nice_weights() {
	is_attached || { fail "not attached"; return 1; }
	# Two CPU hogs on one CPU, nice 0 and nice 10: weights 1024 and 110 in
	# the kernel's table, so the nice 0 one should get ~9x the CPU.
	taskset -c 1 nice -n 0 sh -c 'while :; do :; done' &
	local a=$!
	taskset -c 1 nice -n 10 sh -c 'while :; do :; done' &
	local b=$!
	local off=0 i
	for i in $(seq 1 16); do
		sleep 0.5
		for pid in $a $b; do
			[ "$(awk '{print $39}' /proc/$pid/stat)" = 1 ] || off=$((off + 1))
		done
	done
	local ta tb
	ta=$(cpu_ticks $a); tb=$(cpu_ticks $b)
	kill $a $b; wait $a $b 2>/dev/null
	echo "  nice 0: $ta ticks, nice 10: $tb ticks, seen off CPU 1: $off"
	[ "$off" -eq 0 ] || { fail "a hog pinned to CPU 1 ran elsewhere $off times"; return 1; }
	[ "$tb" -gt 0 ] || { fail "the nice 10 hog got no CPU at all"; return 1; }
	# Expected ratio ~9.3; TCG timing is noisy, so accept 3x-30x.
	[ $((ta)) -ge $((3 * tb)) ] && [ $((ta)) -le $((30 * tb)) ] ||
		{ fail "CPU split $ta:$tb is not near the 1024:110 weight ratio"; return 1; }
}

test_stats_moved() {
	is_attached || { fail "not attached"; return 1; }
	sleep 1.5
	local k v sums=""
	for k in enq wakeup shared keep sis_search; do
		v=$(counter $k); sums+="$k=$v "
		[ "$v" -gt 0 ] || { fail "counter $k never moved ($sums)"; return 1; }
	done
	echo "  totals: $sums"
}

test_no_kernel_errors() {
	is_attached || { fail "detached before the end: $(tail -n3 "$WORK/sched.err" | tr '\n' ' ')"; return 1; }
	local errs
	errs=$(sched_ext_errors)
	[ -z "$errs" ] || { fail "kernel log: $errs"; return 1; }
}

test_sigint_detaches() {
	[ -n "$SCHED_PID" ] || { fail "no scheduler running"; return 1; }
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || { fail "exit status $SCHED_RC on SIGINT: $(tail -n2 "$WORK/sched.err" | tr '\n' ' ')"; return 1; }
	wait_for 10 is_detached || { fail "state is $(state) after SIGINT"; return 1; }
}

# detaches_on SIG: a fresh instance stopped by SIG exits 0 and detaches.
detaches_on() {
	start_sched || return 1
	stop_sched "$1"
	[ "$SCHED_RC" -eq 0 ] || { fail "exit status $SCHED_RC on SIG$1"; return 1; }
	wait_for 10 is_detached || { fail "state is $(state) after SIG$1"; return 1; }
}
test_sigterm_detaches() { detaches_on TERM; }
# The README promises SIGHUP too (a closed terminal): ctrlc's termination
# feature handles it.
test_sighup_detaches() { detaches_on HUP; }

test_kernel_exit_reported() {
	# sysrq-S makes the kernel disable the BPF scheduler: the loader must
	# say why and exit non-zero, and nothing may stay attached.
	start_sched || return 1
	echo S > /proc/sysrq-trigger
	local pid=$SCHED_PID
	wait_for 30 is_detached || { fail "state is $(state) after sysrq-S"; return 1; }
	wait_for 10 eval '! kill -0 $pid 2>/dev/null' || { fail "the loader did not exit"; return 1; }
	stop_sched INT
	echo "  exit $SCHED_RC: $(grep -i exit "$WORK/sched.err" | tail -n1)"
	[ "$SCHED_RC" -ne 0 ] || { fail "the loader exited 0 after the kernel disabled it"; return 1; }
	grep -qi 'sysrq' "$WORK/sched.err" || { fail "no exit reason on stderr: $(tail -n2 "$WORK/sched.err" | tr '\n' ' ')"; return 1; }
}

test_compat_paths() {
	# At -v the loader names the interface each compat choice takes on this
	# kernel; /proc/kallsyms says independently whether the kfuncs exist.
	start_sched -v || return 1
	stop_sched INT
	local rel n
	rel=$(uname -r)
	n=$(grep -c "compat on $rel: " "$WORK/sched.err")
	grep "compat on $rel: " "$WORK/sched.err" | sed 's/^.*compat on [^:]*: /  /'
	[ "$n" -eq 7 ] || { fail "$n compat lines at -v, expected 7"; return 1; }
	local pair what kfunc want
	for pair in consume:scx_bpf_dsq_move_to_local clock:scx_bpf_now; do
		what=${pair%%:*} kfunc=${pair#*:}
		if grep -qw "$kfunc" /proc/kallsyms; then want="$what: $kfunc ("; else want="$what: fallback, "; fi
		grep -qF "compat on $rel: $want" "$WORK/sched.err" ||
			{ fail "no '$want' line, which /proc/kallsyms implies"; return 1; }
	done
}

test_hotplug_restart() {
	# Taking a CPU offline ends a scheduler without hotplug callbacks with
	# a restart request; the loader must load itself again, each time.
	local cpu=/sys/devices/system/cpu/cpu1/online
	[ -w $cpu ] || { fail "cpu1 cannot be taken offline here"; return 1; }
	start_sched || return 1
	local pid=$SCHED_PID
	echo 0 > $cpu
	sleep 1
	wait_for 60 is_attached || { echo 1 > $cpu; fail "not attached again after cpu1 went offline (state $(state))"; return 1; }
	echo 1 > $cpu
	sleep 1
	wait_for 60 is_attached || { fail "not attached again after cpu1 came back (state $(state))"; return 1; }
	kill -0 $pid 2>/dev/null || { fail "the loader exited instead of restarting"; return 1; }
	local restarts
	restarts=$(grep -c 'asked for a restart' "$WORK/sched.err")
	echo "  restarts: $restarts"
	[ "$restarts" -ge 1 ] || { fail "no restart logged: $(tail -n3 "$WORK/sched.err" | tr '\n' ' ')"; return 1; }
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || { fail "exit $SCHED_RC after the restarts"; return 1; }
}

echo "kernel $(uname -r), $(nproc) CPUs, binary $LATCFS"
run_test "bad flag values are refused" test_bad_flags
run_test "non-root is refused" test_not_root
run_test "a kernel without sched_ext is refused" test_no_sched_ext
run_test "a second instance is refused" test_second_instance
run_test "attaches as latcfs" test_attach
run_test "hackbench and stress-ng complete" test_workloads
run_test "nice 0 vs nice 10 CPU split follows weights" test_nice_weights
run_test "stats counters move" test_stats_moved
run_test "still attached, no sched_ext errors" test_no_kernel_errors
run_test "SIGINT detaches with exit 0" test_sigint_detaches
run_test "SIGTERM detaches with exit 0" test_sigterm_detaches
run_test "SIGHUP detaches with exit 0" test_sighup_detaches
run_test "a kernel-side exit is reported, exit non-zero" test_kernel_exit_reported
run_test "-v names the compat path of each kernel interface" test_compat_paths
run_test "verified instruction counts within the baseline" test_verifier_baseline
run_test "CPU hotplug restarts the scheduler" test_hotplug_restart
finish
