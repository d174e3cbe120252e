# Guest script (busybox sh, run by the `ssdlab vm` guest's /init): the Linux kernel's own NVMe/TCP
# target (nvmet) inside the guest, on a null_blk namespace, and the guest's NVMe/TCP host
# connected to it over 127.0.0.1. Saves what nvme-cli reads from it into $SSDLAB_OUT: the
# reference files of this directory (README.md says how to capture them again).
#
# Optional: HOST_PORT and TOKEN (set before this script) make the guest also send
# "hello-from-guest TOKEN" to the host's loopback, port HOST_PORT, over QEMU's user network.
set -e
out=$SSDLAB_OUT
NQN=nqn.2014-08.io.ssdlab:nvmet-reference
. /lib/ssdlab/nvme-tcp.sh

if [ -n "${HOST_PORT:-}" ]; then
    echo "hello-from-guest ${TOKEN:-}" | nc -w 10 10.0.2.2 "$HOST_PORT"
    echo "user network: sent a line to 10.0.2.2:$HOST_PORT"
fi

# The target: subsystem NQN (any host), namespace 1 a 64 MiB memory-backed null_blk disk with
# 4 KiB blocks, a TCP port on 127.0.0.1:4420 (scripts/guest-nvme-tcp.sh).
nvmet_target 127.0.0.1 4420 "$NQN" 64
echo "nvmet: $NQN on tcp 127.0.0.1:4420, namespace 1 = /dev/nullb0 ($(cat /sys/block/nullb0/size) sectors)"

# The host: the same helper /init uses for SSDLAB_DISK_KIND=nvme-tcp (nvme connect -t tcp).
dmesg -c > /dev/null
dev=$(nvme_tcp_connect 127.0.0.1 4420 "$NQN")
ctrl=$(basename "$(ls -d /sys/class/nvme/nvme* | head -n 1)")
echo "connected: controller /dev/$ctrl, namespace $dev"
dmesg -c > "$out/dmesg-connect.txt"

nvme version > "$out/nvme-cli-version.txt"
uname -r > "$out/kernel.txt"
nvme list > "$out/nvme-list.txt"
nvme list -o json > "$out/nvme-list.json"
nvme list-subsys > "$out/nvme-list-subsys.txt"
nvme id-ctrl "/dev/$ctrl" > "$out/id-ctrl.txt"
nvme id-ctrl -H "/dev/$ctrl" > "$out/id-ctrl-H.txt"
nvme id-ctrl -o json "/dev/$ctrl" > "$out/id-ctrl.json"
nvme id-ctrl -b "/dev/$ctrl" > "$out/id-ctrl.bin"
nvme id-ns "$dev" > "$out/id-ns.txt"
nvme id-ns -H "$dev" > "$out/id-ns-H.txt"
nvme id-ns -o json "$dev" > "$out/id-ns.json"
nvme id-ns -b "$dev" > "$out/id-ns.bin"
nvme ns-descs "$dev" > "$out/ns-descs.txt"
nvme ns-descs -o json "$dev" > "$out/ns-descs.json"
nvme discover -t tcp -a 127.0.0.1 -s 4420 > "$out/discover.txt"
nvme discover -t tcp -a 127.0.0.1 -s 4420 -o json > "$out/discover.json"
dmesg -c > "$out/dmesg-discover.txt"   # the discovery controllers `nvme discover` made
# Best effort: log pages and features a host may read (nvmet answers some, rejects others).
nvme smart-log "/dev/$ctrl" > "$out/smart-log.txt" 2>&1 || true
nvme get-feature -f 7 "/dev/$ctrl" > "$out/get-feature-7-num-queues.txt" 2>&1 || true
for f in id-ctrl.bin id-ns.bin; do echo "$f: $(wc -c < "$out/$f") bytes"; done
cat "$out/nvme-list.txt"

# A zoned namespace: a second subsystem on the same port whose namespace is a host-managed
# null_blk disk (64 MiB, 8 MiB zones), which nvmet exposes as a ZNS namespace (CSI 2).
ZNQN=$NQN-zns
nvmet_target 127.0.0.1 4420 "$ZNQN" 64 8
zdev=$(nvme_tcp_connect 127.0.0.1 4420 "$ZNQN")
zctrl=$(basename "$(dirname "$(ls -d /sys/class/nvme/nvme*/subsysnqn | xargs grep -l -x "$ZNQN" | head -n 1)")")
echo "connected: controller /dev/$zctrl, zoned namespace $zdev"
dmesg -c > "$out/zns-dmesg-connect.txt"
nvme zns id-ctrl "/dev/$zctrl" > "$out/zns-id-ctrl.txt"
nvme zns id-ctrl -o json "/dev/$zctrl" > "$out/zns-id-ctrl.json"
nvme zns id-ctrl -o binary "/dev/$zctrl" > "$out/zns-id-ctrl.bin"
nvme zns id-ns "$zdev" > "$out/zns-id-ns.txt"
nvme zns id-ns -H "$zdev" > "$out/zns-id-ns-H.txt"
nvme zns id-ns -o json "$zdev" > "$out/zns-id-ns.json"
nvme zns id-ns -o binary "$zdev" > "$out/zns-id-ns.bin"
nvme id-ns "$zdev" > "$out/zns-nvm-id-ns.txt"
nvme id-ns -o json "$zdev" > "$out/zns-nvm-id-ns.json"
nvme id-ns -b "$zdev" > "$out/zns-nvm-id-ns.bin"
nvme ns-descs "$zdev" > "$out/zns-ns-descs.txt"
nvme zns report-zones "$zdev" > "$out/zns-report-zones.txt"
nvme zns report-zones -o json "$zdev" > "$out/zns-report-zones.json"
blkzone report "$zdev" > "$out/zns-blkzone-report.txt"
for f in zns-id-ctrl.bin zns-id-ns.bin zns-nvm-id-ns.bin; do echo "$f: $(wc -c < "$out/$f") bytes"; done
nvme disconnect -n "$ZNQN" > /dev/null
dmesg -c > /dev/null

# I/O through the whole path: fio writes 8 MiB and reads every block back with its checksum.
fio --name=verify --filename="$dev" --size=8m --bs=4k --rw=randwrite --ioengine=libaio --iodepth=8 --direct=1 \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --randrepeat=1 --output-format=json --output="$out/fio.json"
echo "fio verify done"

# Disconnect here (finish would too) to keep the kernel's messages of it.
nvme disconnect -n "$NQN" > "$out/disconnect.txt"
dmesg -c > "$out/dmesg-disconnect.txt"
echo "capture done"
