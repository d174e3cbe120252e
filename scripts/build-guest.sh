#!/usr/bin/env bash
# Build the guest `ssdlab vm` boots (docs/vm.md, "How the guest is built"), from Debian packages
# only: the kernel of linux-image-cloud-amd64 (fetched with apt-get download, unpacked with
# dpkg-deb -x; NVMe, ext4 and the serial console are built in) and an initramfs of busybox-static
# plus host binaries (fio, e2fsprogs, xfsprogs, btrfs-progs, nvme-cli, util-linux's blkzone and
# blkdiscard) with the libraries ldd lists, the kernel modules for virtio disks, XFS, btrfs (zoned
# mode on a zoned namespace), the network (virtio-net),
# NVMe over TCP (host: nvme-tcp; target: nvmet-tcp, with null_blk for its namespaces) and an
# emulated NVDIMM (nfit, nd_pmem: /dev/pmem0 for ext4 -o dax), GNU grep, tar, coreutils and the
# FlacFS LD_PRELOAD shim for the flac study's guest-dax step, and scripts/guest-init.sh as /init.
#
# The result is cached in target/guest/ (or $SSDLAB_GUEST_DIR): vmlinuz, initramfs.cpio and
# inputs.txt, the list of everything it was built from (this script, the init and its NVMe/TCP
# helpers, the kernel package, every copied file's size and mtime). A run whose inputs match is
# a no-op; any change rebuilds. `bash scripts/build-guest.sh --force` rebuilds anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${SSDLAB_GUEST_DIR:-$ROOT/target/guest}
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
# Host packages: QEMU to boot the guest, and what goes into it. No recommends: QEMU's GUI and
# firmware extras are not needed for a serial-console guest.
GUEST_PACKAGES=(qemu-system-x86 busybox-static fio e2fsprogs xfsprogs btrfs-progs nvme-cli util-linux cpio)
missing=()
for p in "${GUEST_PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "build-guest: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The kernel: the cloud flavour's meta package names the versioned image package it depends on.
META=linux-image-cloud-amd64
if ! apt-cache show "$META" >/dev/null 2>&1; then
    $SUDO apt-get update -qq
fi
meta_version=$(apt-cache policy "$META" | awk '/Candidate:/ {print $2}')
[ -n "$meta_version" ] && [ "$meta_version" != "(none)" ] || { echo "build-guest: apt knows no $META" >&2; exit 1; }

# Host tools copied into the guest (full paths: the guest calls them by path, see guest-init.sh).
TOOLS=(/usr/bin/fio /usr/sbin/mke2fs /usr/sbin/mkfs.ext4 /usr/sbin/e2fsck /usr/sbin/fsck.ext4 /usr/sbin/tune2fs
       /usr/sbin/dumpe2fs /usr/sbin/mkfs.xfs /usr/sbin/xfs_repair /usr/sbin/xfs_db
       /usr/sbin/mkfs.btrfs /usr/bin/btrfs /usr/sbin/nvme /usr/sbin/blkzone /usr/sbin/blkdiscard)
BUSYBOX=/bin/busybox
# The flac study's guest-dax step runs the programs its shim step runs on the host, as the same
# GNU binaries (busybox's applets are static, so LD_PRELOAD cannot reach them, and they are other
# programs). They go to /usr/lib/ssdlab/gnu/, off PATH, so that guest scripts keep busybox's
# applets unless they ask for these by path.
GNU_TOOLS=(/usr/bin/grep /usr/bin/tar /usr/bin/sort /usr/bin/dd /usr/bin/cp /usr/bin/rm /usr/bin/mkdir /usr/bin/sha256sum
           /usr/bin/true)
# The FlacFS shim (built by setup before the guest: cargo build --release -p ssdlab-flac-shim),
# if it is there; $SSDLAB_FLAC_SHIM names another build, as for the host's runs.
SHIM=${SSDLAB_FLAC_SHIM:-$ROOT/target/release/libflacfs.so}
SHIMS=()
if [ -f "$SHIM" ]; then
    SHIMS=("$SHIM")
else
    echo "build-guest: no FlacFS shim at $SHIM; the guest will have none (flac's guest-dax step then skips itself and says why)"
fi
# Kernel modules (with the modules they depend on): virtio-blk disks and XFS; virtio-net (with
# net_failover, failover) for QEMU's user network; the NVMe/TCP host (nvme-tcp, nvme-fabrics;
# nvme-core is built in); the kernel's own NVMe target, nvmet and nvmet-tcp (with configfs), a
# reference to compare ssdlab's target with; null_blk, a RAM (or zoned) disk for its namespaces;
# nfit (the ACPI NVDIMM firmware table QEMU's nvdimm device describes) and nd_pmem (with
# libnvdimm and nd_btt), which make the NVDIMM /dev/pmem0.
MODULES=(virtio_pci virtio_blk xfs btrfs virtio_net nvme-tcp nvmet-tcp null_blk nfit nd_pmem)

