# NVMe/TCP host helpers of the `ssdlab vm` guest (built into the initramfs as
# /lib/ssdlab/nvme-tcp.sh by scripts/build-guest.sh). /init sources them to attach the guest's
# disk over the network (SSDLAB_DISK_KIND=nvme-tcp); guest scripts may source them too.
#
#   net_up                         virtio-net loaded, lo up, eth0 10.0.2.15/24 (QEMU's user
#                                  network: the host's loopback is 10.0.2.2), default route
#   nvme_tcp_connect ADDR PORT NQN connect (nvme-cli, else /dev/nvme-fabrics), wait for the
#                                  namespace's block device and print its path
#   nvme_tcp_disconnect_all        disconnect every fabrics controller
#   nvmet_target ADDR PORT NQN [MIB [ZONE_MIB]]
#                                  the kernel's own NVMe/TCP target (nvmet) on ADDR:PORT:
#                                  subsystem NQN, any host, namespace 1 a memory-backed
#                                  null_blk disk of MIB MiB (64) with 4 KiB blocks; with
#                                  ZONE_MIB a zoned one (host-managed, zones of ZONE_MIB MiB:
#                                  nvmet makes it a ZNS namespace). Another subsystem on the
#                                  same ADDR:PORT joins its port.
#   nvmet_wait_host PORT [SECONDS] until a host has connected to PORT and left again
#
# Each returns non-zero with a reason on stderr when it fails. nvme-cli is /usr/sbin/nvme; the
# host NQN and host ID are fixed (/etc/nvme/hostnqn, hostid) so that targets see the same host
# every run.
SSDLAB_HOSTNQN=${SSDLAB_HOSTNQN:-nqn.2014-08.org.nvmexpress:uuid:5d1ab000-0000-4000-8000-000000000001}
SSDLAB_HOSTID=${SSDLAB_HOSTID:-5d1ab000-0000-4000-8000-000000000001}
SSDLAB_GUEST_IP=${SSDLAB_GUEST_IP:-10.0.2.15}

# (busybox sh: `local` keeps the helpers' variables out of the caller's.)
net_up() {
    local n
    modprobe -a virtio_pci virtio_net 2>/dev/null || { echo "net_up: modprobe virtio_pci virtio_net failed" >&2; return 1; }
    ip link set lo up
    n=0
    while [ ! -e /sys/class/net/eth0 ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
    [ -e /sys/class/net/eth0 ] || { echo "net_up: no eth0 (no NIC: was the guest started with its network on?)" >&2; return 1; }
    ip addr add "$SSDLAB_GUEST_IP/24" dev eth0 2>/dev/null
    ip link set eth0 up || { echo "net_up: cannot bring eth0 up" >&2; return 1; }
    ip route add default via 10.0.2.2 2>/dev/null
    return 0
}

_nvme_host_ids() {
    mkdir -p /etc/nvme
    [ -s /etc/nvme/hostnqn ] || echo "$SSDLAB_HOSTNQN" > /etc/nvme/hostnqn
    [ -s /etc/nvme/hostid ] || echo "$SSDLAB_HOSTID" > /etc/nvme/hostid
}

# The block device of NQN's first namespace: under the subsystem (native multipath, the
# kernel's default) or under the controller (multipath off).
_nvme_tcp_namespace() {
    local s c ns
    for s in /sys/class/nvme-subsystem/*; do
        [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$1" ] || continue
        for c in "$s"/nvme*; do
            case "${c##*/}" in nvme*n*) ;; *) continue ;; esac
            case "${c##*/}" in nvme*c*n*) continue ;; esac
            [ -b "/dev/${c##*/}" ] && { echo "/dev/${c##*/}"; return 0; }
        done
    done
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] && [ "$(cat "$c/transport" 2>/dev/null)" = tcp ] || continue
        for ns in "$c"/nvme*n*; do
            [ -b "/dev/${ns##*/}" ] && { echo "/dev/${ns##*/}"; return 0; }
        done
    done
    return 1
}

