#!/usr/bin/env bash
# Boot a sched_ext kernel under qemu (software emulation, via virtme-ng) with
# this machine's / as the guest's root, run one command inside as root, and
# exit with that command's status. The command's stdout and stderr come back
# on ours.
#
# usage: scripts/vm-run.sh [--cpus N] [--memory SIZE] [--numa SPEC]... [--oldest]
#                          [--] COMMAND...
#
# --numa SPEC adds a NUMA node, as virtme-ng's --numa: MEM,cpus=FIRST-LAST
# (the nodes' MEM must add up to --memory).
# --oldest boots the oldest installed sched_ext kernel instead of the newest.
#
# Environment:
#   LATCFS_KERNEL   kernel image to boot (default: the newest installed
#                   kernel whose config has CONFIG_SCHED_CLASS_EXT=y)
#   LATCFS_OUT      a directory the guest may write (default: ./vm-out)
#   LATCFS_VM_TIMEOUT  seconds before the VM is killed (default 3000)
#   LATCFS_QEMU_OPTS   extra qemu options (e.g. an -smp topology)
set -euo pipefail

cpus=2
memory=4G
pick=tail
numa=()
while [ $# -gt 0 ]; do
	case "$1" in
	--cpus) cpus=$2; shift 2 ;;
	--memory) memory=$2; shift 2 ;;
	--numa) numa+=(--numa "$2"); shift 2 ;;
	--oldest) pick=head; shift ;;
	--) shift; break ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--cpus N] [--memory SIZE] [--numa SPEC]... [--oldest] [--] COMMAND..." >&2; exit 2; }

die() { printf 'vm-run: error: %s\n' "$*" >&2; exit 125; }

find_kernel() {
	local best="" abi img cfg
	for cfg in /boot/config-* /usr/lib/modules/*/config; do
		[ -r "$cfg" ] || continue
		grep -q '^CONFIG_SCHED_CLASS_EXT=y' "$cfg" || continue
		case "$cfg" in
		/boot/config-*) abi=${cfg#/boot/config-} ;;
		*) abi=$(basename "$(dirname "$cfg")") ;;
		esac
		for img in "/boot/vmlinuz-$abi" "/usr/lib/modules/$abi/vmlinuz"; do
			[ -r "$img" ] && { best+="$abi $img"$'\n'; break; }
		done
	done
	printf '%s' "$best" | sort -V | "$pick" -n1 | cut -d' ' -f2
}

kernel=${LATCFS_KERNEL:-$(find_kernel)}
[ -n "$kernel" ] && [ -r "$kernel" ] || die "no sched_ext kernel installed: run scripts/setup.sh"
vng=${VNG:-$(command -v vng || echo /opt/scx_latcfs/venv/bin/vng)}
[ -x "$vng" ] || die "virtme-ng not found: run scripts/setup.sh"
export PATH="$(dirname "$vng"):$PATH"

out=${LATCFS_OUT:-$PWD/vm-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The guest runs the command through bash in the current directory; quote
# each argument so that it arrives unchanged.
printf -v cmd '%q ' "$@"
cmd="cd $(printf '%q' "$PWD") && $cmd"

args=(--disable-kvm -r "$kernel" --cpus "$cpus" --memory "$memory" --user root
      --rwdir "$out" --exec "$cmd" "${numa[@]}")
[ -n "${LATCFS_QEMU_OPTS:-}" ] && args+=(--qemu-opts "$LATCFS_QEMU_OPTS")

# qemu reopens our stdout and stderr by path, which truncates them when they
# are files and loses everything written before the boot: hand it pipes.
set +e
timeout --kill-after=30 "${LATCFS_VM_TIMEOUT:-3000}" "$vng" "${args[@]}" </dev/null \
	2> >(cat >&2) | cat
rc=${PIPESTATUS[0]}
set -e
case $rc in
124|137) die "the VM ran past ${LATCFS_VM_TIMEOUT:-3000}s and was killed" ;;
255) die "the VM failed to boot or lost its console (virtme-ng exit 255)" ;;
esac
exit $rc
