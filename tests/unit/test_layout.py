"""Layout migrations without ZooKeeper: finding and ordering the modules, the
/zkcoord/layout record, which state a layout is in and what a daemon is told,
and what migration 1 writes."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

import zkcoord.zk.layout_migrations
from zkcoord.errors import ConfigError, StateError
from zkcoord.zk.layout import (
    AppliedMigration, Layout, LayoutRecord, LayoutState, Migration, discover, ordered, refusal,
)

REPO = Path(__file__).resolve().parents[2]


def noop(client, tx):
    pass


def migration(version: int, description: str = "") -> Migration:
    return Migration(version, description or f"step {version}", f"fake.v{version:03d}", noop)


KNOWN = (migration(1, "create zkcoord's root znodes"), migration(2, "add the widgets"))


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A throw-away migrations package: ``write(name, body)``, then ``discover(name)``."""
    name = f"fake_migrations_{uuid.uuid4().hex[:8]}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(module: str, body: str) -> None:
        (root / f"{module}.py").write_text(body)

    yield SimpleNamespace(name=name, write=write)
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[loaded]


def module_body(version: int, description: str = "d") -> str:
    return f"VERSION = {version}\nDESCRIPTION = {description!r}\ndef up(client, tx):\n    pass\n"


# ------------------------------------------------------------------ discovery
def test_the_shipped_migrations_are_the_top_level_directory_in_order():
    assert Path(zkcoord.zk.layout_migrations.__file__).resolve().parent == REPO / "migrations"
    found = discover()
    files = sorted(p.stem for p in (REPO / "migrations").glob("v*.py"))
    assert [m.module.rpartition(".")[2] for m in found] == files
    assert [m.version for m in found] == list(range(1, len(files) + 1))
    assert found[0].version == 1
    assert found[0].description == "create zkcoord's root znodes"
    assert found[0].module == "zkcoord.zk.layout_migrations.v001_root_znodes"


def test_discovery_orders_by_version_and_skips_private_modules(package):
    for version in (3, 1, 10, 2, 4, 5, 6, 7, 8, 9):
        package.write(f"v{version:03d}_step_{version}", module_body(version, f"step {version}"))
    package.write("_helpers", "X = 1\n")
    found = discover(package.name)
    assert [m.version for m in found] == list(range(1, 11))
    assert [m.description for m in found] == [f"step {v}" for v in range(1, 11)]
    assert found[9].module == f"{package.name}.v010_step_10"


@pytest.mark.parametrize("files, message", [
    ({"v001_a": module_body(1), "v003_c": module_body(3)},
     "layout migrations must be numbered 1, 2, 3 ... without gaps: version 2 is missing (the next is {p}.v003_c)"),
    ({"v001_a": module_body(1), "v001_b": module_body(1)},
     "layout migrations must be numbered 1, 2, 3 ... without gaps: version 1 is defined twice ({p}.v001_a, "
     "{p}.v001_b)"),
    ({"v002_a": module_body(2)},
     "layout migrations must be numbered 1, 2, 3 ... without gaps: version 1 is missing (the next is {p}.v002_a)"),
    ({"v001_a": module_body(2)},
     "layout migration module {p}.v001_a: VERSION must be 1, as its name says, not 2"),
    ({"v001_a": "VERSION = 1\ndef up(client, tx): pass\n"},
     "layout migration module {p}.v001_a: DESCRIPTION must be a non-empty string"),
    ({"v001_a": "VERSION = 1\nDESCRIPTION = 'd'\n"},
     "layout migration module {p}.v001_a: it has no up(client, tx) function"),
    ({"root_znodes": module_body(1)},
     "layout migration module {p}.root_znodes: the name must be vNNN_<name> (lower case); rename it, or start "
     "it with '_' if it is not a migration"),
], ids=["gap", "duplicate", "not-from-1", "version-mismatch", "no-description", "no-up", "bad-name"])
def test_discovery_refuses_a_broken_set_of_migrations(package, files, message):
    for name, body in files.items():
        package.write(name, body)
    with pytest.raises(StateError) as caught:
        discover(package.name)
    assert str(caught.value) == message.format(p=package.name)


def test_a_missing_migrations_package_says_to_reinstall():
    with pytest.raises(StateError, match=r"cannot load the layout migrations no_such_pkg_x .*reinstall zkcoord"):
        discover("no_such_pkg_x")


def test_ordered_sorts_given_migrations():
    assert [m.version for m in ordered([migration(2), migration(1), migration(3)])] == [1, 2, 3]
    assert ordered([]) == ()


# ------------------------------------------------------------------ the record
def test_record_round_trip_and_append():
    first = AppliedMigration(1, "create zkcoord's root znodes", 1_795_315_596_682, "zkcoord 0.1.0 run a")
    record = LayoutRecord(0, ()).with_applied(first)
    assert json.loads(record.to_json()) == {
        "version": 1, "applied": [{"version": 1, "description": "create zkcoord's root znodes",
                                   "applied_at_ms": 1_795_315_596_682, "applied_by": "zkcoord 0.1.0 run a"}]}
    assert LayoutRecord.from_json(record.to_json()) == record
    second = record.with_applied(AppliedMigration(2, "add the widgets", 1_795_315_600_000, "b"))
    assert second.version == 2 and [a.version for a in second.applied] == [1, 2]


