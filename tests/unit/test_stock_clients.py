"""The stock clients' plumbing without servers: the librdkafka consumer
script's settings, and :class:`tests.support.verifiable.ClientProcess` on a
small Python process printing VerifiableConsumer-shaped events (how each
end is recorded, what the log directory holds, read back by the checker)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from tests.faults.stock_checker import load_dir
from tests.support import rdkafka_verifiable
from tests.support.verifiable import ClientProcess

# Prints an assignment and one consumed batch, then waits for a signal; SIGTERM: a revocation and exit 0.
FAKE_CONSUMER = textwrap.dedent("""
    import json, signal, sys, time
    def emit(name, **fields):
        print(json.dumps({"name": name, "timestamp": int(time.time() * 1000), **fields}), flush=True)
    def stop(*_):
        emit("partitions_revoked", partitions=[{"topic": "t", "partition": 0}])
        emit("shutdown_complete")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    emit("startup_complete")
    print("not json: a JVM warning", flush=True)
    emit("partitions_assigned", partitions=[{"topic": "t", "partition": 0}])
    emit("records_consumed", count=3, partitions=[{"topic": "t", "partition": 0, "count": 3, "minOffset": 0,
                                                   "maxOffset": 2}])
    if len(sys.argv) > 1:
        sys.exit(int(sys.argv[1]))
    while True:
        time.sleep(0.05)
""")


def fake(tmp_path, member, *args):
    return ClientProcess(member, "consumer", [sys.executable, "-c", FAKE_CONSUMER, *args], tmp_path, "fake").start()


def consumed_one_batch(process):
    process.wait_until(lambda: process.events("records_consumed"), "a batch consumed", timeout_s=30)


def test_a_clean_stop_a_kill_and_a_death_are_recorded(tmp_path):
    clean, killed = fake(tmp_path, "a#0"), fake(tmp_path, "b#0")
    died = fake(tmp_path, "c#0", "3")
    for process in (clean, killed):
        consumed_one_batch(process)
        assert process.assignment() == {("t", 0)} and process.consumed_count() == 3
    assert clean.stop() == 0 and clean.end == "clean"
    assert [e["name"] for e in clean.events()][-2:] == ["partitions_revoked", "shutdown_complete"]
    killed.kill()
    assert killed.end == "killed" and killed.assignment() == frozenset()
    died.proc.wait(30)
    run = died.run()
    assert (run.end, run.member) == ("died", "c#0") and run.ended_ms >= died.started_ms
    killed.kill()  # idempotent
    assert killed.end == "killed"

    runs, produced = load_dir(tmp_path)
    assert produced == []
    by_member = {r.member: r for r in runs}
    assert {m: r.end for m, r in by_member.items()} == {"a#0": "clean", "b#0": "killed", "c#0": "died"}
    assert by_member["b#0"].events == killed.run().events and by_member["b#0"].ended_ms == killed.ended_ms
    assert "not json: a JVM warning" in (tmp_path / "a-0.jsonl").read_text()


def test_wait_until_says_when_the_process_exited(tmp_path):
    died = fake(tmp_path, "c#0", "3")
    with pytest.raises(AssertionError, match=r"c#0 exited \(3\) before a partition 9"):
        died.wait_until(lambda: False, "a partition 9", timeout_s=30)
    died.kill()


def test_rdkafka_settings_per_protocol():
    classic = rdkafka_verifiable.settings(rdkafka_verifiable.parse_args([
        "--bootstrap-server", "b:1", "--topic", "t", "--group-id", "g", "--session-timeout", "6000",
        "--assignment-strategy", "range", "--group-instance-id", "i1", "--property", "client.id=c1",
        "--property", "heartbeat.interval.ms=500"]))
    assert classic == {"bootstrap.servers": "b:1", "group.id": "g", "group.protocol": "classic",
                       "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": "c1",
                       "group.instance.id": "i1", "session.timeout.ms": 6000,
                       "partition.assignment.strategy": "range", "heartbeat.interval.ms": "500"}
    consumer = rdkafka_verifiable.settings(rdkafka_verifiable.parse_args([
        "--bootstrap-server", "b:1", "--topic", "t", "--group-id", "g", "--group-protocol", "consumer",
        "--session-timeout", "6000", "--assignment-strategy", "range", "--group-remote-assignor", "uniform"]))
    assert "session.timeout.ms" not in consumer and "partition.assignment.strategy" not in consumer
    assert consumer["group.remote.assignor"] == "uniform" and consumer["group.protocol"] == "consumer"
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        rdkafka_verifiable.settings(rdkafka_verifiable.parse_args([
            "--bootstrap-server", "b:1", "--topic", "t", "--group-id", "g", "--property", "nothing"]))


def test_the_events_are_verifiable_consumers_shape(capsys):
    rdkafka_verifiable.emit("records_consumed", count=1, partitions=[])
    event = json.loads(capsys.readouterr().out)
    assert set(event) == {"name", "timestamp", "count", "partitions"} and isinstance(event["timestamp"], int)
