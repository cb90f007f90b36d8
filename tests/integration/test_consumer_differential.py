"""Differential test of KIP-848's consumer groups: zkcoord answers as Kafka 4.4 does.

Each scenario sends one request sequence (ConsumerGroupHeartbeat and
ConsumerGroupDescribe, OffsetCommit/OffsetFetch v9, the classic APIs of
members inside a consumer group, ListGroups v5, DescribeGroups) to Kafka
4.4.0's coordinator (the ``kafka4`` fixture) and then to an in-process
zkcoord daemon configured the same way, each reached through
FindCoordinator. The two transcripts (:mod:`tests.support.consumer_differential`:
errors and error messages, group / member / assignment epochs, assignments
by topic name, members as ConsumerGroupDescribe shows them, member ids
aliased) must be equal, and the facts a scenario relies on (``run.expect``)
must hold on Kafka.

Both clusters hold the scenario's topics with the same names, partition
counts and topic ids; member ids are chosen by the scenario (v1 clients
choose their own), and the target assignment is computed at every change
(``group.consumer.assignment.interval.ms=0`` on both): which member gets
which partition is then the assignor's deterministic answer, not timing.

Broker settings come in *profiles* (:data:`PROFILES`): the migration policy
and the session time-out. The scenarios run grouped by profile, and Kafka
4.4 is restarted only when the profile changes (then put back as it was
when the module ends).

Where zkcoord differs on purpose, the scenario says so (an ``xfail`` with
its cause, strict, so it fails the day the difference goes) and
``docs/protocol.md`` ("KIP-848's consumer groups") says why.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from tests.support.consumer_differential import (
    REBALANCE_MS, ConsumerRun, Member, Side, cg_describe, cg_heartbeat, list_groups,
)
from tests.support.differential import NONE, diff
from tests.support.kafka_ready import wait_group_coordinator
from tests.support.wire import parse_address
from zkcoord.config import DaemonConfig
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration

SCENARIO_TIMEOUT_S = 180


@dataclass(frozen=True)
class Profile:
    """Broker settings of Kafka 4.4 and the same as a zkcoord daemon's."""

    migration_policy: str = "bidirectional"
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000

    def kafka_settings(self) -> dict[str, str]:
        return {
            "group.consumer.assignment.interval.ms": "0",
            "group.consumer.migration.policy": self.migration_policy,
            "group.consumer.session.timeout.ms": str(self.session_timeout_ms),
            "group.consumer.min.session.timeout.ms": str(min(self.session_timeout_ms, 45_000)),
            "group.consumer.heartbeat.interval.ms": str(self.heartbeat_interval_ms),
            "group.consumer.min.heartbeat.interval.ms": str(min(self.heartbeat_interval_ms, 5_000)),
        }

    def daemon_config(self, zk_hosts: str, bootstrap_servers: str) -> DaemonConfig:
        return DaemonConfig(
            zookeeper=zk_hosts, listen="127.0.0.1:0", node_id=1, zk_session_timeout_ms=6000,
            bootstrap_servers=bootstrap_servers, topic_metadata_refresh_ms=200, group_initial_rebalance_delay_ms=0,
            group_consumer_assignment_interval_ms=0, group_consumer_migration_policy=self.migration_policy,
            group_consumer_session_timeout_ms=self.session_timeout_ms,
            group_consumer_heartbeat_interval_ms=self.heartbeat_interval_ms)


BIDIRECTIONAL = Profile()
PROFILES = {"bidirectional": BIDIRECTIONAL}


@dataclass(frozen=True)
class Scenario:
    fn: object
    profile: Profile
    topics: dict[str, int] = field(default_factory=dict)  # {key: partitions} made before it starts


class ZkcoordDiffers(AssertionError):
    """zkcoord's transcript is not Kafka's (an xfail expects only this)."""


SCENARIOS: list = []


def scenario(profile: Profile = BIDIRECTIONAL, topics: dict[str, int] | None = None, xfail: str | None = None):
    """Register ``fn(run)`` as a scenario run under ``profile`` with its
    topics ``{key: partitions}`` made first; ``xfail`` names the known
    cause of a difference."""
    def register(fn):
        marks = [pytest.mark.xfail(strict=True, raises=ZkcoordDiffers, reason=xfail)] if xfail else []
        SCENARIOS.append(pytest.param(Scenario(fn, profile, topics or {"t": 3}), id=fn.__name__, marks=marks))
        return fn
    return register


async def member(run: ConsumerRun, member_id: str = "", *, client_id: str = "c", **kw) -> Member:
    return Member(run, await run.client(client_id=client_id), member_id, **kw)


# -- joining ----------------------------------------------------------------------------------

