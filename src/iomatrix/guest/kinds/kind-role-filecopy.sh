# Job kind "role-filecopy": one end of a consolidation tile's file-copy pair (the consolidation article's two file servers).
# The source builds a tree of many small and some large files on its own filesystem (not timed), copies it
# to the peer over the tile's private network (busybox tar through nc), and the peer, after an idle pause,
# copies it back. The source's workload_start..workload_end is the round trip; the peer's is its part of it.
# Variables: IOMX_COPY_SIDE (source|peer), IOMX_NET_ADDR / IOMX_PEER_ADDR (10.x.y.z), IOMX_COPY_SMALL_FILES,
# IOMX_COPY_LARGE_FILES, IOMX_COPY_LARGE_MB, IOMX_COPY_IDLE_S, IOMX_COPY_WAIT_S (how long to wait for the peer).
PORT_READY=5000   # the peer accepts one connection here once it listens for the tree
PORT_THERE=5001   # source -> peer
PORT_BACK=5002    # peer -> source
[ -n "$DISK" ] || fail "file copy: no disk under test"

net_up() {
    ifc=""
    i=0
    while [ -z "$ifc" ] && [ $i -lt 300 ]; do
        for n in /sys/class/net/*; do
            case ${n##*/} in lo) ;; *) ifc=${n##*/} ;; esac
        done
        [ -z "$ifc" ] && usleep 10000
        i=$((i + 1))
    done
    [ -n "$ifc" ] || fail "file copy: no network interface (is virtio_net loaded?)"
    ip link set lo up
    ip link set "$ifc" up || fail "file copy: ip link set $ifc up failed"
    ip addr add "$IOMX_NET_ADDR/24" dev "$ifc" || fail "file copy: ip addr add $IOMX_NET_ADDR failed"
}

# Send directory $1 to $2:$3, retrying while the listener is not up yet (nc exits non-zero: refused).
send_tree() {
    tries=$(( ${IOMX_COPY_WAIT_S:-60} * 5 ))
    i=0
    until tar -c -C "$1" . | nc "$2" "$3" 2>/tmp/nc.err; do
        i=$((i + 1))
        [ $i -ge $tries ] && fail "file copy: cannot reach $2:$3 ($(cat /tmp/nc.err))"
        usleep 200000
    done
}

# Receive one tree on port $1 into directory $2 (nc runs tar on the connection; returns when it ends).
receive_tree() {
    mkdir -p "$2"
    nc -l -p "$1" -e tar -x -C "$2" 2>/tmp/recv.err || fail "file copy: receiving on port $1 failed ($(cat /tmp/recv.err))"
}

# Many small files (1-16 KiB) in nested directories, written with shell built-ins only (no fork per file
# under emulation), plus a few large random files.
make_tree() {
    mkdir -p /mnt/t/tree
    blk=$(head -c 3072 /dev/urandom | base64 -w 0)  # 4096 characters
    i=0
    while [ $i -lt "$IOMX_COPY_SMALL_FILES" ]; do
        d=/mnt/t/tree/d$((i % 16))/e$((i % 5))
        [ -d $d ] || mkdir -p $d
        case $((i % 4)) in
            0) printf '%.1024s' "$blk" > $d/f$i ;;
            1) printf '%s' "$blk" > $d/f$i ;;
            2) printf '%s%s' "$blk" "$blk" > $d/f$i ;;
            3) printf '%s%s%s%s' "$blk" "$blk" "$blk" "$blk" > $d/f$i ;;
        esac
        i=$((i + 1))
    done
    i=0
    while [ $i -lt "$IOMX_COPY_LARGE_FILES" ]; do
        dd if=/dev/urandom of=/mnt/t/tree/large$i bs=1M count="$IOMX_COPY_LARGE_MB" 2>/dev/null ||
            fail "file copy: writing large file $i failed"
        i=$((i + 1))
    done
    sync
}

make_fs > /tmp/mkfs.out 2>&1 || { tail -n 5 /tmp/mkfs.out > /dev/console; fail "file copy: mkfs failed"; }
mount_fs || fail "file copy: mount failed"
net_up
case "$IOMX_COPY_SIDE" in
    source)
        make_tree
        files=$(find /mnt/t/tree -type f | wc -l)
        bytes=$(du -s -k /mnt/t/tree | cut -f1)
        # The listener for the way back is up before the tree leaves, so the peer never waits on us.
        receive_tree $PORT_BACK /mnt/t/back &
        back=$!
        # Wait until the peer is up and listening, so its boot (slower when the host is loaded) is not timed.
        tries=$(( ${IOMX_COPY_WAIT_S:-60} * 5 ))
        i=0
        until nc "$IOMX_PEER_ADDR" $PORT_READY < /dev/null > /dev/null 2>&1; do
            i=$((i + 1))
            [ $i -ge $tries ] && fail "file copy: peer $IOMX_PEER_ADDR not ready after ${IOMX_COPY_WAIT_S:-60} s"
            usleep 200000
        done
        mark workload_start
        t0=$(now)
        send_tree /mnt/t/tree "$IOMX_PEER_ADDR" $PORT_THERE
        t1=$(now)
        wait $back || fail "file copy: the copy back failed"
        sync
        t2=$(now)
        mark workload_end
        got=$(find /mnt/t/back -type f | wc -l)
        [ "$got" -eq "$files" ] || fail "file copy: $files files sent, $got came back"
        there=$(awk "BEGIN { printf \"%.3f\", $t1 - $t0 }")
        back_s=$(awk "BEGIN { printf \"%.3f\", $t2 - $t1 }")
        echo "{\"side\": \"source\", \"files\": $files, \"kib\": $bytes, \"there_s\": $there, \"back_s\": $back_s}" | emit copy
        ;;
    peer)
        receive_tree $PORT_THERE /mnt/t/in &
        there=$!
        usleep 100000
        nc -l -p $PORT_READY -e true 2>/tmp/ready.err || fail "file copy: ready handshake failed ($(cat /tmp/ready.err))"
        mark workload_start
        wait $there || fail "file copy: receiving the tree failed"
        sync
        got=$(find /mnt/t/in -type f | wc -l)
        sleep "${IOMX_COPY_IDLE_S:-0}"
        send_tree /mnt/t/in "$IOMX_PEER_ADDR" $PORT_BACK
        mark workload_end
        echo "{\"side\": \"peer\", \"files\": $got}" | emit copy
        ;;
    *)
        fail "file copy: IOMX_COPY_SIDE must be source or peer, got '$IOMX_COPY_SIDE'"
        ;;
esac
umount /mnt/t
