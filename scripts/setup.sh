#!/usr/bin/env bash
# Install, idempotently, everything scx_latcfs needs to build and to run its
# VM tests on a Debian bookworm machine without sched_ext. Run it as root
# (it installs packages; `sudo` is only one way to be root):
#   - clang-19 and the -dev packages that libbpf-sys and the BPF build need,
#     and `clang` on PATH (a link to clang-19 unless there is one), which
#     scx_utils' build runs when the upstream peers are built;
#   - hackbench (rt-tests) and stress-ng, the workloads the tests drive;
#     bpftool and matplotlib for the benchmark suite's BPF costs and charts;
#   - qemu-system-x86 from bookworm-backports and virtme-ng (PyPI, in a venv),
#     plus udev, without which the guest cannot find its virtio console and
#     the command's output and exit status are lost, and busybox, from which
#     virtme-ng builds the initramfs that Debian's modular kernels need;
#   - a Debian kernel with CONFIG_SCHED_CLASS_EXT=y from trixie-backports,
#     chosen by query (newest generic amd64 flavour), extracted without its
#     maintainer scripts, then depmod'ed; and the newest 6.17 one as well,
#     an older series for the compatibility boots;
#   - a 6.12 guest kernel with sched_ext, which Debian does not ship:
#     scripts/build-kernel.sh builds it from Debian's source (or takes it
#     from its cache or seed; see there).
# It ends by checking every command the scripts call (scripts/check-deps.sh)
# and by booting each installed kernel once, so that a missing piece shows up
# here, in one line, and not in the middle of the tests.
#
# Environment:
#   LATCFS_KERNEL_ABI  install this ABI (e.g. 6.17.13+deb13-amd64) instead of
#                      the newest one trixie-backports offers.
#   LATCFS_COMPAT_SERIES  also install the newest kernel of this series
#                      (default 6.17; empty: none), for the compatibility boot.
#   LATCFS_KERNEL_612  1 (default): also provide the 6.12 guest kernel that
#                      scripts/build-kernel.sh builds (or seeds); 0: skip it.
#   LATCFS_PREFIX      where the virtme-ng venv lives (default /opt/scx_latcfs).
set -euo pipefail

PREFIX=${LATCFS_PREFIX:-/opt/scx_latcfs}
export DEBIAN_FRONTEND=noninteractive

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages)"
. /etc/os-release
[ "${ID:-}" = debian ] || die "only Debian is supported (this is ${ID:-unknown})"

# --- apt sources: backports at low priority so nothing else upgrades -------
apt_changed=0
src=/etc/apt/sources.list.d/scx-latcfs.sources
want_src="Types: deb
URIs: http://deb.debian.org/debian
Suites: ${VERSION_CODENAME}-backports trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
if [ "$VERSION_CODENAME" = trixie ]; then
	want_src=${want_src/"trixie-backports trixie-backports"/trixie-backports}
fi
if [ "$(cat "$src" 2>/dev/null)" != "$want_src" ]; then
	printf '%s\n' "$want_src" > "$src"
	apt_changed=1
fi
pin=/etc/apt/preferences.d/scx-latcfs
want_pin="Package: *
Pin: release n=trixie-backports
Pin-Priority: 1

Package: *
Pin: release n=${VERSION_CODENAME}-backports
Pin-Priority: 100"
if [ "$(cat "$pin" 2>/dev/null)" != "$want_pin" ]; then
	printf '%s\n' "$want_pin" > "$pin"
	apt_changed=1
fi
stamp=/var/lib/apt/periodic/scx-latcfs-update
if [ $apt_changed = 1 ] || [ -z "$(find "$stamp" -mmin -720 2>/dev/null)" ]; then
	log "apt-get update"
	apt-get update -q >/dev/null
	mkdir -p "$(dirname "$stamp")" && touch "$stamp"
fi

# --- packages ----------------------------------------------------------------
pkgs=(clang-19 llvm-19 libelf-dev zlib1g-dev pkg-config libclang-dev
      rt-tests stress-ng kmod python3-venv util-linux procps udev
      bpftool python3-matplotlib busybox-static)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	apt-get install -y -q "${missing[@]}" >/dev/null
fi
# scx_utils' build script (the upstream peers' build) runs plain `clang`.
if ! command -v clang >/dev/null; then
	log "linking /usr/local/bin/clang to clang-19"
	ln -sf "$(command -v clang-19)" /usr/local/bin/clang
fi
# qemu from backports: bookworm's 7.2 lacks nothing we need, but the
# backported one is what the harness was verified with.
if ! command -v qemu-system-x86_64 >/dev/null; then
	log "installing qemu-system-x86 from ${VERSION_CODENAME}-backports"
	apt-get install -y -q -t "${VERSION_CODENAME}-backports" qemu-system-x86 >/dev/null \
		|| apt-get install -y -q qemu-system-x86 >/dev/null
fi

# --- virtme-ng ----------------------------------------------------------------
if [ ! -x "$PREFIX/venv/bin/vng" ]; then
	log "installing virtme-ng into $PREFIX/venv"
	mkdir -p "$PREFIX"
	python3 -m venv "$PREFIX/venv"
	"$PREFIX/venv/bin/pip" install -q virtme-ng
