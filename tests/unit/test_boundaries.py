"""The import graph's rooms (docs/design.md, Code layout): kazoo only behind zkcoord/zk/,
the daemon (server, gateway) below the migration toolkit, never above it.
The core's own purity is tests/unit/test_core_purity.py."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import zkcoord
from tests.unit.test_core_purity import _imports

def _modules() -> list[tuple[str, Path]]:
    found = []
    for info in pkgutil.walk_packages(zkcoord.__path__, "zkcoord."):
        spec = importlib.util.find_spec(info.name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            found.append((info.name, Path(spec.origin)))
    return found


MODULES = _modules()


def _uses_kazoo(module: str, path: Path) -> bool:
    return any(name == "kazoo" or name.startswith("kazoo.") for name in _imports(module, path))


@pytest.mark.parametrize("module, path", MODULES, ids=lambda v: str(v))
def test_kazoo_only_behind_the_zk_package(module, path):
    if module.startswith("zkcoord.zk."):
        return
    assert not _uses_kazoo(module, path), f"{module} imports kazoo; reach ZooKeeper through zkcoord.zk"


def _client_reaches(path: Path) -> list[int]:
    """Lines where ``<...>conn.client`` is used: a ZkConnection's kazoo client."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "client":
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name.endswith("conn"):
                found.append(node.lineno)
    return found


@pytest.mark.parametrize("module, path", MODULES, ids=lambda v: str(v))
def test_no_kazoo_client_outside_the_zk_package(module, path):
    """Importing no kazoo is not enough: a connection's ``.client`` is kazoo too."""
    if module.startswith("zkcoord.zk."):
        return
    lines = _client_reaches(path)
    assert not lines, f"{module} uses a ZkConnection's kazoo client (line(s) {lines}); add the call to zkcoord.zk"


@pytest.mark.parametrize("module, path", [(m, p) for m, p in MODULES
                                          if m.startswith(("zkcoord.server.", "zkcoord.gateway.", "zkcoord.zk."))],
                         ids=lambda v: str(v))
def test_the_daemon_sits_below_the_migration_toolkit(module, path):
    bad = sorted(n for n in _imports(module, path) if n == "zkcoord.migrate" or n.startswith("zkcoord.migrate."))
    assert bad == [], f"{module} imports {bad}: what the daemon and the toolkit share lives in zk/ or core/"


def test_the_checks_see_what_they_look_for(tmp_path):
    source = tmp_path / "bad.py"
    source.write_text("from kazoo.client import KazooClient\nfrom zkcoord.migrate import apply\n")
    assert _uses_kazoo("zkcoord.server.bad", source)
    assert "zkcoord.migrate" in _imports("zkcoord.server.bad", source)


def test_test_modules_have_unique_basenames():
    """pytest's default (prepend) import mode imports test modules by basename: two
    test files with one name in different folders break collection of the whole run."""
    tests = Path(__file__).resolve().parents[1]
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted(tests.rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(tests)} and {path.relative_to(tests)}")
        seen.setdefault(path.name, path)
    assert not clashes, "test files share a basename: " + "; ".join(clashes)
