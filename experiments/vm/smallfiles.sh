# Metadata-heavy: many small files on ext4. fio creates FILES empty files (filecreate), writes
# 4 KiB into each (fsync on close), stats them (filestat) and deletes them (filedelete); then
# the file system is unmounted and checked. Each phase's operation latencies are in fio.json.
#
#   ssdlab vm my.toml --run experiments/vm/smallfiles.sh --out runs/vm-smallfiles
set -e
FILES=${FILES:-4000}
mkfs.ext4 -q -F "$SSDLAB_DISK"
mkdir -p /mnt/fs
mount -t ext4 "$SSDLAB_DISK" /mnt/fs
mkdir -p /mnt/fs/small
cat > /tmp/smallfiles.fio <<JOB
[global]
directory=/mnt/fs/small
nrfiles=$FILES
filesize=4k
bs=4k
openfiles=64
file_service_type=sequential

[create]
ioengine=filecreate

[write]
stonewall
ioengine=psync
rw=write
fsync_on_close=1

[stat]
stonewall
ioengine=filestat

[delete]
stonewall
ioengine=filedelete
JOB
fio --output-format=json --output="$SSDLAB_OUT/fio.json" /tmp/smallfiles.fio
sync
df -i /mnt/fs
umount /mnt/fs
e2fsck -fn "$SSDLAB_DISK"
