#!/bin/busybox sh
# /init of the `ssdlab vm` guest (built into the initramfs by scripts/build-guest.sh).
#
# `ssdlab vm` appends a second cpio archive with /ssdlab/job/: `env` (SSDLAB_MODE = fio, script
# or probe; SSDLAB_DISK_KIND = nvme or virtio) and the workload (job.fio or run.sh). Progress
# lines start with "ssdlab-guest:" on the console (ttyS0); the workload's results (everything in
# /ssdlab/out) go to the host as a base64 tar between two marker lines on ttyS1. Then the guest
# syncs, unmounts and powers off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
# The initramfs has no /dev/console node: take the console from devtmpfs.
exec </dev/console >/dev/console 2>&1
say() { echo "ssdlab-guest: $*  [uptime $(cut -d' ' -f1 /proc/uptime) s]"; }

finish() {  # $1: status line for the host; results to ttyS1, then power off
    sync
    # Whatever the workload left mounted is unmounted before power-off (a clean shutdown).
    for m in $(awk '$2 ~ /^\/mnt/ {print $2}' /proc/mounts | sort -r); do
        umount "$m" 2>/dev/null || say "could not unmount $m"
    done
    sync
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

case "$SSDLAB_DISK_KIND" in
    virtio) modprobe -a virtio_pci virtio_blk || say "modprobe virtio_blk failed"; disk=/dev/vda ;;
    *) disk=/dev/nvme0n1 ;;
esac
n=0
while [ ! -b "$disk" ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
if [ ! -b "$disk" ]; then
    say "disk $disk did not appear"
    cat /proc/partitions
    finish "status=254 no-disk"
fi
export SSDLAB_DISK=$disk SSDLAB_OUT=/ssdlab/out
say "disk $disk ready ($(cat /sys/block/${disk#/dev/}/size) sectors); workload start"

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
