"""What a guest's figures under TCG mean, said wherever they are shown. A module of its own: the
answer's warnings (report/recommend) read it without importing the guest's accelerator probe,
process and artifact code (`iomatrix.guest.accel`)."""

from __future__ import annotations

TCG_WARNING = (
    "TCG (software emulation): guest timings are bound by instruction emulation, not by "
    "the storage "
    "stack. Use them to compare cells with each other, not as absolute figures."
)
