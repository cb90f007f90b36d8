"""The tree bins of Java's ``HashMap``: ``HashMap.TreeNode``, transcribed.

A chain of more than 8 keys in a table of 64 buckets or more becomes a
red-black tree. Iteration still follows the bin's chain (``next``), but the
chain's order now follows the tree: the root is moved to the front after
every change, and a new key is linked in right after its tree parent. So
reproducing Java's iteration order means reproducing its tree, rotation
for rotation. Each function here is the Java method of the same name
(JDK 17 to 25 are identical), with ``tab`` the table and ``compare`` the
map's key order (hash first, then ``compareTo``). Used by
:class:`~zkcoord.core.assignors.java_hash.JavaHashMap` only.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Node", "chain", "link", "move_root_to_front", "put_tree_val", "remove_tree_node", "split", "treeify",
           "untreeify"]

UNTREEIFY_THRESHOLD = 6


class Node:
    """``HashMap.Node`` and ``TreeNode`` in one: a key, its spread hash, the chain and tree links."""

    __slots__ = ("key", "hash", "next", "prev", "parent", "left", "right", "red", "tree")

    def __init__(self, key, h: int):
        self.key = key
        self.hash = h
        self.next: Node | None = None
        self.prev: Node | None = None
        self.parent: Node | None = None
        self.left: Node | None = None
        self.right: Node | None = None
        self.red = False
        self.tree = False


Compare = Callable[[Node, Node], int]


def move_root_to_front(tab: list, root: Node | None) -> None:
    """``moveRootToFront``: the tree's root first in its bin's chain."""
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

def treeify(tab: list, head: Node, compare: Compare) -> None:
    """``treeify``: a tree of the chain from ``head``, its root moved to the front."""
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
                d = compare(x, p)
                xp = p
                p = p.left if d <= 0 else p.right
                if p is None:
                    x.parent = xp
                    if d <= 0:
                        xp.left = x
                    else:
                        xp.right = x
                    root = balance_insertion(root, x)
                    break
        x = nxt
    move_root_to_front(tab, root)

def put_tree_val(tab: list, first: Node, x: Node, compare: Compare) -> None:
    """``putTreeVal``: ``x`` into the tree bin headed by ``first``, after its parent in the chain."""
    root = root(first) if first.parent is not None else first
    x.tree = True
    p = root
    while True:
        d = compare(x, p)
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
            move_root_to_front(tab, balance_insertion(root, x))
            return

def remove_tree_node(tab: list, p: Node) -> None:  # noqa: C901 - a transcription of Java's
    """``removeTreeNode`` (movable): out of the chain, then the tree, or back to a chain when small."""
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
        root = root(root)
    if root is None or root.right is None or root.left is None or root.left.left is None:
        tab[index] = untreeify(first)  # too small
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
    r = root if p.red else balance_deletion(root, replacement)
    if replacement is p:
        pp = p.parent
        p.parent = None
        if pp is not None:
            if p is pp.left:
                pp.left = None
            elif p is pp.right:
                pp.right = None
    move_root_to_front(tab, r)

def split(tab: list, head: Node, index: int, bit: int, compare: Compare) -> None:
    """``split`` on resize: the chain in order into its low and high bins, each a tree or a chain."""
    lo, hi = [], []
    for e in chain(head):
        (hi if e.hash & bit else lo).append(e)
    for part, other, at in ((lo, hi, index), (hi, lo, index + bit)):
        if not part:
            continue
        prev = None
        for e in part:
            e.prev = prev
            prev = e
        link(part)
        if len(part) <= UNTREEIFY_THRESHOLD:
            tab[at] = untreeify(part[0])
        else:
            tab[at] = part[0]
            if other:
                treeify(tab, part[0], compare)


def chain(head: Node | None) -> list[Node]:
    out = []
    while head is not None:
        out.append(head)
        head = head.next
    return out


def link(nodes: list[Node]) -> None:
    for a, b in zip(nodes, nodes[1:]):
        a.next = b
    nodes[-1].next = None


def untreeify(head: Node) -> Node:
    for node in chain(head):
        node.tree = False
        node.prev = node.parent = node.left = node.right = None
        node.red = False
    return head


def root(node: Node) -> Node:
    while node.parent is not None:
        node = node.parent
    return node


def rotate_left(root: Node, p: Node | None) -> Node:
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


def rotate_right(root: Node, p: Node | None) -> Node:
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


def balance_insertion(root: Node, x: Node) -> Node:  # noqa: C901 - a transcription of Java's
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
                    root = rotate_left(root, x)
                    xp = x.parent
                    xpp = None if xp is None else xp.parent
                if xp is not None:
                    xp.red = False
                    if xpp is not None:
                        xpp.red = True
                        root = rotate_right(root, xpp)
        else:
            if xppl is not None and xppl.red:
                xppl.red = False
                xp.red = False
                xpp.red = True
                x = xpp
            else:
                if x is xp.left:
                    x = xp
                    root = rotate_right(root, x)
                    xp = x.parent
                    xpp = None if xp is None else xp.parent
                if xp is not None:
                    xp.red = False
                    if xpp is not None:
                        xpp.red = True
                        root = rotate_left(root, xpp)


def balance_deletion(root: Node, x: Node | None) -> Node:  # noqa: C901 - a transcription of Java's
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
                root = rotate_left(root, xp)
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
                        root = rotate_right(root, xpr)
                        xp = x.parent
                        xpr = None if xp is None else xp.right
                    if xpr is not None:
                        xpr.red = False if xp is None else xp.red
                        sr = xpr.right
                        if sr is not None:
                            sr.red = False
                    if xp is not None:
                        xp.red = False
                        root = rotate_left(root, xp)
                    x = root
        else:
            if xpl is not None and xpl.red:
                xpl.red = False
                xp.red = True
                root = rotate_right(root, xp)
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
                        root = rotate_left(root, xpl)
                        xp = x.parent
                        xpl = None if xp is None else xp.left
                    if xpl is not None:
                        xpl.red = False if xp is None else xp.red
                        sl = xpl.left
                        if sl is not None:
                            sl.red = False
                    if xp is not None:
                        xp.red = False
                        root = rotate_right(root, xp)
                    x = root
