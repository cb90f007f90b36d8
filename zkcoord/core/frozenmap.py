"""FrozenMap: the immutable, hashable mapping the frozen core model is built of.

Frozen dataclasses in :mod:`zkcoord.core` cannot hold a ``dict`` (mutable,
unhashable). ``FrozenMap`` is a read-only :class:`~collections.abc.Mapping`
that keeps insertion order (the group coordinator relies on member order for
leader election and protocol tie-breaks), compares equal to any mapping with
the same items, and hashes by its items (so its values must be hashable).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")

__all__ = ["FrozenMap"]


class FrozenMap(Mapping[K, V]):
    """A read-only, insertion-ordered, hashable mapping.

    >>> m = FrozenMap({"b": 1, "a": 2})
    >>> list(m), m["a"], m == {"a": 2, "b": 1}
    (['b', 'a'], 2, True)
    """

    __slots__ = ("_data", "_hash")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._data: dict[K, V] = dict(items)
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    # The Mapping mixins would go through __iter__ and __getitem__ per key;
    # the dict's own (read-only) views and get are several times faster.
    def get(self, key: K, default: Any = None) -> Any:
        return self._data.get(key, default)

    def keys(self):  # type: ignore[override]
        return self._data.keys()

    def values(self):  # type: ignore[override]
        return self._data.values()

    def items(self):  # type: ignore[override]
        return self._data.items()

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, dict):  # no copy: dict equality ignores order too
            return self._data == other
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def thaw(self) -> dict[K, V]:
        """A new mutable ``dict`` copy, in the same order."""
        return dict(self._data)

    def set(self, key: K, value: V) -> FrozenMap[K, V]:
        """A new map with ``key`` set to ``value`` (kept in place if present,
        else appended); one dict copy, for hot paths that change one entry.

        >>> FrozenMap({"a": 1, "b": 2}).set("a", 3)
        FrozenMap({'a': 3, 'b': 2})
        """
        data = dict(self._data)
        data[key] = value
        new: FrozenMap[K, V] = FrozenMap.__new__(FrozenMap)
        new._data = data
        new._hash = None
        return new
