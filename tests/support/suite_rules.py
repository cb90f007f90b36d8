"""A rule of the test suite, checked over its sources: no group request to a
daemon or gateway picked by its place in a list of several.

Which daemon owns a group is decided by rendezvous hashing of the group id
over the live daemons (:mod:`zkcoord.core.placement`); any other daemon
answers a group request with NOT_COORDINATOR (DescribeGroups: no members).
A test that takes ``sandbox.gateway_addresses(state).split(",")[0]`` and
sends it DescribeGroups passes only when the hash happens to place the group
there (issue 23: 3 runs in 9). Tests ask the owner instead
(:func:`tests.support.wire.coordinator_client`, ``find_coordinator``), or
choose the placement (:func:`tests.support.placement.placed_name`).

:func:`positional_picks` finds, with :mod:`ast`, every place where a list
of daemon or gateway addresses is indexed by position or unpacked:

* the lists: what ``daemon_addresses`` / ``gateway_addresses`` /
  ``gateways`` / ``addresses`` (a call or an attribute) give, and the
  environment's ``ZKCOORD_GATEWAY_SERVERS`` / ``ZKCOORD_COORDINATORS``
  (``env[...]``, ``.get(...)``, ``getenv(...)``), once ``.split()``; names
  assigned such a string or list anywhere in the module carry it on
  (``gateways = sandbox.gateway_addresses(state)``, ``f"{...},{gateways}"``);
  ``sorted``/``list``/``tuple`` of a list and comprehensions over one are
  lists too;
* the picks: ``L[0]``, ``L[-1]``, ``a, b = L``, ``a, *_ = L``, ``next(iter(L))``
  (not ``(only,) = L``: it asserts the list holds one address).

A static check cannot see whether a group request follows, so a deliberate
pick says so on its own line(s): a comment ``# any-daemon: <why>`` (a
bootstrap list of a real Kafka client, which does its own FindCoordinator;
one daemon's own metrics; a placement chosen with ``placed_name``). A bare
``# any-daemon:`` with no reason does not count.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ADDRESS_LIST_NAMES = frozenset({"daemon_addresses", "gateway_addresses", "gateways", "addresses"})
ADDRESS_LIST_ENV = frozenset({"ZKCOORD_GATEWAY_SERVERS", "ZKCOORD_COORDINATORS"})
LIST_WRAPPERS = frozenset({"sorted", "list", "tuple", "reversed"})
ALLOWANCE = re.compile(r"#\s*any-daemon:\s*\S")
ADVICE = ("ask the owner: tests.support.wire.coordinator_client(<the whole list>, group) (or find_coordinator), "
          "or choose the placement with tests.support.placement.placed_name; if the position is deliberate and "
          "no group request depends on who owns the group (a bootstrap list for a client that does its own "
          "FindCoordinator, one daemon's own metrics), end the line with `# any-daemon: <why>`")


@dataclass(frozen=True)
class Pick:
    """One positional pick: where, and the source text of the statement's first line."""

    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return (f"{self.path}:{self.line}: {self.text.strip()}\n"
                f"  picks a daemon or gateway by its place in a list of several; {ADVICE}")


def _name_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _env_lookup(node: ast.AST) -> bool:
    """``x["ZKCOORD_..."]``, ``x.get("ZKCOORD_...")``, ``getenv("ZKCOORD_...")`` of a list variable."""
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif isinstance(node, ast.Call) and _name_of(node.func) in {"get", "getenv"} and node.args:
        key = node.args[0]
    else:
        return False
    return isinstance(key, ast.Constant) and key.value in ADDRESS_LIST_ENV


def _source(node: ast.AST) -> bool:
    """A string of several addresses, as the sandbox, a fleet or the environment gives it."""
    if isinstance(node, ast.Call) and _name_of(node.func) in ADDRESS_LIST_NAMES:
        return True
    if isinstance(node, ast.Attribute) and node.attr in ADDRESS_LIST_NAMES:
        return True
    return _env_lookup(node)


