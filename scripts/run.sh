#!/usr/bin/env bash
# Run scx_latcfs with the given flags.
#
# On a host whose kernel has sched_ext, as root: build (release) and run it
# here until Ctrl-C.
# Anywhere else: boot the sched_ext kernel in a qemu guest, attach it there
# with --stats 1, run a demo workload (hackbench in its four modes and a
# stress-ng burst), then detach it with SIGINT and show the kernel's view.
#
# usage: scripts/run.sh [SCX_LATCFS FLAGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

cargo build --locked --release
bin=target/release/scx_latcfs

if host_has_sched_ext; then
	exec "$bin" "$@"
fi

if [ "${1:-}" != --in-guest ]; then
	exec scripts/vm-run.sh -- scripts/run.sh --in-guest "$@"
fi
shift
tmp=$(mktemp -d)
"$bin" --stats 1 "$@" &
pid=$!
for _ in $(seq 1 300); do
	[ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && break
	kill -0 $pid 2>/dev/null || { wait $pid; exit $?; }
	sleep 0.2
done
echo "== attached: $(cat /sys/kernel/sched_ext/root/ops)"
for mode in "" "-T" "-p" "-p -T"; do
	echo "== hackbench -g 4 -l 200 $mode"
	hackbench -g 4 -l 200 $mode | grep Time
done
echo "== stress-ng --cpu 4 --timeout 5s"
stress-ng --cpu 4 --timeout 5s --quiet --temp-path "$tmp"
kill -INT $pid
rc=0
wait $pid || rc=$?
echo "== scx_latcfs exited $rc; sched_ext state: $(cat /sys/kernel/sched_ext/state)"
exit $rc
