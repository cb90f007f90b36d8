"""``zkcoord consume`` against real daemons and brokers: records printed as
JSON or text, commits after each batch so a rerun continues where the last
one stopped, and SIGTERM leaving the group at once; with ``--group-protocol
consumer`` two members split a topic, one killed -9 loses its partitions to
the other when its session runs out, every record printed once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

from tests.integration.test_client_support import (
    REPO,
    ThreadDaemons,
    create_topic,
    describe_consumer_group,
    eventually,
    produce,
    read_group_state,
)
from tests.support.daemons import process_marker
from zkcoord.cli.consume_cmd import consume

pytestmark = pytest.mark.integration


def test_consume_prints_commits_and_continues(services, zk_hosts, zk, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 3)
    produced = produce(services.bootstrap_servers, topic, range(3), 4)
    with ThreadDaemons(zk_hosts, 2) as daemons:
        env = {"ZKCOORD_BOOTSTRAP_SERVERS": services.bootstrap_servers}
        first = CliRunner().invoke(consume, [topic, "--group", group, "--coordinators", daemons.addresses,
                                             "--from-beginning", "--max-records", "5", "--output", "json",
                                             "--heartbeat-interval-ms", "500"], env=env)
        assert first.exit_code == 0, first.output
        rows = [json.loads(line) for line in first.stdout.splitlines()]
        assert len(rows) == 5
        assert all(set(r) == {"schema", "topic", "partition", "offset", "timestamp", "key", "value"} for r in rows)
        assert {r["schema"] for r in rows} == {"zkcoord/consume/v1"}
        assert all(r["topic"] == topic and r["value"] == f"value of {r['key']}" for r in rows)
        stored = {p: int(zk.get(f"/consumers/{group}/offsets/{topic}/{p}")[0])
                  for p in range(3) if zk.exists(f"/consumers/{group}/offsets/{topic}/{p}")}
        printed = {p: max(r["offset"] for r in rows if r["partition"] == p) + 1 for p in {r["partition"] for r in rows}}
        assert {p: stored.get(p, 0) for p in range(3)} == {p: printed.get(p, 0) for p in range(3)}
        assert read_group_state(zk, group)[0] == "Empty"  # left the group on exit

        second = CliRunner().invoke(consume, [topic, "--group", group, "--max-records", "7",
                                              "--zkcoord", daemons.addresses], env=env)  # the old name still works
        assert second.exit_code == 0, second.output
        lines = [line.split(" ", 4) for line in second.stdout.splitlines()]
        assert len(lines) == 7 and {t for t, *_ in lines} == {topic}
        seen = {(r["partition"], r["key"]) for r in rows} | {(int(p), key) for _, p, _, key, _ in lines}
        assert seen == produced and len(rows) + len(lines) == len(produced)  # continued, nothing twice


def test_consume_errors_are_one_line(services):
    """Registered in the ``zkcoord`` group, a wrong setting is one red line, exit 2."""
    from zkcoord.cli.main import ZkcoordGroup

    group = ZkcoordGroup(commands={"consume": consume})
    result = CliRunner().invoke(group, ["consume", "t", "--zkcoord", "127.0.0.1:9301", "--bootstrap-servers",
                                        services.bootstrap_servers], env={"ZKCOORD_GROUP_ID": ""})
    assert result.exit_code == 2
    assert "error: group_id (--group, ZKCOORD_GROUP_ID) is required" in result.output

    nowhere = CliRunner().invoke(group, ["consume", "t", "--group", "g", "--bootstrap-servers", "k:9092"],
                                 env={"ZKCOORD_COORDINATORS": ""})
    assert (nowhere.exit_code, nowhere.stderr.splitlines()[0]) == (
        2, "error: coordinators (--coordinators, ZKCOORD_COORDINATORS) is required: the zkcoord daemons as "
           "HOST:PORT[,HOST:PORT...]")
    both = CliRunner().invoke(group, ["consume", "t", "--group", "g", "--coordinators", "a:1", "--zkcoord", "b:2"])
    assert (both.exit_code, both.stderr) == (
        2, "error: --zkcoord is the old name of --coordinators: give the daemons once\n")
    shown = CliRunner().invoke(group, ["consume", "--help"]).stdout
    assert "--coordinators" in shown and "--zkcoord" not in shown  # the old name is hidden


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_leaves_the_group(services, zk_hosts, zk, unique_name, sig):
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 2)
    produce(services.bootstrap_servers, topic, range(2), 3)
    with ThreadDaemons(zk_hosts, 1) as daemons:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZKCOORD_") or k == "ZKCOORD_TEST_STATE_DIR"}
        # A session far longer than the test: only a LeaveGroup empties the group.
        proc = subprocess.Popen(
            [sys.executable, "-X", process_marker(), "-c", "from zkcoord.cli.consume_cmd import consume; consume()",
             topic,
             "--group", group, "--coordinators", daemons.addresses, "--bootstrap-servers", services.bootstrap_servers,
             "--from-beginning", "--session-timeout-ms", "120000", "--heartbeat-interval-ms", "1000"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        try:
            eventually(lambda: len(lines) == 6 or proc.poll() is not None, "6 records printed")
            assert read_group_state(zk, group)[0] == "Stable"
            proc.send_signal(sig)
            assert proc.wait(60) == 0, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.join(10)
        assert len(lines) == 6
        state, _, members = read_group_state(zk, group)
        assert (state, members) == ("Empty", [])


def _consume_process(daemons, services, topic: str, group: str, *extra: str) -> tuple[subprocess.Popen, list[str]]:
    """``zkcoord consume`` as a process of its own, its JSON lines collected as they come."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZKCOORD_") or k == "ZKCOORD_TEST_STATE_DIR"}
    proc = subprocess.Popen(
        [sys.executable, "-X", process_marker(), "-m", "zkcoord", "consume", topic, "--group", group,
         "--coordinators", daemons.addresses, "--bootstrap-servers", services.bootstrap_servers, "--from-beginning",
         "--output", "json", *extra], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    return proc, lines


def test_consume_with_the_consumer_protocol(services, zk_hosts, zk, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 4)
    with ThreadDaemons(zk_hosts, 2, bootstrap_servers=bootstrap, topic_metadata_refresh_ms=200,
                       group_consumer_assignment_interval_ms=0, group_consumer_session_timeout_ms=4_000,
                       group_consumer_heartbeat_interval_ms=500) as daemons:
        procs = []
        try:
            for name in ("a", "b"):
                procs.append(_consume_process(daemons, services, topic, group, "--group-protocol", "consumer",
                                              "--client-id", name))

            def members():
                return {m.client_id: sorted(p for t in m.assignment.topic_partitions for p in t.partitions)
                        for m in describe_consumer_group(daemons.addresses, group).members}

            eventually(lambda: sorted(map(len, members().values())) == [2, 2], "a and b own two partitions each")
            produced = produce(bootstrap, topic, range(4), 5, tag="a")
            printed = lambda: [json.loads(line) for _, lines in procs for line in list(lines)]  # noqa: E731
            eventually(lambda: len(printed()) >= len(produced), "both printed batch a")
            held_by_a = members()["a"]

            def committed(p: int) -> int:
                path = f"/consumers/{group}/offsets/{topic}/{p}"
                return int(zk.get(path)[0]) if zk.exists(path) else 0

            # consume commits after it prints: kill a only once its batch is committed, or b
            # rightly gets a's uncommitted records again (at-least-once, not this test's question)
            eventually(lambda: all(committed(p) == 5 for p in held_by_a), "a committed batch a")
            procs[0][0].kill()  # kill -9: no leave; the coordinator waits out its session
            produced |= produce(bootstrap, topic, range(4), 5, tag="b")
            eventually(lambda: members() == {"b": [0, 1, 2, 3]}, "b took a's partitions after its session")
            eventually(lambda: len(printed()) >= len(produced), "b printed batch b")
            rows = printed()
            assert sorted((r["partition"], r["key"]) for r in rows) == sorted(produced)  # once each
            assert {r["partition"] for r in rows if r["key"].startswith("b-")} >= set(held_by_a)
            b = procs[1][0]
            b.send_signal(signal.SIGTERM)
            assert b.wait(60) == 0, b.stderr.read()
            assert describe_consumer_group(daemons.addresses, group).members == []  # b left with epoch -1

            # An assignor the daemons do not offer: one error line naming the setting, no traceback.
            bad, _ = _consume_process(daemons, services, topic, unique_name("g"), "--group-protocol", "consumer",
                                      "--group-remote-assignor", "fair")
            procs.append((bad, []))
            assert bad.wait(60) == 1
            errors = bad.stderr.read().splitlines()
            assert len(errors) == 1 and errors[0].startswith("error: poll: UnsupportedAssignorError: "), errors
            assert "group_remote_assignor names an assignor the daemons do not offer" in errors[0]
        finally:
            for proc, _ in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(30)


def test_consumer_protocol_settings_errors_are_one_line(services):
    from zkcoord.cli.main import ZkcoordGroup

    group = ZkcoordGroup(commands={"consume": consume})
    base = ["consume", "t", "--group", "g", "--coordinators", "127.0.0.1:9301", "--bootstrap-servers",
            services.bootstrap_servers]
    env = {"ZKCOORD_SESSION_TIMEOUT_MS": None, "ZKCOORD_GROUP_PROTOCOL": None, "ZKCOORD_GROUP_REMOTE_ASSIGNOR": None}
    timeout = CliRunner().invoke(group, [*base, "--group-protocol", "consumer", "--session-timeout-ms", "10000"],
                                 env=env)
    assert (timeout.exit_code, timeout.stderr.splitlines()) == (2, [
        "error: session_timeout_ms cannot be set when group_protocol=consumer (as in Kafka): the coordinator "
        "decides session_timeout_ms: the daemons' group_consumer_session_timeout_ms"])
    assignor = CliRunner().invoke(group, [*base, "--group-remote-assignor", "range"], env=env)
    assert (assignor.exit_code, assignor.stderr.splitlines()) == (2, [
        "error: group_remote_assignor='range' cannot be set when group_protocol=classic: it names the "
        "coordinator's assignor of the consumer protocol (classic members use assignment_strategy)"])
    unknown = CliRunner().invoke(group, [*base, "--group-protocol", "modern"], env=env)
    assert (unknown.exit_code, unknown.stderr.splitlines()) == (2, [
        "error: group_protocol='modern' must be classic or consumer (Kafka's group.protocol)"])
