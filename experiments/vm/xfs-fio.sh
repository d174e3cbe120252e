# XFS on the emulated SSD: the same file-level fio job as ext4-fio.sh (4 files, 4 KiB random
# writes, crc32c verify), then unmount and xfs_repair -n (a read-only check).
#
#   ssdlab vm my.toml --run experiments/vm/xfs-fio.sh --out runs/vm-xfs
#
# XFS is a module in the guest's kernel: `mount -t xfs` has the kernel load it (a mount that
# names no type does not).
set -e
mkfs.xfs -q -f "$SSDLAB_DISK"
mkdir -p /mnt/fs
mount -t xfs "$SSDLAB_DISK" /mnt/fs
fio --name=xfs-randwrite --directory=/mnt/fs --nrfiles=4 --size=${SIZE:-64m} --bs=4k --rw=randwrite \
    --ioengine=libaio --iodepth=16 --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 \
    --randrepeat=1 --randseed=42 --fsync_on_close=1 --output-format=json --output="$SSDLAB_OUT/fio.json"
df -h /mnt/fs
umount /mnt/fs
xfs_repair -n "$SSDLAB_DISK"
