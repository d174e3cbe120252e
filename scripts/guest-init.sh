#!/bin/busybox sh
# /init of the `ssdlab vm` guest (built into the initramfs by scripts/build-guest.sh).
#
# `ssdlab vm` appends a second cpio archive with /ssdlab/job/: `env` (SSDLAB_MODE = fio, script
# or probe; SSDLAB_DISK_KIND = nvme, virtio, nvme-tcp or none; SSDLAB_NET = 1 for the network;
# SSDLAB_NVME_TCP = "TRADDR PORT SUBNQN" for nvme-tcp) and the workload (job.fio or run.sh).
# Progress lines start with "ssdlab-guest:" on the console (ttyS0); the workload's results
# (everything in /ssdlab/out) go to the host as a base64 tar between two marker lines on ttyS1.
# Then the guest syncs, unmounts, disconnects its NVMe/TCP controllers and powers off.
#
# The status on the results' end line is the workload's exit status, or: 254 the disk did not
# appear, 253 unknown mode, 252 the NVMe/TCP connect failed, 251 the network did not come up.
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
export SSDLAB_DISK=$disk SSDLAB_OUT=/ssdlab/out

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
