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

__all__ = [
    "JavaHashMap", "KeyKind", "INT_KEYS", "STRING_KEYS", "UUID_KEYS", "hash_set_capacity", "inserted_order",
    "int_hash", "java_string_compare_key", "string_hash", "table_size_for", "uuid_bits", "uuid_compare_key",
    "uuid_hash",
]

TREEIFY_THRESHOLD = 8
UNTREEIFY_THRESHOLD = 6
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


class _Node:
    __slots__ = ("key", "hash", "next", "prev", "parent", "left", "right", "red", "tree")

    def __init__(self, key, h: int):
        self.key = key
        self.hash = h
        self.next: _Node | None = None
        self.prev: _Node | None = None
        self.parent: _Node | None = None
        self.left: _Node | None = None
        self.right: _Node | None = None
        self.red = False
        self.tree = False


class JavaHashMap:
    """The keys of a ``java.util.HashMap`` (or the ``HashSet`` backed by
    one), laid out as Java lays them out, so that iterating gives Java's
    order. ``capacity`` None is ``new HashMap<>()``; an int is ``new
    HashMap<>(capacity)``."""

    __slots__ = ("_kind", "_table", "_threshold", "_nodes")

    def __init__(self, kind: KeyKind, capacity: int | None = None, keys: Iterable = ()):
        self._kind = kind
        self._table: list[_Node | None] | None = None
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
        node = _Node(key, h)
        if p is None:
            tab[i] = node
        elif p.tree:
            self._put_tree_val(p, node)
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
        node = _Node(key, h)
        if first is not None and first.tree:
            self._put_tree_val(first, node)
        else:
            node.next = first
            tab[i] = node
            if len(_chain(first)) >= TREEIFY_THRESHOLD - 1:
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
        tab: list[_Node | None] = [None] * new_cap
        self._table = tab
        for j in range(old_cap):
            e = old[j]
            if e is None:
                continue
            if e.next is None:
                tab[e.hash & (new_cap - 1)] = e
            elif e.tree:
                self._split(e, j, old_cap)
            else:
                lo, hi = [], []
                while e is not None:
                    (hi if e.hash & old_cap else lo).append(e)
                    e = e.next
                for part, index in ((lo, j), (hi, j + old_cap)):
                    if part:
                        _link(part)
                        tab[index] = part[0]

    def _treeify_bin(self, h: int) -> None:
        tab = self._table
        if len(tab) < MIN_TREEIFY_CAPACITY:
            self._resize()
            return
        index = h & (len(tab) - 1)
        chain = _chain(tab[index])
        prev = None
        for node in chain:
            node.tree = True
            node.prev = prev
            prev = node
        tab[index] = chain[0]
        self._treeify(chain[0])

    # ------------------------------------------------------------ remove
    def remove(self, key) -> bool:
        """``remove``: True when the key was there."""
        node = self._nodes.pop(key, None)
        if node is None:
            return False
        tab = self._table
        index = node.hash & (len(tab) - 1)
        if node.tree:
            self._remove_tree_node(node)
        elif tab[index] is node:
            tab[index] = node.next
        else:
            p = tab[index]
            while p.next is not node:
                p = p.next
            p.next = node.next
        return True

    # ------------------------------------------------------- tree bins
    def _compare(self, a: _Node, b: _Node) -> int:
        """``dir`` of treeify/putTreeVal: hash first, then compareTo."""
        if b.hash > a.hash:
            return -1
        if b.hash < a.hash:
            return 1
        ka, kb = self._kind.compare_key(a.key), self._kind.compare_key(b.key)
        if ka == kb:  # tieBreakOrder: identity hash codes, which nothing can reproduce
            raise ValueError(f"two equal {self._kind.name} keys in one Java HashMap: {a.key!r}")
        return -1 if ka < kb else 1

    def _move_root_to_front(self, root: _Node | None) -> None:
        tab = self._table
        if root is None:
            return
        index = root.hash & (len(tab) - 1)
        first = tab[index]
        if root is not first:
            tab[index] = root
            rp, rn = root.prev, root.next
            if rn is not None:
                rn.prev = rp
            if rp is not None:
                rp.next = rn
            if first is not None:
                first.prev = root
            root.next = first
            root.prev = None

    def _treeify(self, head: _Node) -> None:
        root = None
        x = head
        while x is not None:
            nxt = x.next
            x.left = x.right = None
            if root is None:
                x.parent = None
                x.red = False
                root = x
            else:
                p = root
                while True:
                    d = self._compare(x, p)
                    xp = p
                    p = p.left if d <= 0 else p.right
                    if p is None:
                        x.parent = xp
                        if d <= 0:
                            xp.left = x
                        else:
                            xp.right = x
                        root = _balance_insertion(root, x)
                        break
            x = nxt
        self._move_root_to_front(root)

    def _put_tree_val(self, first: _Node, x: _Node) -> None:
        root = _root(first) if first.parent is not None else first
        x.tree = True
        p = root
        while True:
            d = self._compare(x, p)
            xp = p
            p = p.left if d <= 0 else p.right
            if p is None:
                xpn = xp.next
                x.next = xpn
                if d <= 0:
                    xp.left = x
                else:
                    xp.right = x
                xp.next = x
                x.parent = x.prev = xp
                if xpn is not None:
                    xpn.prev = x
                self._move_root_to_front(_balance_insertion(root, x))
                return

    def _remove_tree_node(self, p: _Node) -> None:  # noqa: C901 - a transcription of Java's
        tab = self._table
        index = p.hash & (len(tab) - 1)
        first = root = tab[index]
        succ, pred = p.next, p.prev
        if pred is None:
            tab[index] = first = succ
        else:
            pred.next = succ
        if succ is not None:
            succ.prev = pred
        if first is None:
            return
        if root.parent is not None:
            root = _root(root)
        if root is None or root.right is None or root.left is None or root.left.left is None:
            tab[index] = _untreeify(first)  # too small
            return
        pl, pr = p.left, p.right
        if pl is not None and pr is not None:
            s = pr
            while s.left is not None:
                s = s.left
            s.red, p.red = p.red, s.red
            sr, pp = s.right, p.parent
            if s is pr:
                p.parent = s
                s.right = p
            else:
                sp = s.parent
                p.parent = sp
                if sp is not None:
                    if s is sp.left:
                        sp.left = p
                    else:
                        sp.right = p
                s.right = pr
                if pr is not None:
                    pr.parent = s
            p.left = None
            p.right = sr
            if sr is not None:
                sr.parent = p
            s.left = pl
            if pl is not None:
                pl.parent = s
            s.parent = pp
            if pp is None:
                root = s
            elif p is pp.left:
                pp.left = s
            else:
                pp.right = s
            replacement = sr if sr is not None else p
        elif pl is not None:
            replacement = pl
        elif pr is not None:
            replacement = pr
        else:
            replacement = p
        if replacement is not p:
            pp = replacement.parent = p.parent
            if pp is None:
                root = replacement
                root.red = False
            elif p is pp.left:
                pp.left = replacement
            else:
                pp.right = replacement
            p.left = p.right = p.parent = None
        r = root if p.red else _balance_deletion(root, replacement)
        if replacement is p:
            pp = p.parent
            p.parent = None
            if pp is not None:
                if p is pp.left:
                    pp.left = None
                elif p is pp.right:
                    pp.right = None
        self._move_root_to_front(r)

    def _split(self, head: _Node, index: int, bit: int) -> None:
        tab = self._table
        lo, hi = [], []
        for e in _chain(head):
            (hi if e.hash & bit else lo).append(e)
        for part, other, at in ((lo, hi, index), (hi, lo, index + bit)):
            if not part:
                continue
            prev = None
            for e in part:
                e.prev = prev
                prev = e
            _link(part)
            if len(part) <= UNTREEIFY_THRESHOLD:
                tab[at] = _untreeify(part[0])
            else:
                tab[at] = part[0]
                if other:
                    self._treeify(part[0])


