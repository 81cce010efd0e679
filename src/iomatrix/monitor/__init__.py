"""Host monitoring: what the host did while a benchmark cell ran.

    chain = resolve_device_chain(image_path)          # e.g. ["loop3", "vda"]
    with HostSampler(chain, interval=1.0) as s:
        s.attach_pid(qemu_pid)
        ...
    summary = summarize_samples(s.samples)

Field names and units: docs/monitoring.md.
"""

from iomatrix.monitor.devices import DeviceChain, resolve, resolve_device_chain
from iomatrix.monitor.sampler import HostSampler, MonitorSample, disk_field_names
from iomatrix.monitor.summary import (
    FieldSummary,
    cell_summary,
    host_questions_view,
    summarize_samples,
)

__all__ = [
    "DeviceChain",
    "FieldSummary",
    "HostSampler",
    "MonitorSample",
    "cell_summary",
    "disk_field_names",
    "host_questions_view",
    "resolve",
    "resolve_device_chain",
    "summarize_samples",
]
