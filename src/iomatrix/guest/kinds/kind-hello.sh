# Job kind "hello": the smallest example of a kind script, used by the tests of the kind mechanism.
# Sourced by /init with its helpers (mark, emit, fail, now, wait_disk) and the job's variables set;
# IOMX_HELLO comes from GuestJob.env, $FW/hello/raw from GuestJob.files.
mark workload_start
{ echo "env=$IOMX_HELLO"; cat "$FW/hello/raw" 2>/dev/null; } | emit hello
mark workload_end
