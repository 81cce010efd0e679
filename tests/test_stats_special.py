"""scipy.special's distribution functions without the package's import (stats/special.py, issue 52):
the very same ufunc objects, so the same bits; the package's `__init__` (its array-API layer:
numpy.f2py, numpy.testing) is not run until something else imports it, and then works as usual."""

from __future__ import annotations

import subprocess
import sys

import pytest

from iomatrix.stats import special

# In a fresh interpreter (this one may have imported scipy.special already): every function used,
# then what the process imported, then scipy.special and scipy.stats imported as usual and
# compared with what was used.
_FRESH = """
import sys
from iomatrix.stats import special
from iomatrix.stats.summary import t_quantile
used = {n: getattr(special, n) for n in special.NAMES}
values = (
    t_quantile(0.95, 4),
    float(special.stdtr(7, -1.3)),
    float(special.fdtrc(3, 12, 2.5)),
    float(special.ndtri(0.975)),
)
print("package imported:", "scipy.special" in sys.modules)
print("array-API layer imported:", "scipy._lib._array_api" in sys.modules)
import scipy.special
from scipy import stats
print("same objects:", all(getattr(scipy.special, n) is f for n, f in used.items()))
print("same bits:", values == (
    float(stats.t.ppf(0.975, 4)),
    float(stats.t.cdf(-1.3, 7)),
    float(stats.f.sf(2.5, 3, 12)),
    float(stats.norm.ppf(0.975)),
))
"""


def test_a_fresh_process_uses_them_without_the_package_and_can_import_it_after() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "package imported: False",
        "array-API layer imported: False",
        "same objects: True",
        "same bits: True",
    ], out.stdout + out.stderr


def test_once_the_package_is_imported_they_are_its_own() -> None:
    import scipy.special

    for name in special.NAMES:
        assert getattr(special, name) is getattr(scipy.special, name)


def test_a_name_it_does_not_offer() -> None:
    with pytest.raises(AttributeError, match="gammaln"):
        _ = special.gammaln
