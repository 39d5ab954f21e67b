#!/usr/bin/env bash
# Stats tests: --help-stats documents every counter; --monitor reads a
# running instance's stats server (stats lines and JSON) without loading
# anything, rides out a restart, and fails with one line when no instance
# runs; the server's socket goes away with the scheduler, and a stale one
# does not stop the next.
#
# Run as root on a sched_ext kernel (scripts/test.sh boots one in a VM).
# LATCFS names the binary under test.
set -u
cd "$(dirname "$0")/../.."
. tests/vm/lib.sh

SOCKET=/var/run/scx/root/stats
PY=$(command -v python3 || echo /usr/bin/python3)

# The counter names, in order, from NAMES in src/stats/counters.rs; then the rates.
NAMES=$(sed -n '/^pub const NAMES/,/^];/p' src/stats/counters.rs | grep -oE '"[a-z0-9_]+"' | tr -d '"')
FIELDS="$NAMES recent_rate fast_rate"

# monitor SECS OUT [FLAGS...]: run `scx_latcfs --monitor 0.5 FLAGS` for SECS
# seconds (under timeout), stdout in OUT, stderr in $WORK/mon.err, while
# hackbench keeps the scheduler busy. MON_RC holds its exit status (124:
# still running when timeout stopped it).
monitor() {
	local secs=$1 out=$2; shift 2
	( end=$((SECONDS + secs)); while [ $SECONDS -lt $end ]; do hackbench -g 2 -l 20 >/dev/null 2>&1; done ) &
	local load=$!
	MON_RC=0
	timeout "$secs" "$LATCFS" --monitor 0.5 "$@" > "$out" 2> "$WORK/mon.err" || MON_RC=$?
	wait $load
	echo "  --monitor 0.5 $* for ${secs}s: exit $MON_RC, $(wc -l < "$out") lines"
}

test_help_stats() {
	local before rc=0 n count=0
	before=$(state)
	"$LATCFS" --help-stats > "$WORK/help.out" 2> "$WORK/help.err" || rc=$?
	[ $rc -eq 0 ] || { fail "--help-stats exited $rc: $(head -c 300 "$WORK/help.err")"; return 1; }
	[ ! -s "$WORK/help.err" ] || { fail "--help-stats wrote to stderr: $(head -c 300 "$WORK/help.err")"; return 1; }
	for n in $FIELDS; do
		count=$((count + 1))
		# "  NAME  (u64) : description"
		grep -qE "^  $n +\((u64|float)\) +: .+" "$WORK/help.out" ||
			{ fail "--help-stats does not document $n"; return 1; }
	done
	[ $count -gt 10 ] || { fail "found only $count field names in src/stats/counters.rs"; return 1; }
	[ "$(state)" = "$before" ] || { fail "state went from $before to $(state)"; return 1; }
	echo "  $count fields documented; $(head -n1 "$WORK/help.out" | cut -c1-70)..."
}

test_no_instance() {
	is_detached || { fail "a scheduler is attached (state $(state))"; return 1; }
	[ ! -e $SOCKET ] || rm -f $SOCKET
	local rc=0
	"$LATCFS" --monitor 0.5 > "$WORK/none.out" 2> "$WORK/none.err" || rc=$?
	[ $rc -ne 0 ] || { fail "--monitor exited 0 with no instance"; return 1; }
	[ "$(wc -l < "$WORK/none.err")" -eq 1 ] || { fail "stderr has $(wc -l < "$WORK/none.err") lines: $(head -c 300 "$WORK/none.err")"; return 1; }
	grep -q 'no scx_latcfs instance is running' "$WORK/none.err" || { fail "said: $(cat "$WORK/none.err")"; return 1; }
	[ ! -s "$WORK/none.out" ] || { fail "printed on stdout: $(head -c 200 "$WORK/none.out")"; return 1; }
	is_detached || { fail "--monitor attached something (state $(state))"; return 1; }
	echo "  exit $rc: $(cat "$WORK/none.err")"
}

