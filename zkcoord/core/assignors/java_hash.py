"""Java's ``HashMap`` / ``HashSet`` iteration order, reproduced exactly.

Kafka's assignors iterate ``HashMap`` s and ``HashSet`` s, and which member
gets a partition depends on that order (the group's member ids, a member's
current assignment, the subscribed topic ids). Java's order is not random:
it is the order of the table's buckets, ``hash & (capacity - 1)``, and
inside a bucket the order of the bucket's chain. Both follow from the keys'
``hashCode``, the table's capacity (its constructor argument and every
resize since) and the sequence of insertions and removals. This module owns
reproducing them:

* the hash codes: ``Integer.hashCode`` (:func:`int_hash`),
  ``String.hashCode`` over UTF-16 code units (:func:`string_hash`), Kafka's
  ``Uuid.hashCode`` (:func:`uuid_hash`), each spread as ``HashMap.hash``
  does (``h ^ (h >>> 16)``);
* :class:`JavaHashMap`, the structure of ``java.util.HashMap`` (JDK 17 to
  25: identical in these methods) keeping keys only: the table, ``resize()``
  splitting chains in order, ``treeifyBin()`` growing a table under 64
  buckets instead of making a tree, and the red-black tree bins
  (``HashMap.TreeNode``: ``treeify``, ``putTreeVal``, ``removeTreeNode``,
  ``split``, ``moveRootToFront`` and the rotations), transcribed because a
  tree bin's chain order follows its tree;
* :func:`hash_set_capacity`, the capacity ``new HashSet<>(collection)``
  asks for, the one place where JDKs differ: up to 18
  ``max((int) (n / .75f) + 1, 16)``, from 19 on ``HashMap.newHashMap(
  max(n, 12))``, i.e. ``ceil(n / 0.75)``. A set of 12, 24, 48, ... elements
  gets twice the table on JDK 17, and may iterate differently;
* :func:`inserted_order`, a fast path for a structure only ever added to.

Keys are compared only where Java compares them (a tree bin): ``Integer``,
``String`` and Kafka's ``Uuid`` are all ``Comparable``, so Java's
``tieBreakOrder`` (identity hash codes, not reproducible) is never reached
for distinct keys.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Hashable, Iterable, Iterator
from functools import lru_cache

from zkcoord.core.assignors.java_tree import (
    Node, chain, link, put_tree_val, remove_tree_node, split, treeify,
)

__all__ = [
    "JavaHashMap", "KeyKind", "INT_KEYS", "STRING_KEYS", "UUID_KEYS", "hash_set_capacity", "inserted_order",
    "int_hash", "java_string_compare_key", "string_hash", "table_size_for", "uuid_bits", "uuid_compare_key",
    "uuid_hash",
]

TREEIFY_THRESHOLD = 8
MIN_TREEIFY_CAPACITY = 64
DEFAULT_CAPACITY = 16
MAXIMUM_CAPACITY = 1 << 30


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _spread(h: int) -> int:
    """``HashMap.hash``: the high half folded into the low one (a Java int)."""
    h &= 0xFFFFFFFF
    return _int32(h ^ (h >> 16))


def int_hash(value: int) -> int:
    """``HashMap.hash`` of an ``Integer``."""
    return _spread(value)


@lru_cache(maxsize=65536)
def string_hash(text: str) -> int:
    """``HashMap.hash`` of a ``String``: ``s[0]*31^(n-1) + ... + s[n-1]``
    over UTF-16 code units, in 32-bit arithmetic."""
    h = 0
    if text.isascii():
        for ch in text.encode("ascii"):
            h = (31 * h + ch) & 0xFFFFFFFF
    else:
        units = text.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(units), 2):
            h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return _spread(h)


def java_string_compare_key(text: str) -> bytes | str:
    """A sort key ordering strings as ``String.compareTo`` does (by UTF-16
    code unit; Python compares code points, which differs only once a
    character lies beyond U+FFFF). Use one kind of key for one sort: this
    returns ``bytes`` for every string, the UTF-16BE encoding."""
    return text.encode("utf-16-be", "surrogatepass")


@lru_cache(maxsize=65536)
def uuid_bits(topic_id: str) -> tuple[int, int]:
    """Kafka ``Uuid.fromString``: the unpadded URL-safe base64 of 16 bytes,
    as (mostSignificantBits, leastSignificantBits), signed 64-bit."""
    try:
        raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise ValueError(f"topic id {topic_id!r} is not a Kafka Uuid (unpadded URL-safe base64 of 16 bytes)")
    canonical = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    if canonical != topic_id:  # Kafka's Uuid.toString would print it differently
        raise ValueError(f"topic id {topic_id!r} is not in Kafka's form; Kafka writes it {canonical!r}")
    msb, lsb = int.from_bytes(raw[:8], "big", signed=True), int.from_bytes(raw[8:], "big", signed=True)
    return msb, lsb


@lru_cache(maxsize=65536)
def uuid_hash(topic_id: str) -> int:
    """``HashMap.hash`` of Kafka's ``Uuid``: ``(int) (h >> 32) ^ (int) h``
    where ``h = msb ^ lsb``."""
    msb, lsb = uuid_bits(topic_id)
    h = msb ^ lsb
    return _spread(_int32(h >> 32) ^ _int32(h))


def uuid_compare_key(topic_id: str) -> tuple[int, int]:
    """A sort key ordering topic ids as ``Uuid.compareTo`` does (signed
    most significant bits, then signed least significant bits)."""
    return uuid_bits(topic_id)


class KeyKind:
    """How Java hashes and compares one type of key."""

    __slots__ = ("name", "hash", "compare_key")

    def __init__(self, name: str, hash_fn: Callable[[Hashable], int], compare_key: Callable[[Hashable], object]):
        self.name = name
        self.hash = hash_fn
        self.compare_key = compare_key


INT_KEYS = KeyKind("Integer", int_hash, lambda v: v)
STRING_KEYS = KeyKind("String", string_hash, java_string_compare_key)
UUID_KEYS = KeyKind("Uuid", uuid_hash, uuid_compare_key)


def table_size_for(capacity: int) -> int:
    """``HashMap.tableSizeFor``: the power of two at or above ``capacity`` (at least 1)."""
    if capacity <= 1:
        return 1
    return min(1 << (capacity - 1).bit_length(), MAXIMUM_CAPACITY)


def hash_set_capacity(size: int, jdk: int) -> int:
    """The initial-capacity argument ``new HashSet<>(c)`` passes to its
    ``HashMap`` for a collection of ``size`` elements, on JDK ``jdk``."""
    if jdk >= 19:
        n = max(size, 12)
        q, r = divmod(n * 4, 3)  # ceil(n / 0.75), exactly
        return q + (1 if r else 0)
    # (int) (size / .75f) + 1 in float arithmetic; exact for any size below 2**24.
    return max(int(size / 0.75) + 1, DEFAULT_CAPACITY)


def _threshold(capacity: int) -> int:
    return int(capacity * 0.75)


class JavaHashMap:
    """The keys of a ``java.util.HashMap`` (or the ``HashSet`` backed by
    one), laid out as Java lays them out, so that iterating gives Java's
    order. ``capacity`` None is ``new HashMap<>()``; an int is ``new
    HashMap<>(capacity)``."""

    __slots__ = ("_kind", "_table", "_threshold", "_nodes")

    def __init__(self, kind: KeyKind, capacity: int | None = None, keys: Iterable = ()):
        self._kind = kind
        self._table: list[Node | None] | None = None
        self._threshold = 0 if capacity is None else table_size_for(capacity)
        self._nodes: dict = {}
        for key in keys:
            self.add(key)

    @classmethod
    def hash_set(cls, kind: KeyKind, items: Iterable, jdk: int) -> "JavaHashMap":
        """``new HashSet<>(items)`` (items in their iteration order) on JDK ``jdk``."""
        items = list(items)
        return cls(kind, hash_set_capacity(len(items), jdk), items)

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, key) -> bool:
        return key in self._nodes

    @property
    def capacity(self) -> int:
        return 0 if self._table is None else len(self._table)

    def __iter__(self) -> Iterator:
        for head in self._table or ():
            node = head
            while node is not None:
                yield node.key
                node = node.next

    # ---------------------------------------------------------------- putVal
    def add(self, key) -> bool:
        """``put`` / ``add``: True when the key was not there."""
        if key in self._nodes:
            return False
        h = self._kind.hash(key)
        if not self._table:
            self._resize()
        tab = self._table
        i = h & (len(tab) - 1)
        p = tab[i]
        node = Node(key, h)
        if p is None:
            tab[i] = node
        elif p.tree:
            put_tree_val(self._table, p, node, self._compare)
        else:
            bin_count = 0
            while p.next is not None:
                p = p.next
                bin_count += 1
            p.next = node
            if bin_count >= TREEIFY_THRESHOLD - 1:
                self._treeify_bin(h)
        self._nodes[key] = node
        if len(self._nodes) > self._threshold:
            self._resize()
        return True

    @property
    def settled(self) -> bool:
        """No resize is pending: a ``computeIfAbsent`` of a present key changes nothing."""
        return bool(self._table) and len(self._nodes) <= self._threshold

    def compute_if_absent(self, key) -> bool:
        """``computeIfAbsent``: unlike ``put``, it resizes *before* looking
        (when an earlier call left the size above the threshold), puts a new
        key at the *head* of its chain, and makes a tree once the chain it
        joins already held 8 keys. True when the key was not there."""
        tab = self._table
        if len(self._nodes) > self._threshold or not tab:
            self._resize()
            tab = self._table
        if key in self._nodes:
            return False
        h = self._kind.hash(key)
        i = h & (len(tab) - 1)
        first = tab[i]
        node = Node(key, h)
        if first is not None and first.tree:
            put_tree_val(tab, first, node, self._compare)
        else:
            node.next = first
            tab[i] = node
            if len(chain(first)) >= TREEIFY_THRESHOLD - 1:
                self._treeify_bin(h)
        self._nodes[key] = node
        return True

    def _resize(self) -> None:
        old = self._table
        old_cap = 0 if old is None else len(old)
        old_thr = self._threshold
        new_thr = 0
        if old_cap > 0:
            new_cap = old_cap << 1
            if old_cap >= DEFAULT_CAPACITY:
                new_thr = old_thr << 1
        elif old_thr > 0:
            new_cap = old_thr
        else:
            new_cap, new_thr = DEFAULT_CAPACITY, _threshold(DEFAULT_CAPACITY)
        if new_thr == 0:
            new_thr = _threshold(new_cap)
        self._threshold = new_thr
        tab: list[Node | None] = [None] * new_cap
        self._table = tab
        for j in range(old_cap):
            e = old[j]
            if e is None:
                continue
            if e.next is None:
                tab[e.hash & (new_cap - 1)] = e
            elif e.tree:
                split(tab, e, j, old_cap, self._compare)
            else:
                lo, hi = [], []
                while e is not None:
                    (hi if e.hash & old_cap else lo).append(e)
                    e = e.next
                for part, index in ((lo, j), (hi, j + old_cap)):
                    if part:
                        link(part)
                        tab[index] = part[0]

    def _treeify_bin(self, h: int) -> None:
        tab = self._table
        if len(tab) < MIN_TREEIFY_CAPACITY:
            self._resize()
            return
        index = h & (len(tab) - 1)
        nodes = chain(tab[index])
        prev = None
        for node in nodes:
            node.tree = True
            node.prev = prev
            prev = node
        tab[index] = nodes[0]
        treeify(tab, nodes[0], self._compare)

    # ------------------------------------------------------------ remove
    def remove(self, key) -> bool:
        """``remove``: True when the key was there."""
        node = self._nodes.pop(key, None)
        if node is None:
            return False
        tab = self._table
        index = node.hash & (len(tab) - 1)
        if node.tree:
            remove_tree_node(tab, node)
        elif tab[index] is node:
            tab[index] = node.next
        else:
            p = tab[index]
            while p.next is not node:
                p = p.next
            p.next = node.next
        return True

    # ------------------------------------------------------- tree bins
    def _compare(self, a: Node, b: Node) -> int:
        """``dir`` of treeify/putTreeVal: hash first, then compareTo."""
        if b.hash > a.hash:
            return -1
        if b.hash < a.hash:
            return 1
        ka, kb = self._kind.compare_key(a.key), self._kind.compare_key(b.key)
        if ka == kb:  # tieBreakOrder: identity hash codes, which nothing can reproduce
            raise ValueError(f"two equal {self._kind.name} keys in one Java HashMap: {a.key!r}")
        return -1 if ka < kb else 1


def inserted_order(kind: KeyKind, keys: list, capacity: int | None = None) -> list:
    """Java's iteration order of a map or set built only by adding ``keys``
    (distinct, in this order) to ``new HashMap<>(capacity)`` (``capacity``
    None: ``new HashMap<>()``).

    The fast path: while no bucket of the first table ever holds more than
    8 keys, no bucket of any later (larger) table does either, so there is
    no tree and no early resize: a chain keeps insertion order through
    every resize, and Java's order is a stable sort by the bucket of the
    final table. Otherwise the full structure is built."""
    n = len(keys)
    if n < 2:
        return list(keys)
    cap = DEFAULT_CAPACITY if capacity is None else table_size_for(capacity)
    if kind is INT_KEYS and 0 <= min(keys) and max(keys) < 1 << 16:
        hashes = keys  # Integer.hashCode, unchanged by HashMap's spreading below 2**16
    else:
        hashes = [kind.hash(k) for k in keys]
    mask = cap - 1
    counts: dict[int, int] = {}
    for h in hashes:
        b = h & mask
        c = counts.get(b, 0) + 1
        if c > TREEIFY_THRESHOLD:
            return list(JavaHashMap(kind, capacity, keys))
        counts[b] = c
    while n > _threshold(cap) and cap < MAXIMUM_CAPACITY:
        cap <<= 1
    mask = cap - 1
    order = sorted(range(n), key=lambda i: hashes[i] & mask)
    return [keys[i] for i in order]
