# Guest script (busybox sh): the kernel's own NVMe/TCP target (nvmet) served to the host, the
# same target as capture.sh's but listening on the guest's NIC. With
#
#     ssdlab vm --forward 4420:4420 --run tests/data/nvmet-reference/serve.sh --out runs/nvmet
#
# a host program reaches it at 127.0.0.1:4420 (subsystem nqn.2014-08.io.ssdlab:nvmet-reference),
# and the guest powers off once a host has connected and left again (or after WAIT_S seconds,
# default 600).
set -e
. /lib/ssdlab/nvme-tcp.sh
NQN=${NQN:-nqn.2014-08.io.ssdlab:nvmet-reference}
nvmet_target "$SSDLAB_GUEST_IP" 4420 "$NQN" "${SIZE_MIB:-64}"
echo "nvmet-reference: ready, $NQN on tcp $SSDLAB_GUEST_IP:4420"
nvmet_wait_host 4420 "${WAIT_S:-600}"
echo "nvmet-reference: the host came and left"
dmesg | grep -E "nvmet" > "$SSDLAB_OUT/dmesg-nvmet.txt" || true
