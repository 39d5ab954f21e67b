#!/usr/bin/env bash
# Build a Linux 6.12 guest kernel with sched_ext from Debian's source, and
# cache it. Debian's own 6.12 images are built without sched_ext, while 6.12
# is the long-term kernel that enterprise distributions ship with it, and the
# oldest one scx_latcfs supports: the tests boot this image beside 6.17 and
# 7.3 (scripts/test.sh).
#
# usage: scripts/build-kernel.sh [--print-path] [--force] [--no-seed] [--jobs N]
#   --print-path  print the cached image's path and exit; exit 1 if there
#                 is none for the current source version and config.
#   --force       build from source even if the image is cached.
#   --no-seed     do not take the image from LATCFS_KERNEL_SEED.
#   --jobs N      make -jN (default: the number of CPUs).
#
# What it builds: the source package linux-source-6.12 (bookworm-security;
# apt's candidate version) with scripts/kernel/6.12.config, bzImage only: no
# modules and no initramfs. Everything the guest needs is built in: sched_ext
# with cgroup support, BTF, the BPF JIT, cpusets, virtio-pci, 9p over virtio,
# overlayfs and devtmpfs for virtme-ng, HZ=250 like Debian's kernels. The
# config came from virtme-ng's helper (`vng --kconfig`, which starts from
# x86_64_defconfig and adds the guest's needs) plus the items REQUIRED names
# below, with DRM, sound, USB and wireless turned off; the build checks that
# `make olddefconfig` kept every REQUIRED item.
#
# The cache: $LATCFS_KERNEL_CACHE/linux-VERSION-CONFIGSHA/ holds bzImage,
# the config it was built with, and build.txt (how it got there, and the
# build's wall time). A new source version or config builds a new image;
# nothing else does.
#
# Seeding: a build takes about 10 minutes on 2 cores (599 s measured,
# download and unpacking included), a sixth of CI's budget on every fresh
# machine. When LATCFS_KERNEL_SEED holds an image built from the same
# version with the same config (its SHA256SUMS check out, its config is ours
# byte for byte, and its bzImage says the same version), it is copied into
# the cache instead. --force --no-seed proves the build itself.
#
# Environment:
#   LATCFS_KERNEL_CACHE  the cache directory (default /var/cache/scx_latcfs)
#   LATCFS_KERNEL_SEED   a directory with bzImage, config and SHA256SUMS
#                        (default ../shared/kernels/<version> beside the
#                        checkout, when it exists)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
config=$here/scripts/kernel/6.12.config
pkg=linux-source-6.12
cache=${LATCFS_KERNEL_CACHE:-/var/cache/scx_latcfs}

log() { printf 'build-kernel: %s\n' "$*" >&2; }
die() { printf 'build-kernel: error: %s\n' "$*" >&2; exit 1; }

# What scx_latcfs and its VM tests need from the kernel.
REQUIRED=(SCHED_CLASS_EXT EXT_GROUP_SCHED CGROUP_SCHED FAIR_GROUP_SCHED CPUSETS
	BPF_SYSCALL BPF_JIT DEBUG_INFO_BTF BPF_EVENTS HOTPLUG_CPU MAGIC_SYSRQ HZ_250
	SCHED_SMT SCHED_MC NUMA VIRTIO_PCI VIRTIO_CONSOLE NET_9P_VIRTIO 9P_FS
	OVERLAY_FS DEVTMPFS TMPFS)

print_path=0 force=0 seed_ok=1 jobs=$(nproc)
while [ $# -gt 0 ]; do
	case "$1" in
	--print-path) print_path=1; shift ;;
	--force) force=1; shift ;;
	--no-seed) seed_ok=0; shift ;;
	--jobs) jobs=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument: $1 (see --help)" ;;
	esac
done