def test_record_ignores_keys_of_a_newer_zkcoord():
    data = b'{"version":1,"applied":[{"version":1,"description":"d","applied_at_ms":5,"x":1}],"extra":true}'
    assert LayoutRecord.from_json(data) == LayoutRecord(1, (AppliedMigration(1, "d", 5, ""),))


@pytest.mark.parametrize("data, why", [
    (b"", "JSONDecodeError"),
    (b"{not json", "JSONDecodeError"),
    (b'{"applied": []}', "KeyError: 'version'"),
    (b'{"version": "1", "applied": []}', "ValueError: '1' is not a whole number >= 0"),
    (b'{"version": 2, "applied": [{"version": 1, "description": "d", "applied_at_ms": 5}]}',
     "version 2 but the applied versions are [1]"),
    (b'{"version": 1, "applied": [{"version": 2, "description": "d", "applied_at_ms": 5}]}',
     "version 1 but the applied versions are [2]"),
])
def test_a_record_that_is_not_one_is_a_state_error_saying_what_to_do(data, why):
    with pytest.raises(StateError) as caught:
        LayoutRecord.from_json(data)
    message = str(caught.value)
    assert message.startswith(f"/zkcoord/layout holds {data[:80]!r}, not a layout record (")
    assert why in message
    assert message.endswith("restore it, or delete it and run `zkcoord migrate layout up` "
                            "(migrations only add what is missing)")


# ------------------------------------------------------------------ states
def at(version: int, *, present: tuple[str, ...] = ("/zkcoord", "/coordinators")) -> Layout:
    applied = tuple(AppliedMigration(v, f"step {v}", 1000 + v, f"run {v}") for v in range(1, version + 1))
    return Layout(LayoutRecord(version, applied), 0, present)


@pytest.mark.parametrize("found, state", [
    (Layout(None, None, ()), LayoutState.EMPTY),
    (Layout(None, None, ("/coordinators",)), LayoutState.UNINITIALISED),
    (Layout(None, None, ("/zkcoord",)), LayoutState.UNINITIALISED),
    (at(1), LayoutState.OLDER),
    (at(2), LayoutState.CURRENT),
    (at(3), LayoutState.NEWER),
])
def test_layout_states(found, state):
    assert found.state(KNOWN) is state


def test_pending_are_the_known_migrations_above_the_stored_version():
    assert [m.version for m in Layout(None, None, ()).pending(KNOWN)] == [1, 2]
    assert [m.version for m in at(1).pending(KNOWN)] == [2]
    assert at(2).pending(KNOWN) == () and at(3).pending(KNOWN) == ()


HOSTS = "zk-1:2181,zk-2:2181/kafka"


@pytest.mark.parametrize("found, message", [
    (Layout(None, None, ()), None),
    (at(2), None),
    (at(3), "ZooKeeper layout version 3 is newer than this zkcoord knows (2); upgrade zkcoord "
            f"(layout of {HOSTS}, last changed by run 3)"),
    (Layout(None, None, ("/zkcoord", "/coordinators")),
     f"the ZooKeeper layout at {HOSTS} is not initialised: it has /zkcoord, /coordinators but no /zkcoord/layout; "
     f"run `zkcoord migrate layout up --zookeeper {HOSTS}`, then start the daemon again"),
    (at(1), f"the ZooKeeper layout at {HOSTS} is version 1, older than this zkcoord needs (2; pending: 2 "
            f"(add the widgets)); run `zkcoord migrate layout up --zookeeper {HOSTS}`, then start the daemon again"),
], ids=["empty", "current", "newer", "uninitialised", "older"])
def test_what_a_daemon_is_told(found, message):
    error = refusal(found, KNOWN, HOSTS, daemon=True)
    if message is None:
        assert error is None
    else:
        assert isinstance(error, ConfigError) and str(error) == message


def test_up_refuses_only_a_newer_layout():
    assert refusal(at(1), KNOWN, HOSTS, daemon=False) is None
    assert refusal(Layout(None, None, ("/zkcoord",)), KNOWN, HOSTS, daemon=False) is None
    assert "is newer than this zkcoord knows (2)" in str(refusal(at(3), KNOWN, HOSTS, daemon=False))


# ------------------------------------------------------------------ migration 1
class FakeClient:
    def __init__(self, existing: set[str]) -> None:
        self.existing = existing

    def exists(self, path: str):
        return object() if path in self.existing else None


class FakeTransaction:
    def __init__(self) -> None:
        self.ops: list[tuple] = []

    def create(self, path: str, value: bytes = b"") -> None:
        self.ops.append(("create", path, value))


@pytest.mark.parametrize("existing, created", [
    (set(), ["/zkcoord", "/zkcoord/nodes", "/zkcoord/node-id-seq", "/zkcoord/migrations", "/coordinators"]),
    ({"/zkcoord", "/zkcoord/nodes", "/zkcoord/node-id-seq"}, ["/zkcoord/migrations", "/coordinators"]),
    ({"/zkcoord", "/zkcoord/nodes", "/zkcoord/node-id-seq", "/zkcoord/migrations", "/coordinators"}, []),
], ids=["empty", "pre-layout-daemon", "all-there"])
def test_migration_1_creates_only_the_missing_root_znodes_parents_first(existing, created):
    tx = FakeTransaction()
    discover()[0].up(FakeClient(existing), tx)
    assert tx.ops == [("create", path, b"") for path in created]