def _chain(head: _Node | None) -> list[_Node]:
    out = []
    while head is not None:
        out.append(head)
        head = head.next
    return out


def _link(nodes: list[_Node]) -> None:
    for a, b in zip(nodes, nodes[1:]):
        a.next = b
    nodes[-1].next = None


def _untreeify(head: _Node) -> _Node:
    for node in _chain(head):
        node.tree = False
        node.prev = node.parent = node.left = node.right = None
        node.red = False
    return head


def _root(node: _Node) -> _Node:
    while node.parent is not None:
        node = node.parent
    return node


def _rotate_left(root: _Node, p: _Node | None) -> _Node:
    if p is not None and p.right is not None:
        r = p.right
        rl = p.right = r.left
        if rl is not None:
            rl.parent = p
        pp = r.parent = p.parent
        if pp is None:
            root = r
            r.red = False
        elif pp.left is p:
            pp.left = r
        else:
            pp.right = r
        r.left = p
        p.parent = r
    return root


def _rotate_right(root: _Node, p: _Node | None) -> _Node:
    if p is not None and p.left is not None:
        left = p.left
        lr = p.left = left.right
        if lr is not None:
            lr.parent = p
        pp = left.parent = p.parent
        if pp is None:
            root = left
            left.red = False
        elif pp.right is p:
            pp.right = left
        else:
            pp.left = left
        left.right = p
        p.parent = left
    return root


