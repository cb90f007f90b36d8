"""``apply_batch`` (the Spark job's apply) on real ZooKeeper and Kafka: the
same outcome as ``apply_group``, group by group; SIGKILL after each of its
steps and a re-run: nothing lost, rewound or backed up twice; a group whose
election another owner holds is handed to ``apply_group`` and never written
behind that owner; a group with live Kafka members is refused while the
rest of the batch is applied.

Each run is a child process (``BATCH``) printing JSON lines: a ``step`` line
per group and phase reached, then one result line per group. Kafka's
committed offsets are read back with kafka-python's own admin client.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

from test_migrate_flow import kafka_offsets, layout, migration, seed, state, topic  # noqa: F401 (fixtures)
from tests.support.kafka_ready import active_kafka_member

pytestmark = pytest.mark.integration

BATCH = textwrap.dedent("""
    import asyncio, json, os, sys, time
    from zkcoord.core.migration import Options
    from zkcoord.kafka.forwarder import KafkaGroupOffsets
    from zkcoord.migrate.apply import Adapters
    from zkcoord.migrate.apply_batch import apply_batch
    from zkcoord.migrate.plan import _plan_one
    from zkcoord.zk.bulk_reads import MultiReadLegacy
    from zkcoord.zk.connection import ZkConnection

    zk_hosts, bootstrap, pause, mode_timeout_s = sys.argv[1:5]
    groups = sys.argv[5:]

    def step(group, phase):
        print(json.dumps({"step": phase, "group": group}), flush=True)
        if phase == pause:
            resume = os.environ.get("BATCH_RESUME_FILE")
            deadline = time.monotonic() + (60 if resume else 600)
            while time.monotonic() < deadline:  # the test kills us here with SIGKILL, or lets us go on
                if resume and os.path.exists(resume):
                    return
                time.sleep(0.05)

    async def main():
        async with ZkConnection(zk_hosts, request_timeout_ms=20000) as conn:
            with KafkaGroupOffsets(bootstrap, request_timeout_ms=20000) as kafka:
                legacy = await MultiReadLegacy(conn, "/consumers").read(groups)
                counts = kafka.partition_counts({t for g in legacy.values() for t, _ in g.offsets})
                ranges = kafka.log_ranges({(t, p) for g in legacy.values() for t, p in g.offsets
                                           if p < (counts.get(t) or 0)})

                def plan_for(found, committed, kafka_group):
                    return _plan_one(found, counts, ranges, committed, kafka_group, Options())

                adapters = Adapters.of(conn, kafka, mode_timeout_s=float(mode_timeout_s))
                done = await apply_batch(adapters, legacy, plan_for, on_step=step)
                for group, (result, _) in done.items():
                    print(json.dumps({"group": group, "outcome": result.outcome, "phase": result.phase,
                                      "committed": result.committed, "message": result.message,
                                      "via": result.mode.via if result.mode else None}), flush=True)

    asyncio.run(main())
