"""One point of the matrix, :class:`Cell`: a value of every registered axis.

A type low in the import graph (it needs only the axis registry): the tier declarations, the fio
builders and the QEMU builders take cells, and the matrix (`iomatrix.matrix`, which re-exports it)
makes them from a plan. A cell's key is read back into a cell by `iomatrix.matrix.from_key`, which
completes it with the tier registry."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from iomatrix.domain import NA, NULL_BACKING, axes


class Cell(Mapping[str, str]):
    """One point of the matrix: axis → value for every registered axis ("-" where the axis does not
    apply to the cell's tier). A mapping (``cell["cache"]``), with the values also readable as
    attributes (``cell.cache``); immutable, hashable and ordered by its values in registry order."""

    __slots__ = ("_values",)
    _values: tuple[str, ...]

    def __init__(self, values: Mapping[str, str]) -> None:
        unknown = set(values) - set(axes.names())
        if unknown:
            raise ValueError(
                f"unknown axis {sorted(unknown)[0]!r}; known: {', '.join(axes.names())}"
            )
        object.__setattr__(self, "_values", tuple(str(values.get(a, NA)) for a in axes.names()))

    @classmethod
    def of(cls, **values: str) -> Cell:
        """A cell from keyword values; axes not given are "-" (not applying)."""
        return cls(values)

    # -- the mapping
    def __getitem__(self, axis: str) -> str:
        try:
            return self._values[axes.names().index(axis)]
        except ValueError:
            raise KeyError(axis) from None

    def __iter__(self) -> Iterator[str]:
        return iter(axes.names()[: len(self._values)])

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, axis: str) -> str:
        try:
            return self[axis]
        except KeyError:
            raise AttributeError(axis) from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Cell is immutable: use replace()")

    def __hash__(self) -> int:
        return hash(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cell) and self._values == other._values

    def __lt__(self, other: Cell) -> bool:
        return self._values < other._values

    def __repr__(self) -> str:
        return f"Cell({self.key!r})"

    def replace(self, **values: str) -> Cell:
        return Cell({**self, **values})

    @property
    def key(self) -> str:
        """The cell's identity in the store: the first release's axes joined by "/" (unchanged
        since), then each later axis set away from its default as "+axis=value"."""
        named = axes.named(self)
        base = "/".join(v for a, v in named if axes.get(a).always_named)
        return base + "".join(f"+{a}={v}" for a, v in named if not axes.get(a).always_named)

    @property
    def is_null_ceiling(self) -> bool:
        return self.backing == NULL_BACKING

    def label(self) -> str:
        """Short human label: only the axes that apply."""
        return " ".join(f"{a}={v}" for a, v in axes.named(self) if v != NA)
