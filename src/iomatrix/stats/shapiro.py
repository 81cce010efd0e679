"""The Shapiro–Wilk test of normality (the blocked analysis's residuals, stats/blocked.py):
scipy.stats.shapiro's p, computed by the same compiled routine without importing scipy.stats.

    W = (Σ a_i · y_(i))² / Σ (y_i − ȳ)²

with y_(i) the sorted sample and a_i the coefficients of Royston's algorithm AS R94 (scipy's
`swilk`, which also turns W into the p-value by Royston's normalising transformation).
scipy.stats.shapiro sorts the sample, subtracts its middle value (scipy gh-15777: fewer rounding
errors) and calls `swilk`; so does `shapiro_p`, giving the same bits. Importing scipy.stats costs
about 1 s of CPU (it parses hundreds of docstrings), paid by every `recommend` process for this one
test (issue 52); the routine itself lives in a compiled module of scipy.stats that needs only NumPy,
loaded here by its file (its package's __init__ is what costs). Where that module is not found
(another SciPy layout), scipy.stats.shapiro itself is called.

Worked example: the sample 1, 2, 3, 4, 100 gives W = 0.5773 and p = 0.000305 (far from normal); 1,
2, 3, 4, 5 gives W = 0.9868, p = 0.9672."""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

_MODULE = "scipy.stats._ansari_swilk_statistics"  # where scipy.stats.shapiro imports swilk from


@functools.cache
def _swilk() -> Callable[..., Any] | None:
    """scipy's compiled `swilk`, from the module already imported or loaded by its file; None when
    absent."""
    loaded = sys.modules.get(_MODULE)
    if loaded is not None:
        return getattr(loaded, "swilk", None)
    import scipy

    folder = Path(scipy.__file__).parent / "stats"
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / (_MODULE.rsplit(".", 1)[1] + suffix)
        if not path.is_file():
            continue
        try:
            loader = importlib.machinery.ExtensionFileLoader(_MODULE, str(path))
            spec = importlib.util.spec_from_file_location(_MODULE, path, loader=loader)
            if spec is None:
                return None
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
        except ImportError:
            return None
        return getattr(module, "swilk", None)
    return None


def shapiro_p(sample: np.ndarray) -> float:
    """The Shapiro–Wilk p of `sample` (at least 3 finite values), as
    float(scipy.stats.shapiro(sample).pvalue)."""
    x = np.ravel(sample).astype(np.float64)
    swilk = _swilk()
    if swilk is None or x.size < 3 or not np.all(np.isfinite(x)):
        # the documented function, for what the fast path does not cover
        from scipy import stats as _st

        return float(_st.shapiro(x).pvalue)
    # scipy.stats.shapiro's own steps (scipy/stats/_morestats.py): sort, subtract the middle value,
    # swilk.
    y = np.sort(x)
    y -= x[x.size // 2]
    _w, pw, _fault = swilk(y, np.zeros(x.size // 2, dtype=np.float64), 0)
    return float(pw)
