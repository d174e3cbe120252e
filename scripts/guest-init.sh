#!/bin/busybox sh
# /init of the `ssdlab vm` guest (built into the initramfs by scripts/build-guest.sh).
#
# `ssdlab vm` appends a second cpio archive with /ssdlab/job/: `env` (SSDLAB_MODE = fio, script
# or probe; SSDLAB_DISK_KIND = nvme, virtio, nvme-tcp or none; SSDLAB_NET = 1 for the network;
# SSDLAB_NVME_TCP = "TRADDR PORT SUBNQN" for nvme-tcp; SSDLAB_PMEM_BYTES for an emulated NVDIMM,
# set up as an fsdax /dev/pmem0 in $SSDLAB_PMEM) and the workload (job.fio or run.sh).
# Progress lines start with "ssdlab-guest:" on the console (ttyS0); the workload's results
# (everything in /ssdlab/out) go to the host as a base64 tar between two marker lines on ttyS1.
# Then the guest syncs, unmounts, disconnects its NVMe/TCP controllers and powers off.
#
# The status on the results' end line is the workload's exit status, or: 254 the disk did not
# appear, 253 unknown mode, 252 the NVMe/TCP connect failed, 251 the network did not come up,
# 250 the NVDIMM did not become an fsdax /dev/pmem0.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
# The initramfs has no /dev/console node: take the console from devtmpfs.
exec </dev/console >/dev/console 2>&1
say() { echo "ssdlab-guest: $*  [uptime $(cut -d' ' -f1 /proc/uptime) s]"; }
. /lib/ssdlab/nvme-tcp.sh

finish() {  # $1: status line for the host; results to ttyS1, then power off
    sync
    # Whatever the workload left mounted is unmounted before power-off (a clean shutdown).
    for m in $(awk '$2 ~ /^\/mnt/ {print $2}' /proc/mounts | sort -r); do
        umount "$m" 2>/dev/null || say "could not unmount $m"
    done
    sync
    # NVMe over fabrics controllers (the disk's, or a script's) are disconnected, so that the
    # target sees the host leave rather than a connection drop.
    if [ -e /sys/module/nvme_fabrics ] && ls /sys/class/nvme/ 2>/dev/null | grep -q .; then
        nvme_tcp_disconnect_all
        say "nvme-tcp: disconnected"
    fi
    stty -F /dev/ttyS1 raw -echo 2>/dev/null
    {
        echo "SSDLAB-RESULTS-BEGIN"
        (cd /ssdlab/out && tar c .) | base64
        echo "SSDLAB-RESULTS-END $1"
    } > /dev/ttyS1
    say "powering off"
    poweroff -f
    sleep 60
}

