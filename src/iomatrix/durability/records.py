"""The durability records and their verifier (pure: bytes in, counts out).

The guest writer (``guest/durwriter.c``) writes 4 KiB records in groups, flushes, then acknowledges
the
group on the result port. Layout, little endian::

    0  magic "IOMXDUR1"   8  nonce u64   16  stream u32   20  zero u32   24  seq u64
    32 .. 4092 filler     4092  crc32 (zlib) of bytes 0 .. 4092

A record is *intact* when its magic, nonce (this trial's), stream and sequence number are the
expected ones and its CRC matches; *torn* when the header is the expected one but the CRC does not
match (a partial write); *missing* otherwise (zeroes, an older trial's data, or beyond the end of
the file). Record ``seq`` of a stream lives at byte ``seq × 4096`` of its region (a raw region of
the disk, or the guest file)."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

RECORD_BYTES = 4096
MAGIC = b"IOMXDUR1"
_HEADER = struct.Struct("<8sQIIQ")


def make_record(nonce: int, stream: int, seq: int) -> bytes:
    """One record as the guest writer makes it (filler aside, which the verifier does not inspect).

    The filler here is zeroes; the writer's is pseudo-random. Both carry a valid CRC, which is what
    the verifier checks. Used by tests."""
    body = _HEADER.pack(MAGIC, nonce, stream, 0, seq) + bytes(RECORD_BYTES - 4 - _HEADER.size)
    return body + struct.pack("<I", zlib.crc32(body))


def classify(record: bytes, nonce: int, stream: int, seq: int) -> str:
    """'intact', 'torn' or 'missing' (see the module docstring)."""
    if len(record) < RECORD_BYTES:
        return "missing"
    magic, n, s, _zero, q = _HEADER.unpack_from(record)
    if magic != MAGIC or n != nonce or s != stream or q != seq:
        return "missing"
    (crc,) = struct.unpack_from("<I", record, RECORD_BYTES - 4)
    return "intact" if zlib.crc32(record[: RECORD_BYTES - 4]) == crc else "torn"


@dataclass(frozen=True)
class StreamCheck:
    """What survived of one stream. `acked`: records acknowledged before the cut (seq < acked);
    `written`: records the guest reported written, acknowledged or not (seq < written)."""

    stream: int
    acked: int
    written: int
    acked_lost: int  # acknowledged records missing or torn: a durability failure
    unacked_lost: int  # written, not acknowledged, and gone: allowed
    unacked_kept: int  # not acknowledged (or not even reported) yet intact: allowed
    torn: int
    first_acked_lost: int | None  # lowest acknowledged seq that did not survive
    lost_seqs: list[int] = field(default_factory=list)  # acknowledged seqs lost (evidence; capped)


EVIDENCE_CAP = 50


def check_stream(
    region: bytes, nonce: int, stream: int, acked: int, written: int, capacity: int | None = None
) -> StreamCheck:
    """Verify one stream's region against what was acknowledged.

    `capacity`: how many record slots the region has (default: as many as fit); slots beyond
    `written` are scanned too, because a "written" report can be lost with the guest (the cut may
    come before the line leaves the serial port): an intact record there counts as kept, never as
    lost."""
    written = max(written, acked)
    slots = capacity if capacity is not None else len(region) // RECORD_BYTES
    slots = max(slots, written)
    acked_lost = unacked_lost = unacked_kept = torn = 0
    lost: list[int] = []
    for seq in range(slots):
        rec = region[seq * RECORD_BYTES : (seq + 1) * RECORD_BYTES]
        state = classify(rec, nonce, stream, seq)
        if state == "torn":
            torn += 1
        if seq < acked:
            if state != "intact":
                acked_lost += 1
                lost.append(seq)
        elif state == "intact":
            unacked_kept += 1
        elif seq < written:
            unacked_lost += 1
    return StreamCheck(
        stream=stream,
        acked=acked,
        written=written,
        acked_lost=acked_lost,
        unacked_lost=unacked_lost,
        unacked_kept=unacked_kept,
        torn=torn,
        first_acked_lost=lost[0] if lost else None,
        lost_seqs=lost[:EVIDENCE_CAP],
    )