@scenario()
async def one_member_joins_v0(run: ConsumerRun) -> None:
    a = await member(run, version=0)
    await a.join("a joins without an id", topics=[run.n("t")])
    await a.heartbeat("a heartbeats")
    await run.call("describe", a.client, cg_describe(run.group))
    await run.call("list", a.client, list_groups())


@scenario(topics={"t": 4})
async def second_member_joins(run: ConsumerRun) -> None:
    """The second member's partitions move only after the first one's
    heartbeat released them (revoke first, then assign)."""
    g, t = run.group, run.n("t")
    a = await member(run, "member-a")
    await a.join("a joins", topics=[t])
    b = await member(run, "member-b", client_id="b")
    await b.join("b joins: its partitions are a's still", topics=[t])
    await run.call("describe while a revokes", a.client, cg_describe(g))
    await b.heartbeat("b heartbeats: still waiting")
    await a.heartbeat("a heartbeats: told to revoke")
    await run.call("describe after a's revocation", a.client, cg_describe(g))
    await a.heartbeat("a reports them revoked: its new epoch")
    await b.heartbeat("b heartbeats: given the released partitions")
    await b.heartbeat("b heartbeats: stable")
    await run.call("describe stable", a.client, cg_describe(g))


# -- the test ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kafka4_profile(kafka4_sandbox, kafka4):
    """``use(profile)``: Kafka 4.4 restarted with the profile's settings
    if it runs with others; its settings put back when the module ends."""
    before = dict(kafka4_sandbox.load().kafka4_settings)
    changed = False
    current = None

    def use(profile: Profile) -> None:
        nonlocal changed, current
        if profile == current:
            return
        if kafka4_sandbox.configure_kafka4(profile.kafka_settings()):
            changed = True
            wait_group_coordinator(kafka4)
        current = profile

    yield use
    if changed:
        kafka4_sandbox.configure_kafka4(before, replace=True)
        wait_group_coordinator(kafka4)


async def run_one(target: str, address: tuple[str, int], side: Side, scenario: Scenario, group: str,
                  names: dict[str, str]) -> ConsumerRun:
    run = ConsumerRun(target, address, group, side, names)
    try:
        await asyncio.wait_for(run.until_topics_seen(scenario.topics), SCENARIO_TIMEOUT_S)
        await asyncio.wait_for(scenario.fn(run), SCENARIO_TIMEOUT_S)
    except Exception as exc:
        steps = "\n".join(f"  {label}: {view}" for label, view in run.steps)
        raise AssertionError(f"{target}: {exc!r} after the steps:\n{steps}") from exc
    finally:
        await run.close()
    return run


async def run_both(scenario: Scenario, kafka4: str, kafka3: str, zookeeper: str, zk_hosts: str, group: str,
                   names: dict[str, str]) -> tuple[ConsumerRun, ConsumerRun]:
    """The scenario on Kafka 4.4, then on a zkcoord daemon (its topics made on each side first)."""
    ids: dict[str, str] = {}
    kafka_side, zkcoord_side = Side(kafka4, ids), Side(kafka3, ids, zookeeper)
    initial = {names[k]: p for k, p in scenario.topics.items()}
    await kafka_side.create_topics(initial)
    await zkcoord_side.create_topics(initial)
    kafka = await run_one("kafka", parse_address(kafka4.split(",")[0]), kafka_side, scenario, group, names)
    daemon = Daemon(scenario.profile.daemon_config(zk_hosts, kafka3))
    running = await daemon.start()
    try:
        ours = await run_one("zkcoord", running.advertised, zkcoord_side, scenario, group, names)
    finally:
        await daemon.stop()
    return kafka, ours


def compare(kafka: ConsumerRun, ours: ConsumerRun) -> None:
    assert kafka.surprises == [], "Kafka did not behave as the scenario assumes:\n" + "\n".join(kafka.surprises)
    if ours.steps != kafka.steps or ours.surprises:
        raise ZkcoordDiffers("zkcoord differs from Kafka:\n" + diff(kafka.steps, ours.steps)
                             + "".join(f"\n{s}" for s in ours.surprises))


TOPIC_KEYS = ("t", "u", "v", "late", "other")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_zkcoord_answers_as_kafka_4_4(scenario: Scenario, kafka4_profile, kafka4, services, zk_hosts, unique_name):
    kafka4_profile(scenario.profile)
    group = unique_name("g")
    names = {k: unique_name(k) for k in TOPIC_KEYS}
    kafka, ours = asyncio.run(run_both(scenario, kafka4, services.bootstrap_servers, services.zookeeper, zk_hosts,
                                       group, names))
    compare(kafka, ours)