fi

# --- a sched_ext kernel ----------------------------------------------------------
kconfig_of() { # ABI -> path of its config, if any
	for f in "/boot/config-$1" "/usr/lib/modules/$1/config"; do
		[ -r "$f" ] && { echo "$f"; return 0; }
	done
	return 1
}
kimage_of() { # ABI -> path of its kernel image, if any
	for f in "/boot/vmlinuz-$1" "/usr/lib/modules/$1/vmlinuz"; do
		[ -r "$f" ] && { echo "$f"; return 0; }
	done
	return 1
}

# install_kernel ABI: fetch and extract the kernel of ABI unless it is there,
# then check that it has sched_ext.
install_kernel() {
	local abi=$1 tmp kpkgs part deb cfg
	if kimage_of "$abi" >/dev/null && [ -s "/usr/lib/modules/$abi/modules.dep" ]; then
		log "kernel $abi already installed"
	else
		log "fetching kernel $abi"
		tmp=$(mktemp -d)
		# Newer Debian kernels split the image package into linux-binary,
		# linux-modules and linux-base; older ones ship everything in linux-image.
		kpkgs=("linux-image-$abi")
		for part in binary modules base; do
			apt-cache show "linux-$part-$abi" >/dev/null 2>&1 && kpkgs+=("linux-$part-$abi")
		done
		(cd "$tmp" && chown _apt "$tmp" 2>/dev/null; apt-get download -q "${kpkgs[@]}" >/dev/null)
		for deb in "$tmp"/*.deb; do
			# The maintainer scripts (initramfs, bootloader) fail here and are
			# not needed: virtme-ng boots the image directly.
			dpkg-deb -x "$deb" /
		done
		rm -rf "$tmp"
		depmod "$abi"
	fi
	cfg=$(kconfig_of "$abi") || die "kernel $abi has no config file"
	grep -q '^CONFIG_SCHED_CLASS_EXT=y' "$cfg" || die "kernel $abi lacks CONFIG_SCHED_CLASS_EXT=y"
	log "sched_ext kernel: $(kimage_of "$abi")"
}

abi=${LATCFS_KERNEL_ABI:-}
if [ -z "$abi" ]; then
	ver=$(apt-cache madison linux-image-amd64 | awk -F'|' '$3 ~ /trixie-backports/ {gsub(/ /,"",$2); print $2; exit}')
	[ -n "$ver" ] || die "trixie-backports offers no linux-image-amd64"
	abi=$(apt-cache show "linux-image-amd64=$ver" | sed -n 's/^Depends:.*linux-image-\([^ ,]*-amd64\).*/\1/p' | head -n1)
	[ -n "$abi" ] || die "cannot tell the kernel ABI of linux-image-amd64 $ver"
fi
install_kernel "$abi"

# The compatibility boot of scripts/test.sh runs an older series too: the
# newest generic image of it that the archive still has.
series=${LATCFS_COMPAT_SERIES-6.17}
if [ -n "$series" ]; then
	old=$(apt-cache search --names-only "^linux-image-${series//./\\.}\.[0-9]+\+deb[0-9]+-amd64\$" |
		awk '{print $1}' | sed 's/^linux-image-//' | sort -V | tail -n1)
	[ -n "$old" ] || die "the archive has no generic linux-image of series $series"
	install_kernel "$old"
fi

# --- a 6.12 kernel ------------------------------------------------------------
# Debian's 6.12 images lack sched_ext: scripts/build-kernel.sh builds one
# from linux-source-6.12 (bookworm-security), or takes it from its cache or
# seed, and prints its path.
here=$(cd "$(dirname "$0")/.." && pwd)
k612=""
if [ "${LATCFS_KERNEL_612-1}" = 1 ]; then
	k612=$("$here/scripts/build-kernel.sh") || die "no 6.12 guest kernel (scripts/build-kernel.sh, above)"
fi

# --- check -------------------------------------------------------------------
"$here/scripts/check-deps.sh" || die "commands are still missing after the install (above)"
# Boot each kernel once with a trivial command: what the tests do first.
boot_check() { # KERNEL-IMAGE
	local out err rc=0
	out=$(mktemp) err=$(mktemp)
	LATCFS_KERNEL=$1 LATCFS_VM_TIMEOUT=300 LATCFS_OUT=$(mktemp -d) "$here/scripts/vm-run.sh" --cpus 1 --memory 1G \
		-- cat /sys/kernel/sched_ext/state > "$out" 2> "$err" < /dev/null || rc=$?
	if [ $rc -ne 0 ] || ! grep -qx disabled "$out"; then
		why=$(grep -v '^[[:space:]]*$' "$err" | tail -n1)
		rm -f "$out" "$err"
		die "the guest kernel $1 did not boot (exit $rc): ${why:-no output}"
	fi
	rm -f "$out" "$err"
	log "guest boot checked: $1"
}
boot_check "$(kimage_of "$abi")"
[ -z "$series" ] || boot_check "$(kimage_of "$old")"
[ -z "$k612" ] || boot_check "$k612"
