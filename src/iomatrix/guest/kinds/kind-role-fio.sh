# Job kind "role-fio": one fio-driven role of a consolidation tile (database, web, bursty writer).
# Sourced by /init with its helpers and the disk under test ($DISK) found. Files from the host:
#   $FW/role-prep/raw  optional fio job run first and not timed (e.g. writing the data a reader reads)
#   $FW/role-job/raw   the timed fio job; "@DISK@" stands for the disk under test
# IOMX_ROLE names the role in messages. The role's time is workload_start..workload_end.
[ -n "$DISK" ] || fail "role $IOMX_ROLE: no disk under test"
if [ -r "$FW/role-prep/raw" ]; then
    sed "s#@DISK@#/dev/$DISK#g" "$FW/role-prep/raw" > /tmp/prep.fio
    (cd /tmp && fio --output=/tmp/prep.out /tmp/prep.fio > /tmp/prep.stderr 2>&1) || {
        tail -n 20 /tmp/prep.stderr > /dev/console
        fail "role $IOMX_ROLE: preparation job failed: $(tail -n 3 /tmp/prep.stderr | tr '\n' ' ')"
    }
fi
sed "s#@DISK@#/dev/$DISK#g" "$FW/role-job/raw" > /tmp/job.fio
mark workload_start
(cd /tmp && fio --output-format=json --output=/tmp/fio.json /tmp/job.fio > /tmp/fio.stderr 2>&1)
rc=$?
mark workload_end
emit fio < /tmp/fio.json
if [ $rc -ne 0 ]; then
    tail -n 20 /tmp/fio.stderr > /dev/console
    { echo "role $IOMX_ROLE: fio exited with status $rc"; tail -n 5 /tmp/fio.stderr; } | emit error
fi
