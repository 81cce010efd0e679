# Job kind "durability": one trial of the durability tier (src/iomatrix/tiers/durability.py).
# Sourced by /init with its helpers. Two disks: the disk under test ($DISK, serial iomx-test) sits on the
# host's simulated volatile cache (it is cut by a power loss); the crash disk (serial $IOMX_DUR_CRASH_SERIAL)
# is a plain image file (it is cut by killing QEMU). On each: a $IOMX_DUR_FS filesystem (ext4 or xfs) in the
# first $IOMX_DUR_FS_MB MiB, a raw record region at byte $IOMX_DUR_RAW_OFFSET. The writer then writes records
# to all four streams, flushes and acknowledges each group on ttyS1 until the host cuts it.
CRASH=$(wait_disk "$IOMX_DUR_CRASH_SERIAL" "$DISK") || fail "crash-test disk (serial $IOMX_DUR_CRASH_SERIAL) not found"
[ -x /usr/bin/iomx-durwriter ] || fail "the initramfs has no iomx-durwriter (install gcc, then: iomatrix guest build)"
DUR_FS=${IOMX_DUR_FS:-ext4}
mark disks
for pair in "$DISK:/mnt/p" "$CRASH:/mnt/c"; do
    dev=${pair%%:*}
    mnt=${pair#*:}
    mkdir -p "$mnt"
    case $DUR_FS in
        ext4) mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 "/dev/$dev" "${IOMX_DUR_FS_MB}M" \
                  > /tmp/mkfs.out 2>&1 ;;
        # xfsprogs' defaults for a ≥ 300 MiB filesystem (a 64 MiB log); -K: no discard of the fresh image.
        xfs) mkfs.xfs -q -f -K -d "size=${IOMX_DUR_FS_MB}m" "/dev/$dev" > /tmp/mkfs.out 2>&1 ;;
        *) fail "unknown durability filesystem '$DUR_FS'" ;;
    esac || { tail -n 5 /tmp/mkfs.out > /dev/console; fail "mkfs.$DUR_FS on /dev/$dev failed: $(tail -n 2 /tmp/mkfs.out)"; }
    case $DUR_FS in
        ext4) mount -t ext4 -o noinit_itable "/dev/$dev" "$mnt" ;;
        *) mount -t "$DUR_FS" "/dev/$dev" "$mnt" ;;
    esac || fail "mount of /dev/$dev ($DUR_FS) failed"
done
mark filesystems
sync
mark workload_start
iomx-durwriter "$IOMX_DUR_NONCE" "$IOMX_DUR_GROUP" "$IOMX_DUR_MAX" $RES \
    "raw:/dev/$DISK:$IOMX_DUR_RAW_OFFSET:1" "file:/mnt/p/records:2" \
    "raw:/dev/$CRASH:$IOMX_DUR_RAW_OFFSET:3" "file:/mnt/c/records:4"
mark workload_end
