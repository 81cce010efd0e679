"""scipy.special's distribution functions, the very same compiled ufuncs, without the cost of
importing the `scipy.special` package.

    from iomatrix.stats import special
    special.stdtrit(4, 0.975)   # 2.7764451051977934, what scipy.stats.t.ppf(0.975, 4) gives

The statistics call these of scipy.special's functions: `stdtr` and `stdtrit` (Student's t
distribution and its inverse: scipy.stats.t's `_cdf`/`_sf` and `_ppf`), `fdtrc` (the F survival
function, scipy.stats.f's `_sf`), `ndtr` and `ndtri` (the normal CDF and quantile:
scipy.stats.norm's `_cdf` and `_ppf`), `psi` (the digamma function) and the Hurwitz zeta function
behind `trigamma` and `tetragamma` below (scipy.special.polygamma(n, x) is (−1)ⁿ⁺¹ n! ζ(n + 1, x);
stats/moderated.py). All are NumPy ufuncs of the compiled module `scipy.special._ufuncs`, which
needs only NumPy and its sibling compiled modules. The package's `__init__` around it is what costs:
since SciPy 1.15 it builds an array-API layer that clones NumPy's namespace and so imports
numpy.f2py, numpy.testing, numpy.random and more: 0.3–0.5 s of CPU, a tenth of `recommend` on a
100-host store (issue 52).

So the module is loaded by its file, its package standing in as an empty package of the same folder
for the moment of the load (its siblings are found there), under the import lock so that no other
thread imports `scipy.special` meanwhile. The modules loaded stay in `sys.modules`: a later
`import scipy.special` (scipy.stats imports it) runs the package's `__init__` as usual and finds
them, so the functions are then the package's own objects (tests/test_stats_special.py). Where
scipy.special is already imported, or the load fails (another SciPy layout), the package's own
functions are used. The figures are the same bits either way: it is one function object."""

from __future__ import annotations

import _imp
import functools
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

_PACKAGE = "scipy.special"
_MODULE = "scipy.special._ufuncs"  # where scipy.special's names below are defined
NAMES = ("fdtrc", "ndtr", "ndtri", "psi", "stdtr", "stdtrit")


def _by_file() -> types.ModuleType | None:
    """scipy.special._ufuncs loaded by its file with its package not initialised; None when that
    fails (sys.modules then as before, but for sibling modules the attempt loaded whole)."""
    import scipy

    folder = Path(scipy.__file__).parent / "special"
    path = next(
        (
            p
            for p in (folder / ("_ufuncs" + s) for s in importlib.machinery.EXTENSION_SUFFIXES)
            if p.is_file()
        ),
        None,
    )
    if path is None:
        return None
    stand_in = types.ModuleType(_PACKAGE)
    stand_in.__path__ = [str(folder)]
    stand_in.__package__ = _PACKAGE
    loader = importlib.machinery.ExtensionFileLoader(_MODULE, str(path))
    spec = importlib.util.spec_from_file_location(_MODULE, path, loader=loader)
    if spec is None:
        return None
    _imp.acquire_lock()
    try:
        if _PACKAGE in sys.modules:  # imported by another thread meanwhile
            return None
        sys.modules[_PACKAGE] = stand_in
        module = importlib.util.module_from_spec(spec)
        sys.modules[_MODULE] = module
        try:
            loader.exec_module(module)
        except ImportError:
            sys.modules.pop(_MODULE, None)
            return None
        return module
    finally:
        if sys.modules.get(_PACKAGE) is stand_in:
            del sys.modules[_PACKAGE]
        _imp.release_lock()


@functools.cache
def _ufuncs() -> Any:
    """Where the functions are taken from: scipy.special once imported, else its compiled
    module."""
    loaded = sys.modules.get(_PACKAGE)
    if loaded is None:
        module = sys.modules.get(_MODULE) or _by_file()
        if module is not None and all(hasattr(module, n) for n in NAMES):
            return module
    import scipy.special

    return scipy.special


def __getattr__(name: str) -> Any:
    if name not in NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_ufuncs(), name)


def _hurwitz_zeta() -> Any:
    """ζ(s, q): the compiled module's ufunc, or the package's `zeta` (the same function) where the
    package is what `_ufuncs` found."""
    module = _ufuncs()
    return getattr(module, "_zeta", None) or module.zeta


def trigamma(x: float) -> float:
    """ψ'(x) = ζ(2, x), what scipy.special.polygamma(1, x) computes."""
    return float(_hurwitz_zeta()(2.0, x))


def tetragamma(x: float) -> float:
    """ψ''(x) = −2 ζ(3, x), what scipy.special.polygamma(2, x) computes."""
    return float(-2.0 * _hurwitz_zeta()(3.0, x))
