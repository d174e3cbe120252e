# ext4 on the emulated SSD: make the file system, write 4 files with fio (4 KiB random
# writes, crc32c verify read back), unmount, fsck, and keep fio's JSON.
#
#   ssdlab vm my.toml --run experiments/vm/ext4-fio.sh --out runs/vm-ext4
#
# Runs in the guest under busybox sh: $SSDLAB_DISK is the disk, files left in $SSDLAB_OUT come
# back to the host (OUT/guest/).
set -e
mkfs.ext4 -q -F "$SSDLAB_DISK"
mkdir -p /mnt/fs
mount -t ext4 "$SSDLAB_DISK" /mnt/fs
fio --name=ext4-randwrite --directory=/mnt/fs --nrfiles=4 --size=${SIZE:-64m} --bs=4k --rw=randwrite \
    --ioengine=libaio --iodepth=16 --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 \
    --randrepeat=1 --randseed=42 --fsync_on_close=1 --output-format=json --output="$SSDLAB_OUT/fio.json"
df -h /mnt/fs
umount /mnt/fs
e2fsck -fn "$SSDLAB_DISK"