test_stale_socket() {
	# An instance killed with SIGKILL leaves its socket behind: --monitor
	# must still say that none runs, and the next instance must start.
	is_detached || { fail "a scheduler is attached (state $(state))"; return 1; }
	mkdir -p "$(dirname $SOCKET)"
	rm -f $SOCKET
	"$PY" -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.close()' $SOCKET ||
		{ fail "could not make a stale socket"; return 1; }
	[ -S $SOCKET ] || { fail "no stale socket at $SOCKET"; return 1; }
	local rc=0
	"$LATCFS" --monitor 0.5 > /dev/null 2> "$WORK/stale.err" || rc=$?
	[ $rc -ne 0 ] && [ "$(wc -l < "$WORK/stale.err")" -eq 1 ] && grep -q 'no scx_latcfs instance is running' "$WORK/stale.err" ||
		{ fail "exit $rc: $(head -c 300 "$WORK/stale.err")"; return 1; }
	echo "  stale socket: $(cat "$WORK/stale.err")"
	start_sched || return 1
	monitor 2 "$WORK/stale.out"
	grep -q '^latcfs: ' "$WORK/stale.out" || { fail "no stats from the instance started over a stale socket: $(head -c 300 "$WORK/mon.err")"; return 1; }
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || { fail "the scheduler exited $SCHED_RC"; return 1; }
	[ ! -e $SOCKET ] || { fail "$SOCKET is still there after the scheduler exited"; return 1; }
}

test_monitor_lines() {
	# The scheduler prints its own --stats lines through the same server
	# while --monitor, another process, reads it: both must see counts.
	start_sched --stats 0.5 || return 1
	[ -S $SOCKET ] || { fail "no stats socket at $SOCKET"; return 1; }
	monitor 4 "$WORK/mon.out"
	[ "$MON_RC" -eq 124 ] || { fail "--monitor exited $MON_RC before the timeout: $(head -c 300 "$WORK/mon.err")"; return 1; }
	local lines k v sums=""
	lines=$(grep -c '^latcfs: ' "$WORK/mon.out")
	echo "  first: $(grep '^latcfs: ' "$WORK/mon.out" | head -n1)"
	echo "  last:  $(grep '^latcfs: ' "$WORK/mon.out" | tail -n1)"
	[ "$lines" -ge 4 ] || { fail "$lines stats lines in 4s at 0.5s: $(head -c 300 "$WORK/mon.err")"; return 1; }
	[ "$(grep -vc '^latcfs: ' "$WORK/mon.out")" -eq 0 ] || { fail "stdout has other lines: $(grep -v '^latcfs: ' "$WORK/mon.out" | head -n2)"; return 1; }
	# Every field on every line, in order.
	local want got
	want="latcfs: $(for k in $FIELDS; do printf '%s= ' "$k"; done)"
	got=$(head -n1 "$WORK/mon.out" | sed -E 's/=[^ ]*/=/g')
	[ "$got " = "$want" ] || { fail "fields are '$got', expected '$want'"; return 1; }
	for k in enq wakeup shared sis_search; do
		v=$(stat_sum $k "$WORK/mon.out"); sums+="$k=$v "
		[ "$v" -gt 0 ] || { fail "$k never moved ($sums)"; return 1; }
	done
	# Per-interval counts: nonzero wakeups in most intervals, and no
	# cumulative totals (a total would dwarf 4 s of counts).
	local busy
	busy=$(awk '/^latcfs: / { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "wakeup" && kv[2] > 0) n++ } } END { print n + 0 }' "$WORK/mon.out")
	[ "$busy" -ge $((lines / 2)) ] || { fail "only $busy of $lines intervals saw wakeups"; return 1; }
	echo "  totals over $lines lines: $sums"
	local own
	own=$(counter wakeup)
	[ "$own" -gt 0 ] || { fail "--stats in the scheduler printed no wakeups: $(tail -n2 "$WORK/sched.err" | tr '\n' ' ')"; return 1; }
	echo "  the scheduler's own --stats lines meanwhile: $(grep -c '^latcfs: ' "$WORK/sched.out"), wakeup=$own"
	is_attached || { fail "the scheduler detached"; return 1; }
}