class _Taint:
    """Names (module-wide) holding an address string or an address list."""

    def __init__(self) -> None:
        self.strings: set[str] = set()
        self.lists: set[str] = set()

    def is_string(self, node: ast.AST) -> bool:
        if _source(node) or (isinstance(node, ast.Name) and node.id in self.strings):
            return True
        if isinstance(node, (ast.JoinedStr, ast.FormattedValue, ast.BinOp)):  # f"{a},{b}", a + "," + b
            return any(self.is_string(child) for child in ast.iter_child_nodes(node))
        return False

    def is_list(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.lists
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr in {"split", "rsplit"}:
                return self.is_string(node.func.value)
            if _name_of(node.func) in LIST_WRAPPERS and node.args:
                return self.is_list(node.args[0])
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return any(self.is_list(g.iter) for g in node.generators)
        return False

    def learn(self, tree: ast.AST) -> None:
        """Follow ``name = <address string or list>`` until nothing new is learnt."""
        assigns = [(target.id, node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                   for target in node.targets if isinstance(target, ast.Name)]
        assigns += [(node.target.id, node.value) for node in ast.walk(tree)
                    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value]
        changed = True
        while changed:
            changed = False
            for name, value in assigns:
                for kind, test in ((self.strings, self.is_string), (self.lists, self.is_list)):
                    if name not in kind and test(value):
                        kind.add(name)
                        changed = True


def _picks(tree: ast.AST, taint: _Taint) -> list[ast.AST]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and taint.is_list(node.value) and _is_position(node.slice):
            found.append(node)
        elif isinstance(node, ast.Assign) and any(_picks_by_unpacking(t) for t in node.targets) \
                and taint.is_list(node.value):
            found.append(node)
        elif (isinstance(node, ast.Call) and _name_of(node.func) == "next" and node.args
              and isinstance(node.args[0], ast.Call) and _name_of(node.args[0].func) == "iter"
              and node.args[0].args and taint.is_list(node.args[0].args[0])):
            found.append(node)
    return found


def _picks_by_unpacking(target: ast.AST) -> bool:
    """``a, b = L`` or ``a, *rest = L``; not ``(only,) = L``, which asserts one address."""
    if not isinstance(target, (ast.Tuple, ast.List)):
        return False
    return len(target.elts) > 1 or any(isinstance(e, ast.Starred) for e in target.elts)


def _is_position(index: ast.AST) -> bool:
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
        index = index.operand
    return isinstance(index, ast.Constant) and isinstance(index.value, int)


def _statement_lines(tree: ast.AST) -> dict[int, tuple[int, int]]:
    """Each line -> the (first, last) line of the innermost statement holding
    it; of a compound statement (``with``, ``for``, ``def``) its header only."""
    spans: dict[int, tuple[int, int]] = {}
    statements = sorted((n for n in ast.walk(tree) if isinstance(n, ast.stmt)),
                        key=lambda n: (n.end_lineno or n.lineno) - n.lineno, reverse=True)
    for statement in statements:  # widest first, so inner statements win
        last = statement.end_lineno or statement.lineno
        body = getattr(statement, "body", None)
        if isinstance(body, list) and body:
            last = max(statement.lineno, body[0].lineno - 1)
        for line in range(statement.lineno, last + 1):
            spans[line] = (statement.lineno, last)
    return spans


def positional_picks(source: str, path: str = "<source>") -> list[Pick]:
    """The positional picks in ``source`` with no ``# any-daemon: <why>`` on their statement."""
    tree = ast.parse(source, filename=path)
    taint = _Taint()
    taint.learn(tree)
    lines = source.splitlines()
    spans = _statement_lines(tree)
    found = set()
    for node in _picks(tree, taint):
        first, last = spans.get(node.lineno, (node.lineno, node.end_lineno or node.lineno))
        if not any(ALLOWANCE.search(lines[i - 1]) for i in range(first, last + 1)):
            found.add(Pick(path, node.lineno, lines[node.lineno - 1]))
    return sorted(found, key=lambda p: p.line)


def picks_in(paths: list[Path], root: Path) -> list[Pick]:
    """:func:`positional_picks` of every file, named relative to ``root``."""
    return [pick for path in paths
            for pick in positional_picks(path.read_text(), str(path.relative_to(root)))]