libs_of() { ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u; }
mapfile -t LIBS < <(libs_of "${TOOLS[@]}" "${GNU_TOOLS[@]}" "${SHIMS[@]}")
# Real files (ldd names links): the guest needs both the link name and its target.
inputs() {
    echo "script $(sha256sum scripts/build-guest.sh | cut -d' ' -f1)"
    echo "init $(sha256sum scripts/guest-init.sh | cut -d' ' -f1)"
    echo "nvme-tcp $(sha256sum scripts/guest-nvme-tcp.sh | cut -d' ' -f1)"
    echo "kernel $META $meta_version"
    for f in "$BUSYBOX" "${TOOLS[@]}" "${GNU_TOOLS[@]}" "${SHIMS[@]}" "${LIBS[@]}"; do
        echo "file $f $(stat -L -c '%s %Y' "$f")"
    done
}
want=$(inputs)
if [ $FORCE -eq 0 ] && [ -f "$OUT/inputs.txt" ] && [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initramfs.cpio" ] \
   && [ "$(cat "$OUT/inputs.txt")" = "$want" ]; then
    echo "build-guest: guest up to date in $OUT"
    exit 0
fi

echo "build-guest: building the guest in $OUT (kernel $META $meta_version)"
mkdir -p "$OUT/debs"
rm -f "$OUT/inputs.txt"   # written last: an interrupted build is not taken as finished
work=$(mktemp -d "$OUT/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# apt-get download writes into the current directory; as root it warns that the _apt user
# cannot write there, which is harmless.
fetch() { (cd "$OUT/debs" && apt-get download -q "$1" 2>&1 | grep -v -e "unsandboxed" -e "^Get:" -e "^Fetched" || true); }
deb_of() { ls -t "$OUT/debs/$1"_"${2//:/%3a}"_*.deb 2>/dev/null | head -1; }
[ -n "$(deb_of "$META" "$meta_version")" ] || fetch "$META=$meta_version"
meta_deb=$(deb_of "$META" "$meta_version")
[ -n "$meta_deb" ] || { echo "build-guest: apt-get download $META failed" >&2; exit 1; }
image_pkg=$(dpkg-deb -f "$meta_deb" Depends | tr ',' '\n' | sed -n 's/^ *\(linux-image-[0-9][^ ]*\) (= \(.*\))/\1 \2/p' | head -1)
[ -n "$image_pkg" ] || { echo "build-guest: cannot read the kernel package from $META's Depends" >&2; exit 1; }
read -r image_name image_version <<<"$image_pkg"
[ -n "$(deb_of "$image_name" "$image_version")" ] || fetch "$image_name=$image_version"
image_deb=$(deb_of "$image_name" "$image_version")
[ -n "$image_deb" ] || { echo "build-guest: apt-get download $image_name failed" >&2; exit 1; }
dpkg-deb -x "$image_deb" "$work/kernel"
kver=${image_name#linux-image-}
cp "$work/kernel/boot/vmlinuz-$kver" "$work/vmlinuz"

# The initramfs tree.
r="$work/root"
mkdir -p "$r"/{bin,sbin,usr/bin,usr/sbin,lib/ssdlab,etc/nvme,proc,sys,dev,tmp,mnt,run,ssdlab}
cp "$BUSYBOX" "$r/bin/busybox"
for a in $("$BUSYBOX" --list); do
    [ -e "$r/bin/$a" ] || ln -s busybox "$r/bin/$a"
done
ln -s ../bin/busybox "$r/sbin/modprobe"   # where the kernel runs it to load a module on demand
copy() {  # a host file at the path ldd or the ELF header names, links dereferenced
    mkdir -p "$r$(dirname "$1")"
    cp -L "$1" "$r$1"
}
for f in "${TOOLS[@]}" "${LIBS[@]}"; do copy "$f"; done
mkdir -p "$r/usr/lib/ssdlab/gnu"
for f in "${GNU_TOOLS[@]}"; do cp -L "$f" "$r/usr/lib/ssdlab/gnu/"; done
for f in "${SHIMS[@]}"; do cp -L "$f" "$r/usr/lib/ssdlab/libflacfs.so"; done

# Modules with the modules they depend on, in the kernel's own layout, indexed by busybox's
# depmod: init loads the virtio ones with modprobe when the disk is virtio, and the kernel asks
# modprobe for XFS when a script mounts one (loading XFS at boot would cost ~2 s under TCG).
mods="$work/kernel/lib/modules/$kver"
declare -A seen=()
add_module() {
    local name=$1 file dep
    [ -n "${seen[$name]:-}" ] && return
    seen[$name]=1
    file=$(find "$mods" -name "$name.ko" -o -name "${name//_/-}.ko" | head -1)
    [ -n "$file" ] || { echo "build-guest: module $name not in $image_name" >&2; exit 1; }
    for dep in $(strings "$file" | sed -n 's/^depends=//p' | tr ',' ' '); do add_module "$dep"; done
    mkdir -p "$r/lib/modules/$kver/$(dirname "${file#"$mods"/}")"
    cp "$file" "$r/lib/modules/$kver/${file#"$mods"/}"
}
for m in "${MODULES[@]}"; do add_module "$m"; done
cp "$mods"/modules.order "$mods"/modules.builtin "$r/lib/modules/$kver/"
"$BUSYBOX" depmod -b "$r" "$kver"
cp scripts/guest-init.sh "$r/init"
chmod 755 "$r/init"
cp scripts/guest-nvme-tcp.sh "$r/lib/ssdlab/nvme-tcp.sh"
echo "$kver" > "$r/lib/ssdlab/kernel-version"

# Uncompressed: under TCG the kernel unpacks it in half the time a gzip one takes.
(cd "$r" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) > "$work/initramfs.cpio"
mv "$work/vmlinuz" "$OUT/vmlinuz"
mv "$work/initramfs.cpio" "$OUT/initramfs.cpio"
rm -f "$OUT/initramfs.cpio.gz"
echo "$want" > "$OUT/inputs.txt"
echo "build-guest: $OUT/vmlinuz ($kver), $OUT/initramfs.cpio ($(du -h "$OUT/initramfs.cpio" | cut -f1))"
