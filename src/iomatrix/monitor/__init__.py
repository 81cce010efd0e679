"""Host monitoring: what the host did while a benchmark cell ran.

    chain = resolve_device_chain(image_path)          # e.g. ["loop3", "vda"]
    with HostSampler(chain, interval=1.0) as s:
        s.attach_pid(qemu_pid)
        ...
    summary = summarize_samples(s.samples)

Field names and units: docs/monitoring.md.

The names are imported when first asked (`iomatrix.lazy_names`): a report that summarises stored
samples (`monitor.summary`) does not import the sampler and psutil (issue 52).
"""

from __future__ import annotations

from iomatrix.lazy_names import lazy_names

_WHERE = {
    "DeviceChain": "devices",
    "resolve": "devices",
    "resolve_device_chain": "devices",
    "HostSampler": "sampler",
    "MonitorSample": "sample",
    "disk_field_names": "sampler",
    "FieldSummary": "summary",
    "cell_summary": "summary",
    "host_questions_view": "summary",
    "summarize_samples": "summary",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_names(__name__, _WHERE)