test_monitor_json() {
	is_attached || { fail "not attached"; return 1; }
	monitor 3 "$WORK/mon.json" --json
	[ "$MON_RC" -eq 124 ] || { fail "--monitor --json exited $MON_RC: $(head -c 300 "$WORK/mon.err")"; return 1; }
	"$PY" -c '
import json, sys
fields = sys.argv[2].split()
objs = [json.loads(l) for l in open(sys.argv[1])]
assert len(objs) >= 3, f"{len(objs)} objects"
for o in objs:
    assert list(o) == fields, f"keys {list(o)}"
    for k in fields[:-2]:
        assert isinstance(o[k], int) and o[k] >= 0, f"{k}={o[k]!r}"
    for k in fields[-2:]:
        assert o[k] is None or isinstance(o[k], (int, float)) and 0 <= o[k] <= 100, f"{k}={o[k]!r}"
assert sum(o["wakeup"] for o in objs) > 0, "no wakeups"
print(f"  {len(objs)} objects, e.g. " + json.dumps({k: objs[-1][k] for k in ["enq", "wakeup", "sis_search", "recent_rate", "fast_rate"]}))
' "$WORK/mon.json" "$FIELDS" 2> "$WORK/py.err" || { fail "JSON: $(tail -n1 "$WORK/py.err"): $(head -c 300 "$WORK/mon.json")"; return 1; }
}

test_monitor_after_stop() {
	# The instance exits under a running --monitor: it says so, exits
	# non-zero, and the socket is gone.
	is_attached || { fail "not attached"; return 1; }
	"$LATCFS" --monitor 0.5 > "$WORK/stop.out" 2> "$WORK/stop.err" &
	local mon=$!
	sleep 1.5
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || { fail "the scheduler exited $SCHED_RC: $(tail -n2 "$WORK/sched.err" | tr '\n' ' ')"; return 1; }
	wait_for 10 eval '! kill -0 $mon 2>/dev/null' || { kill $mon; fail "--monitor still runs after the instance exited"; return 1; }
	local rc=0
	wait $mon || rc=$?
	echo "  --monitor: exit $rc, $(grep -c '^latcfs: ' "$WORK/stop.out") lines, then: $(cat "$WORK/stop.err")"
	[ $rc -ne 0 ] || { fail "--monitor exited 0 when its instance went away"; return 1; }
	[ "$(wc -l < "$WORK/stop.err")" -eq 1 ] && grep -q 'instance stopped' "$WORK/stop.err" ||
		{ fail "stderr: $(head -c 300 "$WORK/stop.err")"; return 1; }
	[ ! -e $SOCKET ] || { fail "$SOCKET is still there after the scheduler exited"; return 1; }
	grep -q 'stats' "$WORK/sched.err" && { fail "the scheduler logged about stats: $(grep stats "$WORK/sched.err" | head -n2)"; return 1; }
	return 0
}

test_monitor_exit_race() {
	# Stop the instance at a different moment of a fast monitor's cycle
	# each time: before its first request, between requests, in the middle
	# of one. Whatever the timing, the monitor prints one line and exits 1.
	local i rc delay bad=0 seen=""
	for i in $(seq 1 6); do
		start_sched || return 1
		"$LATCFS" --monitor 0.1 > "$WORK/race.out" 2> "$WORK/race.err" &
		local mon=$!
		delay=$(printf '0.%02d' $(( (i * 17) % 100 )))
		sleep "$delay"
		stop_sched INT
		[ "$SCHED_RC" -eq 0 ] || { kill $mon; fail "round $i: the scheduler exited $SCHED_RC"; return 1; }
		wait_for 10 eval '! kill -0 $mon 2>/dev/null' || { kill $mon; fail "round $i: --monitor still runs"; return 1; }
		rc=0
		wait $mon || rc=$?
		seen+=" $delay:$rc:$(grep -c '^latcfs: ' "$WORK/race.out")"
		if [ $rc -ne 1 ] || [ "$(wc -l < "$WORK/race.err")" -ne 1 ] ||
			! grep -qE '^scx_latcfs: (the scx_latcfs instance stopped|no scx_latcfs instance is running .*)$' "$WORK/race.err"; then
			echo "  round $i (stopped after ${delay}s): exit $rc, stderr: $(head -c 300 "$WORK/race.err")"
			bad=$((bad + 1))
		fi
	done
	echo "  delay:exit:lines per round:$seen"
	[ $bad -eq 0 ] || { fail "$bad of 6 rounds did not end with the one documented line and exit 1"; return 1; }
}