""")


def start(zk_hosts: str, bootstrap: str, groups: list[str], pause: str = "none", mode_timeout_s: float = 20,
          resume_file: str | None = None):
    env = dict(os.environ, **({"BATCH_RESUME_FILE": resume_file} if resume_file else {}))
    return subprocess.Popen([sys.executable, "-c", BATCH, zk_hosts, bootstrap, pause, str(mode_timeout_s), *groups],
                            stdout=subprocess.PIPE, text=True, env=env)


def run(zk_hosts: str, bootstrap: str, groups: list[str], **kwargs) -> dict[str, dict]:
    proc = start(zk_hosts, bootstrap, groups, **kwargs)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    lines = [json.loads(line) for line in out.splitlines()]
    return {line["group"]: line for line in lines if "outcome" in line}


def seed_groups(zk, admin, topic: str, groups: list[str]) -> None:
    """Every group: legacy 10, 20, 'xyz' on partitions 0-2; Kafka already has 4 on 0 and 33 on 3."""
    for group in groups:
        seed(zk, group, {(topic, 0): b"10", (topic, 1): b"20", (topic, 2): b"xyz"})
        admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(4, "", None),
                                          TopicPartition(topic, 3): OffsetAndMetadata(33, "", None)})


def assert_migrated(zk, admin, topic: str, group: str) -> None:
    assert kafka_offsets(admin, group) == {(topic, 0): 10, (topic, 1): 20, (topic, 3): 33}
    backup = migration(zk, group, "backup")
    assert backup["kafka"] == [[topic, 0, 4], [topic, 3, 33]]  # the offsets from before, never rewritten
    assert backup["zookeeper"] == [[topic, 0, "10"], [topic, 1, "20"], [topic, 2, "xyz"]]
    record = migration(zk, group)
    assert record["phase"] == "dual"
    assert [phase for phase, _ in record["history"]] == ["backed-up", "kafka-committed", "dual"]
    assert state(zk, group)["os"] == "dual"
    owner = f"/coordinators/{group}/owner"
    assert not zk.exists(owner) or zk.get_children(owner) == []  # our contenders are gone


def test_batch_applies_every_group_as_apply_group_does(services, zk_hosts, layout, zk, admin, topic,  # noqa: F811
                                                       unique_name):
    groups = [unique_name(f"g{i}") for i in range(3)]
    seed_groups(zk, admin, topic, groups[:2])
    seed(zk, groups[2], {(topic, 0): b"5", (topic, 1): b"60", (topic, 2): b"7"})  # 60: beyond the log end
    admin.alter_group_offsets(groups[2], {TopicPartition(topic, 0): OffsetAndMetadata(40, "", None)})  # ahead

    results = run(zk_hosts, services.bootstrap_servers, groups)
    assert {g: (r["outcome"], r["phase"], r["via"]) for g, r in results.items()} == {
        g: ("applied", "dual", "direct") for g in groups}
    for group in groups[:2]:
        assert results[group]["committed"] == [[topic, 0, 10], [topic, 1, 20]]
        assert_migrated(zk, admin, topic, group)
    assert results[groups[2]]["committed"] == [[topic, 2, 7]]
    assert kafka_offsets(admin, groups[2]) == {(topic, 0): 40, (topic, 2): 7}  # never rewound, never past the end
    assert [s[:3] for s in migration(zk, groups[2])["applied"]["skipped"]] == [
        [topic, 0, "kafka-ahead-kept"], [topic, 1, "beyond-log-end-refused"]]

    again = run(zk_hosts, services.bootstrap_servers, groups)
    assert {g: r["outcome"] for g, r in again.items()} == {g: "already-done" for g in groups}
    for group in groups[:2]:
        assert_migrated(zk, admin, topic, group)


@pytest.mark.parametrize("pause", ["backed-up", "committed", "kafka-committed", "dual"])
def test_batch_killed_after_each_step_resumes_without_loss(services, zk_hosts, layout, zk, admin,  # noqa: F811
                                                           topic, unique_name, pause):  # noqa: F811
    groups = [unique_name(f"g{i}") for i in range(3)]
    seed_groups(zk, admin, topic, groups)
    proc = start(zk_hosts, services.bootstrap_servers, groups, pause)
    try:
        seen = []
        while pause not in seen:
            line = proc.stdout.readline()
            assert line, f"the batch exited early with {proc.wait()} after {seen}"
            seen.append(json.loads(line).get("step"))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    # each step is done for the whole batch before any group is reported as past it
    expected = {"backed-up": "backed-up", "committed": "backed-up", "kafka-committed": "kafka-committed",
                "dual": "dual"}[pause]
    assert {migration(zk, g)["phase"] for g in groups} == {expected}
    if pause != "dual":
        assert not any(zk.exists(f"/coordinators/{g}/state") for g in groups)  # no mode written yet

    rerun = run(zk_hosts, services.bootstrap_servers, groups)
    outcome = "already-done" if pause == "dual" else "applied"
    assert {g: (r["outcome"], r["phase"]) for g, r in rerun.items()} == {g: (outcome, "dual") for g in groups}
    if pause == "backed-up":  # the commit had not been sent: the re-run sends it
        assert all(r["committed"] == [[topic, 0, 10], [topic, 1, 20]] for r in rerun.values())
    elif pause in ("committed", "kafka-committed"):  # already in Kafka: planned equal, nothing re-sent
        assert all(r["committed"] == [] for r in rerun.values())
    for group in groups:  # the fenced multi released each election with the mode written: none left behind
        assert_migrated(zk, admin, topic, group)


def test_a_group_whose_election_another_owner_holds_is_never_written_behind_it(  # noqa: F811
        services, zk_hosts, layout, zk, admin, topic, unique_name):  # noqa: F811
    free, held = unique_name("free"), unique_name("held")
    seed_groups(zk, admin, topic, [free, held])
    contender = zk.create(f"/coordinators/{held}/owner/x__lock__", b"7", ephemeral=True, sequence=True,
                          makepath=True)  # as daemon 7 would hold it; nobody answers its mode requests

    results = run(zk_hosts, services.bootstrap_servers, [free, held], mode_timeout_s=2)
    assert (results[free]["outcome"], results[free]["via"]) == ("applied", "direct")
    assert_migrated(zk, admin, topic, free)
    assert (results[held]["outcome"], results[held]["phase"]) == ("failed", "kafka-committed")
    assert "was not switched to 'dual'" in results[held]["message"] and "node 7" in results[held]["message"]
    assert not zk.exists(f"/coordinators/{held}/state")  # fenced: never written behind its owner
    assert not zk.exists(f"/zkcoord/migrations/{held}/mode-request")  # the request was withdrawn
    assert kafka_offsets(admin, held) == {(topic, 0): 10, (topic, 1): 20, (topic, 3): 33}

    zk.delete(contender)  # the owner is gone: the re-run takes the election itself
    again = run(zk_hosts, services.bootstrap_servers, [free, held])
    assert {g: r["outcome"] for g, r in again.items()} == {free: "already-done", held: "applied"}
    assert_migrated(zk, admin, topic, held)


def test_a_group_with_active_kafka_members_is_refused_and_the_rest_applied(  # noqa: F811
        services, zk_hosts, layout, zk, admin, topic, unique_name):  # noqa: F811
    busy, idle = unique_name("busy"), unique_name("idle")
    seed_groups(zk, admin, topic, [idle])
    seed(zk, busy, {(topic, 0): b"10"})
    with active_kafka_member(services.bootstrap_servers, topic, busy):
        results = run(zk_hosts, services.bootstrap_servers, [busy, idle])
        assert results[busy]["outcome"] == "refused"
        assert "refused: 1 active member(s) in Kafka" in results[busy]["message"]
        assert migration(zk, busy) is None and not zk.exists(f"/coordinators/{busy}/state")
        assert kafka_offsets(admin, busy) == {}
        assert results[idle]["outcome"] == "applied"
        assert_migrated(zk, admin, topic, idle)


def test_a_group_never_coordinated_takes_one_multi_and_a_stale_request_goes(  # noqa: F811
        services, zk_hosts, layout, zk, admin, topic, unique_name):  # noqa: F811
    fresh, known = unique_name("fresh"), unique_name("known")
    seed_groups(zk, admin, topic, [fresh, known])
    zk.create(f"/zkcoord/migrations/{fresh}/mode-request", b'{"os": "kafka", "id": "stale"}', makepath=True)
    # a daemon coordinated `known` once: its state (members gone, mode zookeeper) and an empty election
    zk.create(f"/coordinators/{known}/state", b'{"v":1,"s":"Empty","g":3,"os":"zookeeper"}', makepath=True)
    zk.ensure_path(f"/coordinators/{known}/owner")

    results = run(zk_hosts, services.bootstrap_servers, [fresh, known])
    assert {g: (r["outcome"], r["via"]) for g, r in results.items()} == {fresh: ("applied", "direct"),
                                                                         known: ("applied", "direct")}
    for group in (fresh, known):
        assert_migrated(zk, admin, topic, group)
    assert not zk.exists(f"/zkcoord/migrations/{fresh}/mode-request")  # withdrawn in the same multi
    assert zk.get_children(f"/coordinators/{fresh}") == ["state"]  # no election was held: nothing else made
    assert state(zk, known)["g"] == 3  # the daemon's record, only its mode changed


def test_a_group_coordinated_after_the_records_were_read_goes_through_its_election(  # noqa: F811
        services, zk_hosts, layout, zk, admin, topic, unique_name, tmp_path):  # noqa: F811
    """A daemon that takes the group between the batch's read and its mode multi makes that multi fail
    (the znode it creates exists): the group goes through its election, and is never written behind."""
    group = unique_name("late")
    seed_groups(zk, admin, topic, [group])
    resume = tmp_path / "resume"
    proc = start(zk_hosts, services.bootstrap_servers, [group], pause="kafka-committed", mode_timeout_s=2,
                 resume_file=str(resume))
    try:
        while json.loads(proc.stdout.readline()).get("step") != "kafka-committed":
            pass
        assert not zk.exists(f"/coordinators/{group}")  # as the batch read it: never coordinated
        contender = zk.create(f"/coordinators/{group}/owner/x__lock__", b"7", ephemeral=True, sequence=True,
                              makepath=True)  # daemon 7 takes the group now; nobody answers its requests
        resume.touch()
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait(10)
    results = {line["group"]: line for line in map(json.loads, out.splitlines()) if "outcome" in line}
    assert (results[group]["outcome"], results[group]["phase"]) == ("failed", "kafka-committed")
    assert "node 7" in results[group]["message"]
    assert not zk.exists(f"/coordinators/{group}/state")  # fenced: never written behind its owner
    zk.delete(contender)
    again = run(zk_hosts, services.bootstrap_servers, [group])
    assert again[group]["outcome"] == "applied"
    assert_migrated(zk, admin, topic, group)


def test_commit_many_pipelines_past_the_connections_in_flight_limit(services, admin, topic, unique_name,  # noqa: F811
                                                                     monkeypatch):
    """More groups than kafka-python's 5 requests in flight per connection: every commit goes out
    pipelined, none is sent again on its own (before, all but 5 were)."""
    from zkcoord.kafka.offsets import KafkaOffsets

    groups = [unique_name(f"c{i}") for i in range(40)]
    alone = []
    with KafkaOffsets(services.bootstrap_servers, request_timeout_ms=30_000) as kafka:
        monkeypatch.setattr(kafka, "commit_offsets", lambda group, offsets: alone.append(group))
        errors = kafka.commit_many({g: {(topic, 0): i, (topic, 1): i + 1} for i, g in enumerate(groups)})
    assert errors == {g: None for g in groups}
    assert alone == []
    for i, group in enumerate(groups):
        assert kafka_offsets(admin, group) == {(topic, 0): i, (topic, 1): i + 1}
