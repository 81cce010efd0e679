#!/bin/sh
# Re-capture the /proc snapshots used by tests/test_monitor_procfs.py.
# Run as root. Creates a sparse file in /tmp/iomx-mon, loop-mounts an ext4 on it,
# runs a direct-I/O fio write job on it, and snapshots /proc twice, 1 s apart.
# NOTE: the tests hard-code values hand-computed from the committed capture; if you
# re-capture, update the expected numbers in the tests.
set -eu
out=$(cd "$(dirname "$0")" && pwd)
work=/tmp/iomx-mon/capture.$$
mkdir -p "$work/mnt"
truncate -s 1G "$work/backing.img"
loop=$(losetup --find --show "$work/backing.img")
cleanup() {
    [ -n "${fpid:-}" ] && kill "$fpid" 2>/dev/null || true
    wait 2>/dev/null || true
    umount "$work/mnt" 2>/dev/null || true
    losetup -d "$loop" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkfs.ext4 -q -F "$loop"
mount "$loop" "$work/mnt"
echo "$loop" > "$out/loopdev.txt"
fio --name=cap --filename="$work/mnt/f" --size=256M --rw=randwrite --bs=64k \
    --ioengine=psync --direct=0 --end_fsync=0 --fsync=8 --time_based --runtime=10 \
    --numjobs=1 >/dev/null 2>&1 &
fpid=$!
sleep 3
snap() {
    cat /proc/stat > "$out/stat.$1"
    cat /proc/diskstats > "$out/diskstats.$1"
    cat /proc/meminfo > "$out/meminfo.$1"
    for r in cpu io memory; do cat /proc/pressure/$r > "$out/pressure_$r.$1"; done
    cat /sys/kernel/mm/ksm/pages_shared > "$out/ksm_pages_shared.$1"
    cat /sys/kernel/mm/ksm/pages_sharing > "$out/ksm_pages_sharing.$1"
}
snap 0
sleep 1
snap 1
