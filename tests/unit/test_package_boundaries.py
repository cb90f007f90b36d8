"""The floors of zkcoord's packages (docs/design.md, Code layout), checked on
every import of every module.

Each package stands on a floor. A module may import its own package, the
packages of lower floors, and those of its own floor where no rule below
forbids it; never a higher floor::

    floor 0  zkcoord (its __init__), errors, password, tasks, topic_ids   the ground: values and helpers
    floor 1  core                 pure rules (tests/unit/test_core_purity.py: no adapter, no I/O)
    floor 2  security             security adapters: TLS contexts, properties and users files
    floor 3  zk, kafka, schemas, wire   the adapters: ZooKeeper, kafka-python (and the messages it
                                  lacks, generated from Kafka's JSON), the Kafka wire
    floor 4  config               the daemon's typed settings
    floor 5  gateway, server      the daemon's two listeners; zkcoord.server.daemon composes them
    floor 6  client, inspect, migrate, monitor, local   the tools and the sandbox
    floor 7  cli                  the commands
    floor 8  __main__

Beyond the floors:

* the gateway never imports the server; the server imports the gateway only
  in ``zkcoord.server.daemon`` (where the daemon is composed);
* no cycle between packages, whatever their floors, and no cycle between
  modules, but inside the packages :data:`MODULE_CYCLES_LEFT` names (cycles
  that stand there today, each with who breaks it).

What counts as an import: every ``import`` and ``from ... import`` of a
module, wherever it stands: at the top, inside a function (an import put off
for start-up time is still a dependency), and under ``if TYPE_CHECKING:``.
A type-only import counts because it ties the two packages all the same:
the reader must know the higher one to read the lower, and the next change
makes it a real import. A lower package that needs a higher one's type
defines a ``Protocol`` of its own (``zkcoord.gateway.connection.GatewayContext``,
``zkcoord.wire.authentication.ScramCredentials``).

A failure names each offending import as ``path:line``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import zkcoord

FLOORS = {
    "zkcoord": 0, "errors": 0, "password": 0, "tasks": 0, "topic_ids": 0,
    "core": 1,
    "security": 2,
    "zk": 3, "kafka": 3, "schemas": 3, "wire": 3,
    "config": 4,
    "gateway": 5, "server": 5,
    "client": 6, "inspect": 6, "migrate": 6, "monitor": 6, "local": 6,
    "cli": 7,
    "__main__": 8,
}
# (importing package, imported package) -> the only module allowed to import so (None: no module)
SAME_FLOOR_RULES = {
    ("gateway", "server"): None,
    ("server", "gateway"): "zkcoord.server.daemon",
}
# Packages whose modules still import each other in a circle: their module cycles are not checked (cycles
# between packages are). Take a package out once its circles are broken.
MODULE_CYCLES_LEFT = {
    "core": "core.groups names every kind (core.classic, core.consumer.kind), and the kinds' modules call back "
            "into core.groups and into each other (core.consumer: heartbeat <-> convert <-> classic_members)",
    "server": "GroupAdmin and GroupOffsets name their GroupManager in type hints, the manager builds both",
    "local": "the sandbox drives local.kraft (the Kafka 4.x node), which takes the sandbox's types and helpers "
             "back (type-only and deferred imports)",
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    path: str  # its file, from the repository's root
    line: int
    target: str  # the zkcoord module imported

    def __str__(self) -> str:
        return f"{self.path}:{self.line} ({self.module} imports {self.target})"


def package_of(module: str) -> str:
    """``zkcoord.wire.requests`` -> ``wire``; ``zkcoord`` -> ``zkcoord``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _modules() -> dict[str, Path]:
    """Every module of the package, by name, from its files (a folder without
    ``__init__.py`` is walked too: pkgutil would skip it)."""
    root = Path(zkcoord.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = ["zkcoord", *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(module: str, path: Path, known: set[str]) -> list[Import]:
    """Every zkcoord module ``path`` imports, anywhere in it. ``from p import
    x`` is an import of ``p.x`` when that is a module, else of ``p``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    where = _relative(path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                prefix = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{prefix}.{base}" if base else prefix
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in dict.fromkeys(targets):
            while target and target not in known:  # `import zkcoord.wire.requests.x` names a module's member
                target = target.rpartition(".")[0]
            if target and target != module:
                found.append(Import(module, where, node.lineno, target))
    return found


def _relative(path: Path) -> str:
    root = Path(zkcoord.__file__).resolve().parents[1]
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def layering_faults(imports: list[Import], floors: dict[str, int] = FLOORS,
                    rules: dict[tuple[str, str], str | None] = SAME_FLOOR_RULES) -> list[str]:
    """The imports that go up a floor, or break a same-floor rule."""
    faults = []
    for imp in imports:
        source, target = package_of(imp.module), package_of(imp.target)
        if source == target:
            continue
        if source not in floors or target not in floors:
            unknown = source if source not in floors else target
            faults.append(f"{imp}: package {unknown!r} stands on no floor; add it to FLOORS (and docs/design.md)")
        elif floors[target] > floors[source]:
            faults.append(f"{imp}: {source} (floor {floors[source]}) may not import {target} "
                          f"(floor {floors[target]})")
        elif (source, target) in rules and imp.module != rules[source, target]:
            allowed = rules[source, target]
            faults.append(f"{imp}: {source} may not import {target}"
                          + (f" (only {allowed} may)" if allowed else ""))
    return faults


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of a graph that hold more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.append(member)
                if member == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def cycle_faults(imports: list[Import], key) -> list[str]:
    """Each cycle among ``key(module)`` nodes, with the imports that close it."""
    edges: dict[str, set[str]] = {}
    for imp in imports:
        source, target = key(imp.module), key(imp.target)
        if source != target:
            edges.setdefault(source, set()).add(target)
    faults = []
    for part in cycles(edges):
        members = set(part)
        ties = [str(imp) for imp in imports
                if key(imp.module) in members and key(imp.target) in members and key(imp.module) != key(imp.target)]
        faults.append(f"cycle {' <-> '.join(part)}, through: " + "; ".join(ties))
    return faults


MODULES = _modules()
IMPORTS = [imp for module, path in MODULES.items() for imp in imports_of(module, path, set(MODULES))]


def test_every_package_stands_on_a_floor():
    assert {package_of(m) for m in MODULES} <= set(FLOORS), "add the new package to FLOORS and docs/design.md"


def test_no_import_goes_up_a_floor_or_breaks_a_same_floor_rule():
    faults = layering_faults(IMPORTS)
    assert not faults, "imports against the layering:\n  " + "\n  ".join(faults)


def test_no_cycle_between_packages():
    faults = cycle_faults(IMPORTS, package_of)
    assert not faults, "\n  ".join(faults)


def test_no_cycle_between_modules():
    def left(imp: Import) -> bool:  # an import inside one of the packages whose circles are left for later
        package = package_of(imp.module)
        return package == package_of(imp.target) and package in MODULE_CYCLES_LEFT

    checked = [imp for imp in IMPORTS if not left(imp)]
    faults = cycle_faults(checked, lambda module: module)
    assert not faults, "\n  ".join(faults)


@pytest.mark.parametrize("source, expected", [
    ("from zkcoord.server.codec import build_message\n", "kafka (floor 3) may not import server (floor 5)"),
    ("def later():\n    from zkcoord.cli import main\n", "kafka (floor 3) may not import cli (floor 7)"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zkcoord.gateway import gateway\n",
     "kafka (floor 3) may not import gateway (floor 5)"),
])
def test_the_layering_check_sees_every_kind_of_import(tmp_path, source, expected):
    path = tmp_path / "bad.py"
    path.write_text(source)
    known = {"zkcoord.server.codec", "zkcoord.cli", "zkcoord.cli.main", "zkcoord.gateway", "zkcoord.gateway.gateway"}
    faults = layering_faults(imports_of("zkcoord.kafka.bad", path, known))
    assert len(faults) == 1 and expected in faults[0] and f"{path}:" in faults[0]


def test_the_same_floor_rules_and_the_cycle_check_name_the_imports():
    imports = [Import("zkcoord.gateway.connection", "zkcoord/gateway/connection.py", 3, "zkcoord.server.transport"),
               Import("zkcoord.server.apis", "zkcoord/server/apis.py", 7, "zkcoord.gateway.gateway"),
               Import("zkcoord.server.daemon", "zkcoord/server/daemon.py", 9, "zkcoord.gateway.gateway")]
    faults = layering_faults(imports)
    assert len(faults) == 2
    assert faults[0].startswith("zkcoord/gateway/connection.py:3 ") and "gateway may not import server" in faults[0]
    assert faults[1].startswith("zkcoord/server/apis.py:7 ") and "only zkcoord.server.daemon may" in faults[1]
    cycle, = cycle_faults(imports, package_of)
    assert cycle.startswith("cycle gateway <-> server") and "zkcoord/gateway/connection.py:3" in cycle
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
