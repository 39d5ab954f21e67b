#!/usr/bin/env bash
# Run scx_latcfs with the given flags.
#
# The binary is built here, on the host (release; LATCFS_PROFILE=debug for
# the debug one), never in the guest: the guest shares this machine's / but
# not its login environment, so cargo need not be reachable there.
#
# On a host whose kernel has sched_ext, as root: run it here until Ctrl-C.
# Anywhere else: boot the sched_ext kernel in a qemu guest, attach it there
# with --stats 1, run a demo workload (hackbench in its four modes and a
# stress-ng burst), then detach it with SIGINT and show the kernel's view.
#
# usage: scripts/run.sh [SCX_LATCFS FLAGS...]
#
# Environment:
#   LATCFS_PROFILE  release (default) or debug
#   LATCFS_DEMO     full (default) or short: the demo's hackbench loops and
#                   stress-ng burst, 200 loops and 5 s, or 20 and 1 s
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

if [ "${1:-}" = --in-guest ]; then
	# Inside the guest: $2 is the binary the host built.
	shift
	bin=$1
	shift
else
	profile=${LATCFS_PROFILE:-release}
	case $profile in
	release) cargo build --locked --release ;;
	debug) cargo build --locked ;;
	*) echo "run.sh: LATCFS_PROFILE must be release or debug, not '$profile'" >&2; exit 2 ;;
	esac
	bin=target/$profile/scx_latcfs
	if host_has_sched_ext; then
		exec "$bin" "$@"
	fi
	# The guest starts with a clean environment: pass the demo choice on.
	exec scripts/vm-run.sh -- env LATCFS_DEMO="${LATCFS_DEMO:-full}" \
		scripts/run.sh --in-guest "$bin" "$@"
fi

loops=200 burst=5
[ "${LATCFS_DEMO:-full}" = short ] && loops=20 burst=1
tmp=$(mktemp -d)
"$bin" --stats 1 "$@" &
pid=$!
for _ in $(seq 1 300); do
	[ "$(cat /sys/kernel/sched_ext/state)" = enabled ] && break
	kill -0 $pid 2>/dev/null || { rc=0; wait $pid || rc=$?; echo "== scx_latcfs exited $rc before attaching"; exit $rc; }
	sleep 0.2
done
if [ "$(cat /sys/kernel/sched_ext/state)" != enabled ]; then
	echo "== scx_latcfs did not attach within 60 s" >&2
	kill -TERM $pid
	wait $pid || true
	exit 1
fi
echo "== attached: $(cat /sys/kernel/sched_ext/root/ops)"
for mode in "" "-T" "-p" "-p -T"; do
	echo "== hackbench -g 4 -l $loops $mode"
	# shellcheck disable=SC2086 # $mode is hackbench's flags
	hackbench -g 4 -l $loops $mode | grep Time
done
echo "== stress-ng --cpu 4 --timeout ${burst}s"
stress-ng --cpu 4 --timeout "${burst}s" --quiet --temp-path "$tmp"
rm -rf "$tmp"
kill -INT $pid
rc=0
wait $pid || rc=$?
echo "== scx_latcfs exited $rc; sched_ext state: $(cat /sys/kernel/sched_ext/state)"
exit $rc