check_config() { # CONFIG-FILE: every REQUIRED item is =y
	local missing=() i
	for i in "${REQUIRED[@]}"; do
		grep -q "^CONFIG_$i=y\$" "$1" || missing+=("CONFIG_$i")
	done
	[ ${#missing[@]} -eq 0 ] || die "$1 lacks ${missing[*]}"
}
check_config "$config"

# The version apt would fetch: 6.12.118-1~deb12u1 -> 6.12.118.
pkgver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
[ -n "$pkgver" ] && [ "$pkgver" != "(none)" ] ||
	die "apt knows no $pkg: add bookworm-security to apt's sources and run apt-get update"
version=${pkgver%%-*}
sha=$(sha256sum "$config" | cut -c1-12)
dir=$cache/linux-$version-$sha
image=$dir/bzImage

if [ $print_path = 1 ]; then
	[ -r "$image" ] || die "no 6.12 kernel cached at $dir: run scripts/build-kernel.sh"
	echo "$image"
	exit 0
fi
if [ $force = 0 ] && [ -r "$image" ]; then
	log "cached: $image ($(head -n1 "$dir/build.txt" 2>/dev/null))"
	echo "$image"
	exit 0
fi
mkdir -p "$cache"

# bzImage's header names its version: "... version 6.12.118 (root@vm) #1 ...".
image_version() {
	python3 - "$1" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
off = struct.unpack_from("<H", data, 0x20e)[0] + 0x200
print(data[off:data.index(b"\0", off)].decode().split()[0])
EOF
}

seed=${LATCFS_KERNEL_SEED:-$(dirname "$here")/shared/kernels/$version}
if [ $force = 0 ] && [ $seed_ok = 1 ] && [ -r "$seed/bzImage" ]; then
	why=""
	if ! (cd "$seed" && sha256sum --quiet -c SHA256SUMS >/dev/null 2>&1); then
		why="its SHA256SUMS do not check out"
	elif ! cmp -s "$seed/config" "$config"; then
		why="it was built with another config"
	elif [ "$(image_version "$seed/bzImage")" != "$version" ]; then
		why="it is not version $version"
	fi
	if [ -z "$why" ]; then
		tmp=$(mktemp -d "$cache/.seed.XXXXXX")
		chmod 755 "$tmp"
		cp "$seed/bzImage" "$seed/config" "$tmp/"
		echo "seeded from $seed (same version and config); not built here" > "$tmp/build.txt"
		rm -rf "$dir" && mv "$tmp" "$dir"
		log "seeded $image from $seed"
		echo "$image"
		exit 0
	fi
	log "not seeding from $seed: $why"
fi

# --- build from source --------------------------------------------------------
[ "$(id -u)" -eq 0 ] || die "must run as root to install the build's packages"
deps=(build-essential flex bison bc libssl-dev libelf-dev dwarves cpio kmod xz-utils python3)
missing=()
for p in "${deps[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi

work=$(mktemp -d "$cache/.build.XXXXXX")
chmod 755 "$work" # apt-get download fetches as the _apt user
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
log "fetching $pkg $pkgver"
(cd "$work" && apt-get download -q "$pkg=$pkgver" >/dev/null)
dpkg-deb -x "$work"/"$pkg"_*.deb "$work/deb"
log "unpacking"
tar -C "$work" -xf "$work/deb/usr/src/$pkg.tar.xz"
rm -rf "$work/deb" "$work"/*.deb
src=$work/$pkg
cp "$config" "$src/.config"
make -s -C "$src" olddefconfig
check_config "$src/.config"
log "make -j$jobs bzImage (about 10 minutes on 2 CPUs)"
if ! make -C "$src" -j"$jobs" bzImage > "$work/make.log" 2>&1; then
	tail -n 20 "$work/make.log" >&2
	die "the kernel build failed (the last lines of its log are above)"
fi
secs=$(($(date +%s) - start))
[ "$(image_version "$src/arch/x86/boot/bzImage")" = "$version" ] ||
	die "the built image does not say version $version"
mkdir -p "$work/out" && chmod 755 "$work/out"
cp "$src/arch/x86/boot/bzImage" "$work/out/"
cp "$config" "$work/out/config"
echo "built from $pkg $pkgver with make -j$jobs in $secs s on $(nproc) CPUs ($(date -u +%F))" > "$work/out/build.txt"
rm -rf "$dir" && mv "$work/out" "$dir"
log "built $image in $secs s"
echo "$image"