nvme_tcp_connect() {  # ADDR PORT NQN
    local rc opts n dev
    [ $# -eq 3 ] || { echo "nvme_tcp_connect: expected ADDR PORT NQN, got '$*'" >&2; return 2; }
    modprobe nvme-tcp 2>/dev/null || { echo "nvme_tcp_connect: modprobe nvme-tcp failed" >&2; return 1; }
    _nvme_host_ids
    if [ -x /usr/sbin/nvme ]; then
        /usr/sbin/nvme connect -t tcp -a "$1" -s "$2" -n "$3" >/tmp/nvme-connect.txt 2>&1
        rc=$?
        if [ $rc -ne 0 ]; then
            echo "nvme_tcp_connect: nvme connect -t tcp -a $1 -s $2 -n $3 failed (exit status $rc): $(tr '\n' ' ' </tmp/nvme-connect.txt)" >&2
            dmesg | grep -i nvme | tail -n 5 >&2
            return 1
        fi
    else
        opts="transport=tcp,traddr=$1,trsvcid=$2,nqn=$3,hostnqn=$(cat /etc/nvme/hostnqn),hostid=$(cat /etc/nvme/hostid)"
        # The kernel answers the write on the same open file ("instance=N,cntlid=M").
        if ! (exec 3<>/dev/nvme-fabrics && echo "$opts" >&3 && cat <&3) >/tmp/nvme-connect.txt 2>&1; then
            echo "nvme_tcp_connect: writing '$opts' to /dev/nvme-fabrics failed" >&2
            dmesg | grep -i nvme | tail -n 5 >&2
            return 1
        fi
    fi
    n=0
    while ! dev=$(_nvme_tcp_namespace "$3") && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    if [ -z "$dev" ]; then
        echo "nvme_tcp_connect: connected to $3 at $1:$2, but no namespace block device appeared within 10 s" >&2
        return 1
    fi
    echo "$dev"
}

nvme_tcp_disconnect_all() {
    local c
    if [ -x /usr/sbin/nvme ]; then
        timeout 30 /usr/sbin/nvme disconnect-all >/dev/null 2>&1 && return 0
    fi
    # Without nvme-cli (or when it failed): each fabrics controller's delete_controller.
    for c in /sys/class/nvme/nvme*; do
        case "$(cat "$c/transport" 2>/dev/null)" in tcp|rdma|fc|loop) echo 1 > "$c/delete_controller" 2>/dev/null ;; esac
    done
    return 0
}

nvmet_target() {  # ADDR PORT NQN [MIB [ZONE_MIB]]
    local i n nb s p
    [ $# -ge 3 ] || { echo "nvmet_target: expected ADDR PORT NQN [MIB [ZONE_MIB]], got '$*'" >&2; return 2; }
    modprobe null_blk nr_devices=0 || return 1   # its disks are made in configfs
    modprobe nvmet-tcp || return 1
    grep -q " /sys/kernel/config " /proc/mounts || mount -t configfs configfs /sys/kernel/config || return 1
    i=0
    while [ -e "/sys/kernel/config/nullb/nullb$i" ]; do i=$((i + 1)); done
    nb=/sys/kernel/config/nullb/nullb$i
    mkdir "$nb" && echo "${4:-64}" > "$nb/size" && echo 4096 > "$nb/blocksize" && echo 1 > "$nb/memory_backed" \
        || { echo "nvmet_target: cannot make null_blk $nb" >&2; return 1; }
    if [ -n "${5:-}" ]; then
        echo 1 > "$nb/zoned" && echo "$5" > "$nb/zone_size" || { echo "nvmet_target: cannot make $nb zoned" >&2; return 1; }
    else
        echo 1 > "$nb/discard"
    fi
    echo 1 > "$nb/power" || { echo "nvmet_target: cannot power on null_blk $nb" >&2; return 1; }
    n=0
    while [ ! -b "/dev/nullb$i" ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
    # Everything not set here is the kernel's default (model "Linux", a random serial number and
    # namespace UUID, the kernel's version as firmware revision).
    s=/sys/kernel/config/nvmet/subsystems/$3
    mkdir "$s" && echo 1 > "$s/attr_allow_any_host" && mkdir "$s/namespaces/1" \
        && echo -n "/dev/nullb$i" > "$s/namespaces/1/device_path" && echo 1 > "$s/namespaces/1/enable" \
        || { echo "nvmet_target: cannot make subsystem $3" >&2; return 1; }
    for p in /sys/kernel/config/nvmet/ports/*; do
        [ "$(cat "$p/addr_traddr" 2>/dev/null)" = "$1" ] && [ "$(cat "$p/addr_trsvcid" 2>/dev/null)" = "$2" ] && break
        p=""
    done
    if [ -z "$p" ]; then
        i=1
        while [ -e "/sys/kernel/config/nvmet/ports/$i" ]; do i=$((i + 1)); done
        p=/sys/kernel/config/nvmet/ports/$i
        mkdir "$p" && echo tcp > "$p/addr_trtype" && echo ipv4 > "$p/addr_adrfam" && echo "$1" > "$p/addr_traddr" \
            && echo "$2" > "$p/addr_trsvcid" || { echo "nvmet_target: cannot make port $1:$2" >&2; return 1; }
    fi
    ln -s "$s" "$p/subsystems/$3" || { echo "nvmet_target: cannot open $3 on port $1:$2" >&2; return 1; }
}

_tcp_established() {  # PORT: how many established TCP connections have local port PORT
    awk -v port="$(printf ':%04X' "$1")" '$4 == "01" && substr($2, length($2) - 4) == port {n++} END {print n + 0}' /proc/net/tcp
}

nvmet_wait_host() {  # PORT [SECONDS]
    local n limit
    n=0
    limit=$(( ${2:-600} * 10 ))
    while [ "$(_tcp_established "$1")" -eq 0 ] && [ $n -lt $limit ]; do sleep 0.1; n=$((n + 1)); done
    [ $n -lt $limit ] || { echo "nvmet_wait_host: no host came to port $1" >&2; return 1; }
    while [ "$(_tcp_established "$1")" -gt 0 ] && [ $n -lt $limit ]; do sleep 0.1; n=$((n + 1)); done
    [ $n -lt $limit ] || { echo "nvmet_wait_host: the host on port $1 did not leave" >&2; return 1; }
}
