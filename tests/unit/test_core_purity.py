"""zkcoord.core must stay pure: no adapters, no I/O, no clock, no randomness."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import zkcoord.core

FORBIDDEN_TOP = {"kazoo", "kafka", "asyncio", "socket", "click", "rich", "time", "random", "uuid"}
# Every package above the ground but the core itself; the values the core may hold (zkcoord.password,
# zkcoord.errors) stand on the ground floor (tests/unit/test_package_boundaries.py).
FORBIDDEN_ZKCOORD = {"zk", "kafka", "server", "client", "cli", "local", "migrate", "inspect", "config", "gateway",
                     "tasks", "security", "wire", "monitor", "schemas"}


def _core_modules() -> list[tuple[str, Path]]:
    found = [("zkcoord.core", Path(zkcoord.core.__file__))]
    for info in pkgutil.walk_packages(zkcoord.core.__path__, "zkcoord.core."):
        spec = importlib.util.find_spec(info.name)
        assert spec is not None and spec.origin is not None
        found.append((info.name, Path(spec.origin)))
    return found


def _imports(module: str, path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative ones resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base)
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            names.add("__import__")
    return names


def _violations(name: str) -> bool:
    parts = name.split(".")
    if parts[0] in FORBIDDEN_TOP or name == "__import__" or parts[0] == "importlib":
        return True
    return parts[0] == "zkcoord" and len(parts) > 1 and parts[1] in FORBIDDEN_ZKCOORD


def test_core_package_has_the_group_modules():
    names = {m for m, _ in _core_modules()}
    assert {"zkcoord.core.group", "zkcoord.core.errors", "zkcoord.core.membership", "zkcoord.core.group_states",
            "zkcoord.core.rebalance", "zkcoord.core.group_record",
            "zkcoord.core.group_timers", "zkcoord.core.messages"} <= names


@pytest.mark.parametrize("module, path", _core_modules(), ids=lambda v: str(v))
def test_core_module_imports_no_adapter(module, path):
    bad = sorted(n for n in _imports(module, path) if _violations(n))
    assert bad == [], f"{module} imports {bad}; zkcoord.core must stay pure"


def test_the_checker_catches_violations(tmp_path):
    src = tmp_path / "bad.py"
    src.write_text("import time\nfrom ..zk import paths\nfrom kazoo.client import KazooClient\n"
                   "from . import fine\n")
    found = _imports("zkcoord.core.bad", src)
    assert {"time", "zkcoord.zk", "kazoo.client", "zkcoord.core.fine"} <= found
    assert [n for n in sorted(found) if _violations(n)] == [
        "kazoo.client", "kazoo.client.KazooClient", "time", "zkcoord.zk", "zkcoord.zk.paths"]


def test_the_checker_forbids_the_security_adapters_but_not_the_ground_values(tmp_path):
    src = tmp_path / "bad.py"
    src.write_text("from zkcoord.security.tls import SslSettings\nfrom zkcoord.password import Password\n"
                   "from zkcoord.wire import requests\n")
    found = _imports("zkcoord.core.bad", src)
    assert [n for n in sorted(found) if _violations(n)] == [
        "zkcoord.security.tls", "zkcoord.security.tls.SslSettings", "zkcoord.wire", "zkcoord.wire.requests"]