pmem_fsdax() {  # QEMU's label-less NVDIMM as an fsdax namespace: /dev/pmem0 that ext4 mounts -o dax
    modprobe -a nfit nd_pmem || { echo "modprobe nfit nd_pmem failed"; return 1; }
    nd=/sys/bus/nd/devices
    n=0
    while [ ! -e $nd/namespace0.0 ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    [ -e $nd/namespace0.0 ] || { echo "no NVDIMM namespace (nd devices: $(ls $nd 2>&1 | tr '\n' ' '))"; return 1; }
    # Without a label area the namespace is raw, and a raw namespace has no struct pages, so the
    # kernel refuses DAX on it ("DAX unsupported by block device"). What `ndctl create-namespace
    # -f -e namespace0.0 -m fsdax` does, through sysfs: detach the namespace, give the region's
    # pfn seed a UUID, the "pmem" memmap (struct pages on the NVDIMM itself, ndctl's default)
    # and the namespace, and bind it; its info block goes at the namespace's start.
    pfn=$(cat $nd/region0/pfn_seed) && [ -n "$pfn" ] || { echo "region0 has no pfn seed"; return 1; }
    { echo namespace0.0 > /sys/bus/nd/drivers/nd_pmem/unbind &&
      cat /proc/sys/kernel/random/uuid > $nd/$pfn/uuid &&
      echo pmem > $nd/$pfn/mode &&
      echo namespace0.0 > $nd/$pfn/namespace &&
      echo "$pfn" > /sys/bus/nd/drivers/nd_pmem/bind; } 2>&1 || { echo "fsdax set-up of $pfn failed: $(dmesg | tail -5 | tr '\n' ' ')"; return 1; }
    n=0
    while [ "$(cat /sys/block/pmem0/queue/dax 2>/dev/null)" != 1 ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    [ "$(cat /sys/block/pmem0/queue/dax 2>/dev/null)" = 1 ] || { echo "/dev/pmem0 has no DAX: $(dmesg | tail -5 | tr '\n' ' ')"; return 1; }
}

. /ssdlab/job/env 2>/dev/null || { say "no job in the initramfs"; poweroff -f; }
mkdir -p /ssdlab/out
if [ "$SSDLAB_MODE" = probe ]; then
    say "probe ok"
    finish "status=0"
fi

if [ "${SSDLAB_NET:-0}" = 1 ] || [ "$SSDLAB_DISK_KIND" = nvme-tcp ]; then
    if ! why=$(net_up 2>&1); then
        say "network: $why"
        finish "status=251 no-network"
    fi
    say "network: eth0 $SSDLAB_GUEST_IP/24 up (the host is 10.0.2.2)"
fi

pmem=""
if [ -n "${SSDLAB_PMEM_BYTES:-}" ]; then
    if ! why=$(pmem_fsdax 2>&1); then
        say "nvdimm: $why"
        echo "$why" > /ssdlab/out/pmem-error.txt
        finish "status=250 no-pmem"
    fi
    pmem=/dev/pmem0
    say "nvdimm: $pmem fsdax, $(($(cat /sys/block/pmem0/size) / 2048)) MiB"
fi

case "$SSDLAB_DISK_KIND" in
    virtio) modprobe -a virtio_pci virtio_blk || say "modprobe virtio_blk failed"; disk=/dev/vda ;;
    nvme-tcp)
        # shellcheck disable=SC2086 -- three words: address, port, subsystem NQN
        set -- $SSDLAB_NVME_TCP
        say "nvme-tcp: connecting to $3 at $1:$2"
        if ! disk=$(nvme_tcp_connect "$@" 2>/tmp/nvme-why.txt); then
            say "nvme-tcp: connect failed: $(tr '\n' ' ' </tmp/nvme-why.txt)"
            cp /tmp/nvme-why.txt /ssdlab/out/nvme-connect-error.txt
            finish "status=252 nvme-tcp-connect-failed"
        fi
        set -- ;;
    none) disk="" ;;
    *) disk=/dev/nvme0n1 ;;
esac
if [ -n "$disk" ]; then
    n=0
    while [ ! -b "$disk" ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    if [ ! -b "$disk" ]; then
        say "disk $disk did not appear"
        cat /proc/partitions
        finish "status=254 no-disk"
    fi
    say "disk $disk ready ($(cat /sys/block/${disk#/dev/}/size) sectors); workload start"
else
    say "no disk; workload start"
fi
export SSDLAB_DISK=$disk SSDLAB_OUT=/ssdlab/out SSDLAB_PMEM=$pmem

# Debian's busybox runs its own applets before programs on PATH (mke2fs would be busybox's): a
# real tool that has an applet's name is called through a function of that name (functions
# come first), defined in /ssdlab/tools.sh, which scripts run with.
: > /ssdlab/tools.sh
for t in /usr/bin/* /usr/sbin/*; do
    name=${t##*/}
    [ -x "$t" ] && [ -L "/bin/$name" ] && echo "$name() { $t \"\$@\"; }" >> /ssdlab/tools.sh
done

set -o pipefail
case "$SSDLAB_MODE" in
    fio)
        # Options before the job file are defaults the job may override: the disk, libaio, O_DIRECT.
        fio --output-format=json --output=/ssdlab/out/fio.json --filename="$disk" --ioengine=libaio --direct=1 \
            /ssdlab/job/job.fio 2>&1 | tee /ssdlab/out/output.txt
        status=$? ;;
    script)
        (cd /tmp && sh -c '. /ssdlab/tools.sh; . /ssdlab/job/run.sh') 2>&1 | tee /ssdlab/out/output.txt
        status=$? ;;
    *)
        say "unknown mode $SSDLAB_MODE"; status=253 ;;
esac
say "workload done (exit status $status)"
finish "status=$status"