def _balance_insertion(root: _Node, x: _Node) -> _Node:  # noqa: C901 - a transcription of Java's
    x.red = True
    while True:
        xp = x.parent
        if xp is None:
            x.red = False
            return x
        if not xp.red or xp.parent is None:
            return root
        xpp = xp.parent
        xppl = xpp.left
        if xp is xppl:
            xppr = xpp.right
            if xppr is not None and xppr.red:
                xppr.red = False
                xp.red = False
                xpp.red = True
                x = xpp
            else:
                if x is xp.right:
                    x = xp
                    root = _rotate_left(root, x)
                    xp = x.parent
                    xpp = None if xp is None else xp.parent
                if xp is not None:
                    xp.red = False
                    if xpp is not None:
                        xpp.red = True
                        root = _rotate_right(root, xpp)
        else:
            if xppl is not None and xppl.red:
                xppl.red = False
                xp.red = False
                xpp.red = True
                x = xpp
            else:
                if x is xp.left:
                    x = xp
                    root = _rotate_right(root, x)
                    xp = x.parent
                    xpp = None if xp is None else xp.parent
                if xp is not None:
                    xp.red = False
                    if xpp is not None:
                        xpp.red = True
                        root = _rotate_left(root, xpp)


def _balance_deletion(root: _Node, x: _Node | None) -> _Node:  # noqa: C901 - a transcription of Java's
    while True:
        if x is None or x is root:
            return root
        xp = x.parent
        if xp is None:
            x.red = False
            return x
        if x.red:
            x.red = False
            return root
        xpl = xp.left
        if xpl is x:
            xpr = xp.right
            if xpr is not None and xpr.red:
                xpr.red = False
                xp.red = True
                root = _rotate_left(root, xp)
                xp = x.parent
                xpr = None if xp is None else xp.right
            if xpr is None:
                x = xp
            else:
                sl, sr = xpr.left, xpr.right
                if (sr is None or not sr.red) and (sl is None or not sl.red):
                    xpr.red = True
                    x = xp
                else:
                    if sr is None or not sr.red:
                        if sl is not None:
                            sl.red = False
                        xpr.red = True
                        root = _rotate_right(root, xpr)
                        xp = x.parent
                        xpr = None if xp is None else xp.right
                    if xpr is not None:
                        xpr.red = False if xp is None else xp.red
                        sr = xpr.right
                        if sr is not None:
                            sr.red = False
                    if xp is not None:
                        xp.red = False
                        root = _rotate_left(root, xp)
                    x = root
        else:
            if xpl is not None and xpl.red:
                xpl.red = False
                xp.red = True
                root = _rotate_right(root, xp)
                xp = x.parent
                xpl = None if xp is None else xp.left
            if xpl is None:
                x = xp
            else:
                sl, sr = xpl.left, xpl.right
                if (sl is None or not sl.red) and (sr is None or not sr.red):
                    xpl.red = True
                    x = xp
                else:
                    if sl is None or not sl.red:
                        if sr is not None:
                            sr.red = False
                        xpl.red = True
                        root = _rotate_left(root, xpl)
                        xp = x.parent
                        xpl = None if xp is None else xp.left
                    if xpl is not None:
                        xpl.red = False if xp is None else xp.red
                        sl = xpl.left
                        if sl is not None:
                            sl.red = False
                    if xp is not None:
                        xp.red = False
                        root = _rotate_right(root, xp)
                    x = root


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
