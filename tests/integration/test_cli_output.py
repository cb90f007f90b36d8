"""What the CLI prints when stdout is not a terminal (a pipe, ``tee``, a file;
click's CliRunner is one), against real ZooKeeper and Kafka.

* Every table keeps each row on one line and each header whole, however
  narrow the terminal it is not on (``COLUMNS=80``, the default of a pipe).
* Every ``--output json`` document is an object carrying ``"schema"``.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from test_migrate_flow import seed, topic  # noqa: F401 (a fixture)

from zkcoord.cli.main import cli

pytestmark = pytest.mark.integration


def invoke(*args: str, code: int = 0, input: str | None = None):
    result = CliRunner().invoke(cli, list(args), input=input, env={"COLUMNS": "80"})  # a pipe's width
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def boxed(stdout: str) -> list[list[str]]:
    """The cells of each line of rich's boxed tables (headers and rows) in ``stdout``."""
    return [[cell.strip() for cell in re.split("[┃│]", line)[1:-1]]
            for line in stdout.splitlines() if line.startswith(("┃", "│"))]


def document(*args: str, code: int = 0) -> dict:
    found = json.loads(invoke(*args, "--output", "json", code=code).stdout)
    assert isinstance(found, dict)
    return found


def test_migrate_tables_keep_each_row_on_one_line(services, zk_hosts, zk, topic, unique_name, tmp_path):  # noqa: F811
    long, gone = unique_name("a-legacy-group-named-as-long-as-the-demo-ones"), unique_name("no-such-topic")
    seed(zk, long, {(topic, 0): b"10", (topic, 1): b"20", (gone, 0): b"3"})
    zk.create(f"/consumers/{long}/ids/{long}_host-1-1700000000000-abcd1234", b"{}", makepath=True)
    z = ["--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers]

    plan = invoke("migrate", "plan", "--group", long, *z)
    as_json = document("migrate", "plan", "--group", long, *z)["groups"][0]
    assert boxed(plan.stdout) == [
        ["GROUP", "TOPIC", "PARTITION", "LEGACY", "KAFKA", "LOG START", "LOG END", "DECISION", "TARGET", "NOTE"],
        *([long, *("-" if p[k] is None else str(p[k]) for k in ("topic", "partition", "legacy", "kafka", "log_start",
                                                             "log_end", "decision", "target", "note"))]
          for p in as_json["partitions"])]
    assert sorted(p["decision"] for p in as_json["partitions"]) == ["copy", "copy", "topic-missing"]
    assert [f"group {long}: {note}" for note in as_json["notes"]] == [
        line for line in plan.stdout.splitlines() if line.startswith("group ")]  # each note one line
    assert any("legacy ZooKeeper consumer" in note for note in as_json["notes"])

    lines = tmp_path / "offsets.txt"
    lines.write_text(f"/consumers/{long}/offsets/{topic}/0:12\n")
    dry = invoke("migrate", "import", "--file", str(lines), "--format", "zk-lines", "--dry-run", *z[:2])
    assert boxed(dry.stdout) == [["GROUP", "TOPIC", "PARTITION", "CURRENT", "NEW"], [long, topic, "0", "10", "12"]]

    zk.delete(f"/consumers/{long}/ids", recursive=True)  # the old consumer stopped
    applied = invoke("migrate", "apply", "--group", long, *z)
    assert boxed(applied.stdout) == [
        ["GROUP", "OUTCOME", "PHASE", "COMMITTED", "SKIPPED", "MODE", "MESSAGE"],
        [long, "applied", "dual", "2", "1", "zookeeper -> dual (direct)", "-"]]
    verified = invoke("migrate", "verify", "--group", long, *z)
    assert boxed(verified.stdout) == [["GROUP", "PHASE", "RESULT", "CHECKED", "NOTES"],
                                      [long, "dual", "clean", "2",
                                       f"{gone}-0: topic {gone!r} does not exist in Kafka; not compared"]]
    status = invoke("migrate", "status", "--group", long, *z[:2])
    header, row = boxed(status.stdout)
    assert header == ["GROUP", "MODE", "PHASE", "SINCE", "LAST VERIFY"]
    assert row[:3] == [long, "dual", "dual"] and row[4].startswith("clean (")

    layout_status = invoke("migrate", "layout", "status", *z[:2])
    assert boxed(layout_status.stdout) == [["VERSION", "DESCRIPTION", "STATE", "APPLIED AT", "APPLIED BY"],
                                           boxed(layout_status.stdout)[1]]
    assert boxed(layout_status.stdout)[1][:3] == ["1", "create zkcoord's root znodes", "applied"]


def test_every_json_output_is_a_document_with_a_schema(services, zk_hosts, zk, topic, unique_name):  # noqa: F811
    group = unique_name("g")
    seed(zk, group, {(topic, 0): b"10"})
    z = ["--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers]
    context = {"zookeeper": zk_hosts, "zk_root": "/consumers", "bootstrap_servers": services.bootstrap_servers}

    assert document("migrate", "status", *z[:2]) == {
        "schema": "zkcoord/migrate-status/v1", "zookeeper": zk_hosts, "zk_root": "/consumers", "groups": []}
    plan = document("migrate", "plan", "--group", group, *z)
    assert plan["schema"] == "zkcoord/migrate-plan/v1" and [g["group"] for g in plan["groups"]] == [group]
    for command in ("apply", "verify", "finalize"):
        found = document("migrate", command, "--group", group, *z)
        assert {k: found[k] for k in ("schema", *context)} == {"schema": f"zkcoord/migrate-{command}/v1", **context}
        assert [g["group"] for g in found["groups"]] == [group]  # and exit 0: done
    status = document("migrate", "status", *z[:2])
    assert status == {"schema": "zkcoord/migrate-status/v1", "zookeeper": zk_hosts, "zk_root": "/consumers",
                      "groups": [status["groups"][0]]}
    assert (status["groups"][0]["group"], status["groups"][0]["mode"]) == (group, "kafka")
    rolled = document("migrate", "rollback", "--group", group, *z)
    assert rolled["schema"] == "zkcoord/migrate-rollback/v1" and rolled["groups"][0]["outcome"] == "rolled-back"
    assert document("migrate", "layout", "status", *z[:2])["schema"] == "zkcoord/migrate-layout-status/v1"
    assert document("groups", *z)["schema"] == "zkcoord/groups/v1"
    assert document("describe", group, *z)["schema"] == "zkcoord/describe/v1"