test_monitor_not_root() {
	start_sched || return 1
	local rc=0
	setpriv --reuid=65534 --regid=65534 --clear-groups "$LATCFS" --monitor 0.5 > /dev/null 2> "$WORK/nr.err" || rc=$?
	echo "  exit $rc: $(cat "$WORK/nr.err")"
	[ $rc -ne 0 ] && [ "$(wc -l < "$WORK/nr.err")" -eq 1 ] && grep -q 'permission denied' "$WORK/nr.err" ||
		{ fail "exit $rc: $(head -c 300 "$WORK/nr.err")"; return 1; }
	is_attached || { fail "the scheduler detached"; return 1; }
}

test_monitor_across_restart() {
	# CPU hotplug makes the kernel ask for a restart: the loader reloads the
	# BPF scheduler under the same stats server, and --monitor goes on,
	# with interval counts that do not jump (counters restart at 0 in the
	# new BPF program; the loader carries the old totals over).
	local cpu=/sys/devices/system/cpu/cpu1/online
	[ -w $cpu ] || { fail "cpu1 cannot be taken offline here"; return 1; }
	is_attached || start_sched || return 1
	"$LATCFS" --monitor 0.5 > "$WORK/rs.out" 2> "$WORK/rs.err" &
	local mon=$!
	sleep 1.5
	echo 0 > $cpu
	sleep 1
	wait_for 60 is_attached || { echo 1 > $cpu; kill $mon; fail "not attached again after cpu1 went offline"; return 1; }
	echo 1 > $cpu
	sleep 1
	wait_for 60 is_attached || { kill $mon; fail "not attached again after cpu1 came back"; return 1; }
	local before
	before=$(grep -c '^latcfs: ' "$WORK/rs.out")
	sleep 2
	kill -0 $mon 2>/dev/null || { fail "--monitor exited across the restart: $(cat "$WORK/rs.err")"; return 1; }
	kill -INT $mon
	local rc=0
	wait $mon || rc=$?
	local lines restarts max
	lines=$(grep -c '^latcfs: ' "$WORK/rs.out")
	restarts=$(grep -c 'asked for a restart' "$WORK/sched.err")
	max=$(awk '/^latcfs: / { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[2] ~ /^[0-9]+$/ && kv[2] + 0 > m) m = kv[2] + 0 } } END { printf "%d", m }' "$WORK/rs.out")
	echo "  restarts: $restarts, --monitor: $lines lines ($before before the last 2s), exit $rc on SIGINT, largest count $max"
	[ "$restarts" -ge 1 ] || { fail "no restart logged"; return 1; }
	[ $rc -eq 0 ] || { fail "--monitor exited $rc on SIGINT: $(cat "$WORK/rs.err")"; return 1; }
	[ "$lines" -gt "$before" ] || { fail "no stats lines after the restart"; return 1; }
	[ "$max" -lt 100000000 ] || { fail "an interval count of $max: totals went back at the restart"; return 1; }
	stop_sched INT
	[ "$SCHED_RC" -eq 0 ] || { fail "the scheduler exited $SCHED_RC"; return 1; }
	[ ! -e $SOCKET ] || { fail "$SOCKET is still there after the scheduler exited"; return 1; }
}

echo "kernel $(uname -r), $(nproc) CPUs, binary $LATCFS"
run_test "--help-stats documents every stats field" test_help_stats
run_test "--monitor with no instance fails with one line" test_no_instance
run_test "a stale socket: --monitor says none runs, the next instance starts" test_stale_socket
run_test "--monitor prints stats lines whose counters move" test_monitor_lines
run_test "--monitor --json prints one JSON object per interval" test_monitor_json
run_test "--monitor ends with one line when the instance exits" test_monitor_after_stop
run_test "--monitor ends with one line, however its instance's exit races it" test_monitor_exit_race
run_test "--monitor without root is refused" test_monitor_not_root
run_test "--monitor goes on across a restart" test_monitor_across_restart
finish
