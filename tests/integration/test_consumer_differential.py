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

Broker settings come in *profiles* (:class:`Profile`): the migration policy
and the session time-out. The scenarios run grouped by profile, and Kafka
4.4 is restarted only when the profile changes (then put back as it was
when the module ends); the assignment interval is a dynamic setting of the
node, set for the module without a restart and checked in effect by a
probe group.

Where zkcoord differs on purpose, the scenario says so (an ``xfail`` with
its cause, strict, so it fails the day the difference goes) and
``docs/protocol.md`` ("KIP-848's consumer groups") says why.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from dataclasses import dataclass, field

import pytest

from tests.support.consumer_differential import (
    FENCED_INSTANCE_ID, FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND, REBALANCE_MS, UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, ConsumerRun, Member, Side, assignment_bytes, cg_describe,
    assigns_at_every_change, cg_heartbeat, commit9, fetch9, list_groups, settle,
)
from tests.support.differential import (
    NONE, commit, delete, describe, diff, heartbeat, join, leave, subscription, sync, until_rebalancing,
)
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
        """The broker settings (the node's static ones) that differ from Kafka's defaults."""
        settings = {}
        if self.migration_policy != "bidirectional":
            settings["group.consumer.migration.policy"] = self.migration_policy
        if self.session_timeout_ms != 45_000:
            settings["group.consumer.session.timeout.ms"] = str(self.session_timeout_ms)
            settings["group.consumer.min.session.timeout.ms"] = str(min(self.session_timeout_ms, 45_000))
        if self.heartbeat_interval_ms != 5_000:
            settings["group.consumer.heartbeat.interval.ms"] = str(self.heartbeat_interval_ms)
            settings["group.consumer.min.heartbeat.interval.ms"] = str(min(self.heartbeat_interval_ms, 5_000))
        return settings

    def daemon_config(self, zk_hosts: str, bootstrap_servers: str) -> DaemonConfig:
        return DaemonConfig(
            zookeeper=zk_hosts, listen="127.0.0.1:0", node_id=1, zk_session_timeout_ms=6000,
            bootstrap_servers=bootstrap_servers, topic_metadata_refresh_ms=200, group_initial_rebalance_delay_ms=0,
            group_consumer_assignment_interval_ms=0, group_consumer_migration_policy=self.migration_policy,
            group_consumer_session_timeout_ms=self.session_timeout_ms,
            group_consumer_heartbeat_interval_ms=self.heartbeat_interval_ms)


BIDIRECTIONAL = Profile()


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


def RANGE_T(run: ConsumerRun, *topics: str) -> tuple:
    """A classic member's protocols: range, subscribing to the scenario's topic t (or ``topics``)."""
    return (("range", subscription(*(topics or (run.n("t"),)))),)


async def member(run: ConsumerRun, member_id: str = "", *, client_id: str = "c", **kw) -> Member:
    return Member(run, await run.client(client_id=client_id), member_id, **kw)


# -- joining ----------------------------------------------------------------------------------

@scenario()
async def one_member_joins_v0(run: ConsumerRun) -> None:
    a = await member(run, version=0, name="a")
    await a.join("a joins without an id", topics=[run.n("t")])
    await a.heartbeat("a heartbeats")
    await a.heartbeat("a heartbeats without reporting", report=False)
    await a.heartbeat("a's full heartbeat", rebalance_ms=REBALANCE_MS, topics=[run.n("t")])
    await run.call("describe", a.client, cg_describe(run.group, version=0))
    await run.call("list", a.client, list_groups())
    await a.leave("a leaves")
    await run.call("describe when empty", a.client, cg_describe(run.group))


@scenario(xfail="deliberate: without an authorizer Kafka 4.4 lists a group's operations as READ, DESCRIBE, DELETE, "
          "DESCRIBE_CONFIGS and ALTER_CONFIGS (AclEntry.supportedOperations: group configs came with KIP-848); zkcoord "
          "serves no group configs, and lists Kafka 3.9's READ, DESCRIBE, DELETE")
async def authorized_operations(run: ConsumerRun) -> None:
    a = await member(run, "member-a")
    await a.join("a joins", topics=[run.n("t")])
    await run.call("describe with the operations allowed", a.client, cg_describe(run.group, operations=True))


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


@scenario(topics={"t": 4}, xfail="deliberate: a heartbeat that does not report the partitions a member must give "
          "up frees them on Kafka 4.4 at once (ownsRevokedPartitions); zkcoord asks the member to revoke them and "
          "frees them at its next heartbeat, since Kafka's Java consumer may still be taking them (docs/protocol.md)")
async def acknowledged_owning_nothing_while_the_target_moves(run: ConsumerRun) -> None:
    """Kafka's Java consumer, answered partitions of a topic its metadata
    cannot name yet, acknowledges owning nothing; if the target moved
    meanwhile, Kafka frees what that member must give up, though the
    consumer may take it a moment later from the answer it had."""
    t = run.n("t")
    a = await member(run, "member-a")
    await a.join("a joins: all four", topics=[t])
    b = await member(run, "member-b", client_id="b")
    await b.join("b joins: its partitions are a's still", topics=[t])
    await a.heartbeat("a acknowledges owning nothing", owning={})
    await b.heartbeat("b heartbeats")
    await a.heartbeat("a reports owning nothing again", owning={})
    await b.heartbeat("b heartbeats again")
    await settle([a, b], "both settle")


@scenario(topics={"t": 6})
async def members_leave(run: ConsumerRun) -> None:
    g = run.group
    members = [await member(run, f"member-{x}", client_id=x) for x in "abc"]
    a, b, c = members
    for m in members:
        await m.join(f"{m.name} joins", topics=[run.n("t")])
    await settle(members, "three members")
    await c.leave("c leaves")
    await run.call("describe without c", a.client, cg_describe(g))
    await c.leave("c leaves again", expect=None)
    await c.heartbeat("c heartbeats after leaving", epoch=3)
    await settle([a, b], "two members")
    await b.leave("b leaves")
    await a.heartbeat("a gets b's partitions")
    await a.leave("a leaves")
    await run.call("describe when empty", a.client, cg_describe(g))
    await run.call("list", a.client, list_groups())
    await run.call("list consumer groups that are Empty", a.client, list_groups(["empty"], ["consumer"]))
    await run.call("list Stable groups", a.client, list_groups(["Stable"]))
    await a.join("a joins again", topics=[run.n("t")])
    await run.call("describe again", a.client, cg_describe(g))


@scenario(topics={"t": 4, "u": 2})
async def subscription_changes(run: ConsumerRun) -> None:
    g, t, u = run.group, run.n("t"), run.n("u")
    a, b = await member(run, "member-a"), await member(run, "member-b", client_id="b")
    await a.join("a joins on t", topics=[t])
    await b.join("b joins on t", topics=[t])
    await settle([a, b], "on t")
    await a.heartbeat("a subscribes to t and u", topics=[t, u])
    await settle([a, b], "a on t and u")
    await run.call("describe", a.client, cg_describe(g))
    await b.heartbeat("b moves to u", topics=[u])
    await settle([a, b], "b on u")
    await a.heartbeat("a sends the same names in another order", topics=[u, t, t])
    await a.heartbeat("a subscribes to a topic that does not exist", topics=[t, u, run.n("other")])
    await b.heartbeat("b subscribes to nothing", topics=[])
    await settle([a, b], "b on nothing")
    await run.call("describe at the end", a.client, cg_describe(g))


@scenario(topics={"t": 2, "u": 2})
async def regex_subscription(run: ConsumerRun) -> None:
    """A regular expression (v1) is resolved after the heartbeat that sends
    it; a topic created later is picked up when the expression is resolved
    again on an image with new topics (at most every 10 s, on a heartbeat)."""
    g = run.group
    suffix = re.escape(run.n("t")[1:])
    both = f"(t|late){suffix}"
    a, b = await member(run, "member-a"), await member(run, "member-b", client_id="b")
    await a.join("a joins with a regex", regex=both)
    await a.until("a is assigned t once the regex is resolved", a.owns_all({run.n("t"): [0, 1]}))
    await run.call("describe", a.client, cg_describe(g))
    await run.create_topics({"late": 2})
    await a.until("a is assigned the topic created later",
                  a.owns_all({run.n("t"): [0, 1], run.n("late"): [0, 1]}))
    await b.join("b joins with the same regex: resolved already", regex=both)
    await settle([a, b], "two members on the regex")
    await b.heartbeat("b adds topic names to its regex", topics=[run.n("u")])
    await settle([a, b], "b on names and the regex")
    await run.call("describe with names and regex", a.client, cg_describe(g))
    bad = await member(run, "member-c", client_id="c")
    for regex in ("(", "[a", "a**", "x{2,1}", "\\", "(?P<n>a)(?P<n>b)", ")", "\\q", "*", "a{1001}"):
        await bad.join(f"c joins with the regex {regex!r}", regex=regex, expect=None)
    await run.call("describe after the refusals", a.client, cg_describe(g))


@scenario(topics={"t": 4})
async def heartbeat_details(run: ConsumerRun) -> None:
    """What a heartbeat may carry besides its subscription: a rack, its own
    member id at v0, partitions that are not its own or do not exist."""
    g, t = run.group, run.n("t")
    a = await member(run, "member-a", version=0)
    await a.join("a joins at v0 with an id of its own and a rack", topics=[t], rack="rack-1")
    b = await member(run, "member-b", client_id="b")
    await b.join("b joins", topics=[t])
    await a.heartbeat("a reports a topic that does not exist", owning_ids=[(uuid.UUID(int=12345), [0])])
    await a.heartbeat("a reports partitions beyond the count", owning={t: [0, 1, 7, -1]})
    await a.heartbeat("a reports nothing it owns", owning={})
    await settle([a, b], "a and b")
    await a.heartbeat("a changes its rack", rack="rack-2")
    await a.heartbeat("a sends an empty rebalance time-out and no subscription", rebalance_ms=0)
    await run.call("describe", b.client, cg_describe(g))
    s = await member(run, "static-s", instance="i1", client_id="s")
    await s.join("s joins", topics=[t])
    await settle([a, b, s], "three members")
    await s.leave("s leaves for a while", epoch=-2)
    await s.join("s comes back with the same member id", topics=[t])
    await settle([a, b, s], "s back")
    await s.leave("s leaves for good")
    await s.leave("s leaves again", expect=None)
    await settle([a, b], "without s")
    await run.call("describe at the end", b.client, cg_describe(g))


@scenario(topics={"t": 4})
async def classic_static_member_in_a_consumer_group(run: ConsumerRun) -> None:
    """A classic static member (group.instance.id) in a consumer group: it
    joins without MEMBER_ID_REQUIRED, a restart with a new id replaces it."""
    g, t = run.group, run.n("t")
    m = await member(run, "member-m", client_id="m")
    await m.join("m joins", topics=[t])
    c = await run.client(client_id="classic")
    joined = await run.call("c joins with an instance id", c, join(g, instance="i1", protocols=RANGE_T(run)))
    c_id = joined.member_id
    await run.call("c syncs", c, sync(g, c_id, joined.generation_id, instance="i1"))
    await m.heartbeat("m is told to revoke")
    await m.heartbeat("m revoked")
    await run.call("c heartbeats", c, heartbeat(g, c_id, joined.generation_id, instance="i1"))
    generation = await classic_rejoin(run, "c", c, c_id, joined.generation_id, instance="i1")
    restarted = await run.client(client_id="classic-2")
    again = await run.call("i1 restarts with a new member id", restarted, join(g, instance="i1",
                                                                                 protocols=RANGE_T(run)))
    await run.call("the old id heartbeats", c, heartbeat(g, c_id, generation, instance="i1"))
    await run.call("the old id syncs", c, sync(g, c_id, generation, instance="i1"))
    await run.call("the new id syncs", restarted, sync(g, again.member_id, again.generation_id, instance="i1"))
    await run.call("describe", m.client, cg_describe(g))
    await run.call("an unknown instance id heartbeats", c, heartbeat(g, "ghost", 1, instance="i9"))
    await run.call("i1 leaves by instance id", restarted, leave(g, ("", "i1")))
    await m.heartbeat("m gets everything back")
    await run.call("describe at the end", m.client, cg_describe(g))


# -- errors -------------------------------------------------------------------------------------

@scenario(topics={"t": 4})
async def fenced_epochs(run: ConsumerRun) -> None:
    g, t = run.group, run.n("t")
    a, b = await member(run, "member-a"), await member(run, "member-b", client_id="b")
    await a.join("a joins", topics=[t])
    await b.join("b joins", topics=[t])
    await settle([a, b], "two members")
    epoch = a.epoch
    await a.heartbeat("a, a greater epoch", epoch=epoch + 1, expect=FENCED_MEMBER_EPOCH)
    await a.heartbeat("a, a smaller epoch", epoch=epoch - 2, expect=FENCED_MEMBER_EPOCH)
    await a.heartbeat("a, its previous epoch with what it owns", epoch=epoch - 1)
    await a.heartbeat("a, its previous epoch, owned not reported", epoch=epoch - 1, report=False)
    await a.heartbeat("a, its previous epoch, owning more", epoch=epoch - 1, owning={t: [0, 1, 2, 3]})
    await a.heartbeat("a, its epoch, owning more", owning={t: [0, 1, 2, 3]})
    await run.call("describe", a.client, cg_describe(g))
    ghost = Member(run, a.client, "ghost")
    ghost.epoch = 1
    await ghost.heartbeat("an unknown member", expect=UNKNOWN_MEMBER_ID)
    await ghost.leave("an unknown member leaves", expect=UNKNOWN_MEMBER_ID)
    await a.join("a joins again with epoch 0, its id kept", topics=[t])
    await settle([a, b], "after a's rejoin")
    await run.call("describe at the end", a.client, cg_describe(g))


@scenario(topics={"t": 4})
async def static_members(run: ConsumerRun) -> None:
    g, t = run.group, run.n("t")
    s1 = await member(run, "static-1", instance="i1", client_id="s1")
    s2 = await member(run, "static-2", instance="i2", client_id="s2")
    await s1.join("i1 joins", topics=[t])
    await s2.join("i2 joins", topics=[t])
    await settle([s1, s2], "two static members")
    twin = await member(run, "static-1-twin", instance="i1", client_id="s1b")
    await twin.join("another member claims i1", topics=[t], expect=UNRELEASED_INSTANCE_ID)
    await s1.leave("i1 leaves for a while", epoch=-2)
    await run.call("describe while i1 is away", s2.client, cg_describe(g))
    await s2.heartbeat("i2 heartbeats while i1 is away")
    await s1.heartbeat("i1's old id heartbeats at epoch -2", epoch=-2, expect=None)
    await twin.join("i1 comes back with a new member id", topics=[t])
    await twin.heartbeat("i1's new member heartbeats")
    await run.call("describe after i1's return", s2.client, cg_describe(g))
    s1.epoch = twin.epoch
    await s1.heartbeat("i1's old id heartbeats", expect=FENCED_INSTANCE_ID)
    await s1.leave("i1's old id leaves", expect=FENCED_INSTANCE_ID)
    stranger = Member(run, s2.client, "static-9", instance="i9")
    stranger.epoch = 1
    await stranger.heartbeat("an unknown instance id", expect=UNKNOWN_MEMBER_ID)
    await stranger.leave("an unknown instance id leaves", expect=UNKNOWN_MEMBER_ID)
    await stranger.leave("an unknown instance id leaves for a while", epoch=-2, expect=UNKNOWN_MEMBER_ID)
    await twin.leave("i1 leaves for good")
    await settle([s2], "i2 alone")
    await run.call("describe at the end", s2.client, cg_describe(g))


@scenario()
async def invalid_requests(run: ConsumerRun) -> None:
    """Every check of Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, in its order."""
    g, t = run.group, [run.n("t")]
    c = await run.client()

    async def send(label, version=1, **kw):
        fields = {"rebalance_ms": REBALANCE_MS, "topics": t, "owned": [], **kw}
        group = fields.pop("group", g)
        await run.call(label, c, cg_heartbeat(group, version=version, **fields))

    await send("v1 without a member id")
    await send("v1, a blank member id", member_id="  ")
    await send("v1, no member id and no group id", group="")
    await send("v0, a heartbeat without a member id", version=0, epoch=1)
    await send("v0, a leave without a member id", version=0, epoch=-1)
    await send("v0, a static leave without a member id nor instance id", version=0, epoch=-2)
    await send("no group id", member_id="m", group="")
    await send("a blank group id", member_id="m", group=" \t")
    await send("a group id of control characters", member_id="m", group="\x01\x1f")
    await send("a blank instance id", member_id="m", instance=" ")
    await send("a blank rack id", member_id="m", rack="")
    await send("a join without a rebalance time-out", member_id="m", rebalance_ms=-1)
    await send("a join without its partitions", member_id="m", owned=None)
    await send("a join owning partitions", member_id="m", owned=[(await run.topic_id(run.n("t")), [0])])
    await send("a join without a subscription", member_id="m", topics=None)
    await send("a static leave without an instance id", member_id="m", epoch=-2)
    await send("epoch -3", member_id="m", epoch=-3)
    await send("an unknown assignor", member_id="m", assignor="sticky")
    await send("an unknown assignor and a bad epoch", member_id="m", assignor="sticky", epoch=-3)
    await send("an assignor named in another case", member_id="m", assignor="Range")
    await send("a member id of an ideographic space", member_id="\u3000")
    await send("it leaves", member_id="\u3000", epoch=-1)
    await send("a join naming the same topic twice", member_id="m", topics=t + t)
    await run.call("describe", c, cg_describe(g))


@scenario()
async def unknown_and_classic_groups(run: ConsumerRun) -> None:
    g = run.group
    c = await run.client()
    ghost = Member(run, c, "member-a")
    ghost.epoch = 1
    await ghost.heartbeat("a heartbeat to a group that does not exist", expect=GROUP_ID_NOT_FOUND)
    await ghost.leave("a leave from a group that does not exist", expect=GROUP_ID_NOT_FOUND)
    static_ghost = Member(run, c, "member-s", instance="i1")
    await static_ghost.leave("a static leave from a group that does not exist", epoch=-2, expect=GROUP_ID_NOT_FOUND)
    await run.call("describe a group that does not exist", c, cg_describe(g, g + "-other", ""))
    await run.call("describe it with DescribeGroups", c, describe(g))
    # a classic group with a member
    classic = g + "-classic"
    cc = await run.client(classic, client_id="classic")
    asked = await run.call("a classic member asks for an id", cc, join(classic, protocols=RANGE_T(run)))
    joined = await run.call("a classic member joins", cc, join(classic, asked.member_id, protocols=RANGE_T(run)))
    await run.call("the classic leader syncs", cc, sync(classic, joined.member_id, joined.generation_id, {
        joined.member_id: assignment_bytes({run.n("t"): [0, 1, 2]})}))
    await run.call("ConsumerGroupDescribe of a classic group", cc, cg_describe(classic))
    other = Member(run, cc, "member-b", group=classic)
    other.epoch = 1
    await other.heartbeat("a consumer heartbeat to a classic group", expect=GROUP_ID_NOT_FOUND)
    await run.call("list", c, list_groups())
    await run.call("list classic groups", c, list_groups(types=["classic"]))
    await run.call("the classic member leaves", cc, leave(classic, (joined.member_id, None)))
    await run.call("ConsumerGroupDescribe of the empty classic group", cc, cg_describe(classic))
    await other.heartbeat("a consumer heartbeat to the empty classic group", expect=GROUP_ID_NOT_FOUND)
    simple = "simple-" + g  # not listed by zkcoord (scenario offsets_only_group_is_listed)
    sc = await run.client(simple, client_id="simple")
    await run.call("a commit makes a simple group", sc, commit(simple, run.n("t"), {0: 3}))
    await run.call("ConsumerGroupDescribe of the simple group", sc, cg_describe(simple))
    lone = Member(run, sc, "member-c", group=simple)
    lone.epoch = 1
    await lone.heartbeat("a consumer heartbeat to the simple group", expect=GROUP_ID_NOT_FOUND)
    await lone.leave("a consumer leave from the simple group", expect=GROUP_ID_NOT_FOUND)
    # a consumer group seen through the classic APIs
    a = Member(run, c, "member-a")
    await a.join("a joins", topics=[run.n("t")])
    await run.call("DescribeGroups of a consumer group", c, describe(g))
    await run.call("DescribeGroups v0 of a consumer group", c, describe(g, version=0))
    await run.call("list both", c, list_groups())
    await run.call("list consumer groups", c, list_groups(types=["consumer"]))
    await run.call("list Stable consumer groups", c, list_groups(states=["stable"], types=["Consumer"]))
    await run.call("delete the consumer group", c, delete(g))
    await a.leave("a leaves")
    await run.call("delete it when empty", c, delete(g))
    await run.call("describe after the delete", c, cg_describe(g))


@scenario(xfail="ListGroups lists the groups a daemon has loaded with a state or members "
          "(zkcoord/server/group_admin.py), not a group that only has committed offsets, which Kafka lists as an "
          "Empty classic group with protocol type \"\"")
async def offsets_only_group_is_listed(run: ConsumerRun) -> None:
    c = await run.client()
    await run.call("a commit makes a simple group", c, commit(run.group, run.n("t"), {0: 3}))
    await run.call("list", c, list_groups())


@scenario(topics={"t": 4, "u": 3})
async def server_assignors(run: ConsumerRun) -> None:
    g, topics = run.group, [run.n("t"), run.n("u")]
    a = await member(run, "member-a")
    b = await member(run, "member-b", client_id="b")
    c = await member(run, "member-c", client_id="c")
    await a.join("a joins with range", topics=topics, assignor="range")
    await b.join("b joins with range", topics=topics, assignor="range")
    await settle([a, b], "two on range")
    await run.call("describe: range", a.client, cg_describe(g))
    await c.join("c joins with uniform", topics=topics, assignor="uniform")
    await settle([a, b, c], "range 2, uniform 1")
    await b.heartbeat("b switches to uniform", assignor="uniform")
    await settle([a, b, c], "range 1, uniform 2")
    await run.call("describe: uniform", a.client, cg_describe(g))
    await a.heartbeat("a names no assignor: it keeps range", assignor=None)
    await c.heartbeat("c switches to range", assignor="range")
    await settle([a, b, c], "range 2, uniform 1 again")
    await run.call("describe: range again", a.client, cg_describe(g))
    d = await member(run, "member-d", client_id="d")
    await d.join("d names an assignor there is not", topics=topics, assignor="cooperative-sticky",
                 expect=UNSUPPORTED_ASSIGNOR)
    await a.heartbeat("a names an assignor there is not", assignor="sticky", expect=UNSUPPORTED_ASSIGNOR)


@scenario(topics={"t": 4, "u": 3}, xfail="deliberate: with as many members naming each of two assignors, "
          "Kafka 4.4 compares the preferred assignor of two differently ordered maps (a TimelineHashMap, and a "
          "HashMap copy where the heartbeating member's own assignor moves last), so the group epoch moves on at "
          "some heartbeats for as long as the tie lasts; zkcoord picks one assignor, the same at every heartbeat "
          "(docs/protocol.md)")
async def assignor_tie(run: ConsumerRun) -> None:
    g, topics = run.group, [run.n("t"), run.n("u")]
    a = await member(run, "member-a")
    b = await member(run, "member-b", client_id="b")
    await a.join("a joins with range", topics=topics, assignor="range")
    await b.join("b joins with uniform", topics=topics, assignor="uniform")
    for n in range(1, 5):  # not settle(): on Kafka it never settles
        await a.heartbeat(f"a heartbeats, round {n}")
        await b.heartbeat(f"b heartbeats, round {n}")
    await run.call("describe: the tie", a.client, cg_describe(g))


@scenario(topics={"t": 2})
async def partitions_added(run: ConsumerRun) -> None:
    g, t = run.group, run.n("t")
    a, b = await member(run, "member-a"), await member(run, "member-b", client_id="b")
    await a.join("a joins", topics=[t])
    await b.join("b joins", topics=[t])
    await settle([a, b], "two partitions")
    await run.add_partitions({"t": 5})
    await a.until("a's epoch moves on once the coordinator sees 5 partitions", lambda r: r.member_epoch > b.epoch)
    await settle([a, b], "five partitions")
    await run.call("describe", a.client, cg_describe(g))


@scenario(topics={"t": 4})
async def rebalance_time_out(run: ConsumerRun) -> None:
    """A member that does not revoke within its rebalance time-out is fenced."""
    g, t = run.group, run.n("t")
    a = await member(run, "member-a")
    b = await member(run, "member-b", client_id="b")
    await a.join("a joins, a 2 s rebalance time-out", topics=[t], rebalance_ms=2000)
    holding = dict(a.owns)
    await b.join("b joins", topics=[t])
    await a.heartbeat("a is told to revoke")
    await a.until("a keeps its partitions until it is fenced", lambda r: r.error_code != NONE, owning=holding)
    await b.until("b gets every partition", b.owns_all({t: [0, 1, 2, 3]}))
    await run.call("describe", b.client, cg_describe(g))
    await a.join("a joins again", topics=[t])
    await settle([a, b], "a back")


# -- offsets ----------------------------------------------------------------------------------

@scenario(topics={"t": 2})
async def offset_commits_with_member_epochs(run: ConsumerRun) -> None:
    g, t = run.group, run.n("t")
    a, b = await member(run, "member-a"), await member(run, "member-b", client_id="b")
    c = a.client
    await a.join("a joins", topics=[t])
    epoch = a.epoch
    await run.call("a commits at its epoch", c, commit9(g, {t: {0: 10, 1: 11}}, member_id=a.member_id, epoch=epoch))
    await run.call("a commits at a newer epoch", c, commit9(g, {t: {0: 12}}, member_id=a.member_id, epoch=epoch + 1))
    await run.call("a commits at an older epoch", c, commit9(g, {t: {0: 12}}, member_id=a.member_id, epoch=epoch - 1))
    await run.call("an unknown member commits", c, commit9(g, {t: {0: 12}}, member_id="ghost", epoch=epoch))
    await run.call("an anonymous commit to a group with members", c, commit9(g, {t: {0: 12}}))
    await run.call("a commits with OffsetCommit v8", c, commit9(g, {t: {0: 12}}, member_id=a.member_id, epoch=epoch,
                                                                  version=8))
    await b.join("b joins", topics=[t])
    await a.heartbeat("a is told to revoke one partition")
    await run.call("a commits both while revoking", c, commit9(g, {t: {0: 20, 1: 21}}, member_id=a.member_id,
                                                               epoch=a.epoch))
    await a.heartbeat("a revoked it")
    await run.call("a commits both at its previous epoch", c, commit9(g, {t: {0: 30, 1: 31}}, member_id=a.member_id,
                                                                      epoch=epoch))
    await b.heartbeat("b is given it")
    await run.call("b commits at its epoch", b.client, commit9(g, {t: {0: 40, 1: 41}}, member_id=b.member_id,
                                                               epoch=b.epoch))
    await run.call("fetch", c, fetch9(g, None))
    await a.leave("a leaves")
    await b.leave("b leaves")
    await run.call("an anonymous commit to the empty group", c, commit9(g, {t: {1: 50}}))
    await run.call("a commit with an epoch to the empty group", c, commit9(g, {t: {1: 51}}, member_id="ghost",
                                                                           epoch=3))
    await run.call("fetch at the end", c, fetch9(g, {t: [0, 1]}))
    await run.call("describe", c, cg_describe(g))
    await run.call("delete the empty group", c, delete(g))
    await run.call("fetch after the delete", c, fetch9(g, None))
    other = g + "-none"
    c2 = await run.client(other)
    await run.call("a v9 commit with an epoch to a group that does not exist", c2,
                   commit9(other, {t: {0: 1}}, member_id="ghost", epoch=1))
    await run.call("a v8 commit with a generation to a group that does not exist", c2,
                   commit9(other, {t: {0: 1}}, member_id="ghost", epoch=1, version=8))
    await run.call("a v9 anonymous commit to a group that does not exist", c2, commit9(other, {t: {0: 1}}))
    await run.call("describe it", c2, describe(other))


@scenario(topics={"t": 2})
async def offset_fetch_with_member_epochs(run: ConsumerRun) -> None:
    g, t = run.group, run.n("t")
    a = await member(run, "member-a")
    c = a.client
    await a.join("a joins", topics=[t])
    await run.call("a commits", c, commit9(g, {t: {0: 10}}, member_id=a.member_id, epoch=a.epoch))
    await run.call("a fetches at its epoch", c, fetch9(g, {t: [0]}, member_id=a.member_id, epoch=a.epoch))
    await run.call("a fetches at another epoch", c, fetch9(g, {t: [0]}, member_id=a.member_id, epoch=a.epoch + 1))
    await run.call("an unknown member fetches", c, fetch9(g, {t: [0]}, member_id="ghost", epoch=1))
    await run.call("a fetch naming no member", c, fetch9(g, {t: [0]}))


# -- classic members in a consumer group, online upgrade and downgrade ------------------------------

async def classic_member(run: ConsumerRun, label: str, client, group: str | None = None, **kw):
    """A classic member joins (v5: through MEMBER_ID_REQUIRED); returns its JoinGroup answer."""
    group = group or run.group
    kw.setdefault("protocols", RANGE_T(run))
    asked = await run.call(f"{label} asks for an id", client, join(group, **kw))
    return await run.call(f"{label} joins", client, join(group, asked.member_id, **kw))


async def classic_group(run: ConsumerRun, partitions: int, **join_kw) -> tuple:
    """Two classic members, c1 leading, each with half the partitions of t:
    ((client, id), (client, id)); ``join_kw``: their time-outs."""
    g, t = run.group, run.n("t")
    c1, c2 = await run.client(client_id="c1"), await run.client(client_id="c2")
    first = await classic_member(run, "c1", c1, **join_kw)
    c1_id = first.member_id
    await run.call("c1 syncs", c1, sync(g, c1_id, 1, {c1_id: assignment_bytes({t: range(partitions)})}))
    asked = await run.call("c2 asks for an id", c2, join(g, protocols=RANGE_T(run), **join_kw))
    c2_join = run.send(c2, join(g, asked.member_id, protocols=RANGE_T(run), **join_kw))
    await until_rebalancing(run, "c1 heartbeat sees c2", c1, c1_id, 1)
    await run.call("c1 rejoins", c1, join(g, c1_id, protocols=RANGE_T(run), **join_kw))
    c2_id = (await run.wait("c2 joined", c2_join)).member_id
    half = partitions // 2
    c2_sync = run.send(c2, sync(g, c2_id, 2))
    await run.call("c1 syncs generation 2", c1, sync(g, c1_id, 2, {
        c1_id: assignment_bytes({t: range(half)}), c2_id: assignment_bytes({t: range(half, partitions)})}))
    await run.wait("c2 synced", c2_sync)
    return (c1, c1_id), (c2, c2_id)


async def classic_rejoin(run: ConsumerRun, label: str, client, member_id: str, generation: int, **kw):
    """A classic member of a consumer group told to rejoin: JoinGroup, then SyncGroup at its new generation."""
    joined = await run.call(f"{label} rejoins", client, join(run.group, member_id, protocols=RANGE_T(run), **kw))
    await run.call(f"{label} syncs", client, sync(run.group, member_id, joined.generation_id, **kw))
    return joined.generation_id


@scenario(topics={"t": 6})
async def online_upgrade_and_downgrade(run: ConsumerRun) -> None:
    """A consumer-protocol member joining a classic group converts it; when
    the last consumer-protocol member leaves, it becomes classic again.
    (Range, which orders members by id: the classic members' ids are
    "c1-<UUID>" and "c2-<UUID>" on both sides, where uniform would deal
    spare partitions in the HashMap order of ids each coordinator drew; one
    classic member left at the downgrade, where two would make the leader
    the first of those ids.)"""
    g, t = run.group, run.n("t")
    (c1, c1_id), (c2, c2_id) = await classic_group(run, 6)
    m = await member(run, "member-m", client_id="m")
    await m.join("m joins the classic group: it becomes a consumer group", topics=[t], assignor="range")
    await run.call("describe the upgraded group", m.client, cg_describe(g))
    await run.call("list", m.client, list_groups())
    await run.call("DescribeGroups of it", m.client, describe(g))
    await run.call("c1 heartbeats", c1, heartbeat(g, c1_id, 2))
    gen1 = await classic_rejoin(run, "c1", c1, c1_id, 2)
    await run.call("c2 heartbeats", c2, heartbeat(g, c2_id, 2))
    await classic_rejoin(run, "c2", c2, c2_id, 2)
    await m.heartbeat("m heartbeats")
    await run.call("c1 heartbeats again", c1, heartbeat(g, c1_id, gen1))
    await run.call("describe the consumer group", m.client, cg_describe(g))
    await run.call("c2 leaves", c2, leave(g, (c2_id, None)))
    await m.heartbeat("m heartbeats without c2")
    await run.call("c1 heartbeats without c2", c1, heartbeat(g, c1_id, gen1))
    gen1 = await classic_rejoin(run, "c1 (again)", c1, c1_id, gen1)
    await m.leave("m leaves: only classic members remain")
    await run.call("list after the downgrade", c1, list_groups())
    await run.call("ConsumerGroupDescribe after the downgrade", c1, cg_describe(g))
    await run.call("c1 heartbeats after the downgrade", c1, heartbeat(g, c1_id, gen1))
    joined = await run.call("c1 rejoins the classic group", c1, join(g, c1_id, protocols=RANGE_T(run)))
    await run.call("c1 syncs", c1, sync(g, c1_id, joined.generation_id, {c1_id: assignment_bytes({t: range(6)})}))
    await run.call("DescribeGroups at the end", c1, describe(g))


@scenario(topics={"t": 4}, xfail="deliberate: zkcoord describes a classic group as Kafka 3.9 does (the peer of "
          "the classic protocol, tests/integration/test_differential.py): no member assignment while it "
          "rebalances; Kafka 4.4's coordinator shows each member's last one (ClassicGroupMember.describeNoMetadata)")
async def describe_a_rebalancing_classic_group(run: ConsumerRun) -> None:
    g = run.group
    (c1, c1_id), (c2, c2_id) = await classic_group(run, 4)
    await run.call("c2 leaves", c2, leave(g, (c2_id, None)))
    await run.call("DescribeGroups while it rebalances", c1, describe(g))


@scenario(topics={"t": 4})
async def classic_member_in_a_consumer_group(run: ConsumerRun) -> None:
    """A member speaking JoinGroup/SyncGroup joins a consumer group: the
    coordinator computes its assignment and hands it over in SyncGroup."""
    g, t = run.group, run.n("t")
    m = await member(run, "member-m", client_id="m")
    await m.join("m joins", topics=[t])
    c = await run.client(client_id="classic")
    joined = await classic_member(run, "c", c)
    c_id, generation = joined.member_id, joined.generation_id
    await run.call("c syncs", c, sync(g, c_id, generation))
    await run.call("c heartbeats", c, heartbeat(g, c_id, generation))
    await run.call("describe", m.client, cg_describe(g))
    await m.heartbeat("m is told to revoke")
    await m.heartbeat("m revoked")
    await run.call("c heartbeats: released partitions wait", c, heartbeat(g, c_id, generation))
    generation = await classic_rejoin(run, "c", c, c_id, generation)
    await run.call("c heartbeats at its generation", c, heartbeat(g, c_id, generation))
    await run.call("c heartbeats at another generation", c, heartbeat(g, c_id, generation + 1))
    await run.call("c syncs at another generation", c, sync(g, c_id, generation + 1))
    await run.call("c syncs naming another protocol", c, sync(g, c_id, generation, protocol_name="roundrobin"))
    await run.call("c syncs naming another protocol type", c, sync(g, c_id, generation, protocol_type="connect"))
    await run.call("c joins with another protocol type", c, join(g, c_id, protocols=RANGE_T(run),
                                                                  protocol_type="connect"))
    await run.call("c joins with a protocol nobody speaks", c, join(g, c_id, protocols=(
        ("roundrobin", subscription(t)),)))
    await run.call("c commits at its generation", c, commit(g, t, {2: 5}, member_id=c_id, generation=generation))
    await run.call("c commits at an older generation", c, commit(g, t, {0: 5, 2: 6}, member_id=c_id,
                                                                 generation=generation - 1))
    await run.call("c commits at a newer generation", c, commit(g, t, {2: 7}, member_id=c_id,
                                                                generation=generation + 1))
    await run.call("describe with c reconciled", m.client, cg_describe(g))
    await run.call("c leaves", c, leave(g, (c_id, None)))
    await m.heartbeat("m heartbeats: c's partitions come back")
    await run.call("list", m.client, list_groups())
    await run.call("describe at the end", m.client, cg_describe(g))


# -- each migration policy, and time-outs ----------------------------------------------------------

UPGRADE = Profile(migration_policy="upgrade")
DOWNGRADE = Profile(migration_policy="downgrade")
DISABLED_SHORT_SESSIONS = Profile(migration_policy="disabled", session_timeout_ms=4_000, heartbeat_interval_ms=1_000)


@scenario(UPGRADE, topics={"t": 6})
async def upgrade_policy(run: ConsumerRun) -> None:
    """Upgrades happen; the last consumer-protocol member leaving leaves a
    consumer group of classic members."""
    g, t = run.group, run.n("t")
    (c1, c1_id), (c2, c2_id) = await classic_group(run, 6)
    m = await member(run, "member-m", client_id="m")
    await m.join("m joins: the group is upgraded", topics=[t], assignor="range")
    await run.call("c2 leaves", c2, leave(g, (c2_id, None)))
    await m.heartbeat("m heartbeats")
    await m.leave("m leaves: no downgrade")
    await run.call("list", c1, list_groups())
    await run.call("describe", c1, cg_describe(g))
    await run.call("c1 heartbeats", c1, heartbeat(g, c1_id, 2))
    generation = await classic_rejoin(run, "c1", c1, c1_id, 2)
    await run.call("c1 heartbeats at its new generation", c1, heartbeat(g, c1_id, generation))
    await run.call("c1 leaves", c1, leave(g, (c1_id, None)))
    await run.call("describe when empty", c1, cg_describe(g))
    await run.call("list at the end", c1, list_groups())


@scenario(UPGRADE, topics={"t": 6})
async def classic_member_time_outs(run: ConsumerRun) -> None:
    """Classic members of a consumer group keep their own time-outs: one
    told to rejoin that does not within its rebalance time-out (3 s) is
    fenced, however it heartbeats; one that goes silent, at the end of its
    session (6 s)."""
    g, t = run.group, run.n("t")
    short = {"session_ms": 6_000, "rebalance_ms": 3_000}
    (c1, c1_id), (c2, c2_id) = await classic_group(run, 6, **short)
    m = await member(run, "member-m", client_id="m")
    await m.join("m joins: the group is upgraded", topics=[t], assignor="range")
    await run.poll("c1 heartbeats without rejoining until it is fenced", c1, heartbeat(g, c1_id, 2),
                   lambda r: r.error_code == UNKNOWN_MEMBER_ID)
    await m.until("c2 is silent: m gets every partition once c2's session ends", m.owns_all({t: range(6)}))
    await run.call("c2 heartbeats again", c2, heartbeat(g, c2_id, 2))
    await run.call("describe", m.client, cg_describe(g))


@scenario(DOWNGRADE, topics={"t": 4})
async def downgrade_policy(run: ConsumerRun) -> None:
    """No upgrade of a classic group with members; an empty one (offsets
    only) becomes a consumer group; the last consumer-protocol member
    leaving downgrades it."""
    g, t = run.group, run.n("t")
    c1 = await run.client(client_id="c1")
    first = await classic_member(run, "c1", c1)
    c1_id = first.member_id
    await run.call("c1 syncs", c1, sync(g, c1_id, 1, {c1_id: assignment_bytes({t: range(4)})}))
    await run.call("c1 commits", c1, commit(g, t, {0: 7}, member_id=c1_id, generation=1))
    m = await member(run, "member-m", client_id="m")
    await m.join("m joins the classic group: refused", topics=[t], expect=GROUP_ID_NOT_FOUND)
    await run.call("c1 leaves", c1, leave(g, (c1_id, None)))
    await run.call("list: an empty classic group", c1, list_groups())
    await m.join("m joins the empty classic group", topics=[t])
    await run.call("list: a consumer group", c1, list_groups())
    await run.call("its offsets are kept", c1, fetch9(g, None))
    c2 = await run.client(client_id="c2")
    joined = await classic_member(run, "c2", c2)
    await run.call("c2 syncs", c2, sync(g, joined.member_id, joined.generation_id))
    await m.heartbeat("m is told to revoke")
    await m.heartbeat("m revoked")
    await run.call("describe", c2, cg_describe(g))
    await m.leave("m leaves: downgraded")
    await run.call("list after the downgrade", c2, list_groups())
    await run.call("c2 heartbeats", c2, heartbeat(g, joined.member_id, joined.generation_id))
    rejoined = await run.call("c2 rejoins", c2, join(g, joined.member_id, protocols=RANGE_T(run)))
    await run.call("c2 syncs as leader", c2, sync(g, joined.member_id, rejoined.generation_id, {
        joined.member_id: assignment_bytes({t: range(4)})}))
    await run.call("DescribeGroups", c2, describe(g))


@scenario(DISABLED_SHORT_SESSIONS, topics={"t": 4})
async def migration_disabled(run: ConsumerRun) -> None:
    g, t = run.group, run.n("t")
    c1 = await run.client(client_id="c1")
    first = await classic_member(run, "c1", c1)
    await run.call("c1 syncs", c1, sync(g, first.member_id, 1, {first.member_id: assignment_bytes({t: range(4)})}))
    m = await member(run, "member-m", client_id="m")
    await m.join("m joins the classic group: refused", topics=[t], expect=GROUP_ID_NOT_FOUND)
    other = g + "-consumer"
    m2 = await member(run, "member-m", client_id="m", group=other)
    await m2.join("m joins another group", topics=[t])
    c2 = await run.client(other, client_id="c2")
    await run.call("a classic member asks to join the consumer group", c2, join(other, protocols=RANGE_T(run)))
    await run.call("a classic member with an id joins the consumer group", c2,
                   join(other, "ghost", protocols=RANGE_T(run)))
    await run.call("list", c2, list_groups())
    await m2.leave("m leaves the consumer group")
    await run.call("a classic member joins the empty consumer group", c2, join(other, protocols=RANGE_T(run)))


@scenario(DISABLED_SHORT_SESSIONS, topics={"t": 4})
async def session_time_out(run: ConsumerRun) -> None:
    """A member that stops heartbeating is fenced after the session time-out
    (4 s here); a static member that left for a while too, if it does not
    come back in time."""
    g, t = run.group, run.n("t")
    a, b = await member(run, "member-a"), await member(run, "member-b", client_id="b")
    s = await member(run, "static-s", instance="i1", client_id="s")
    await a.join("a joins", topics=[t])
    await b.join("b joins", topics=[t])
    await s.join("s joins", topics=[t])
    await settle([a, b, s], "three members")
    await s.leave("s leaves for a while", epoch=-2)
    await a.until("b and s are gone once their sessions end: a gets every partition", a.owns_all({t: range(4)}))
    await b.heartbeat("b heartbeats again: fenced", expect=UNKNOWN_MEMBER_ID)
    await run.call("describe", a.client, cg_describe(g))
    await b.join("b joins again", topics=[t])
    await settle([a, b], "two members again")


# -- the test ---------------------------------------------------------------------------------

ASSIGN_AT_ONCE = "group.consumer.assignment.interval.ms"  # a dynamic broker setting: set without a restart
PROFILE_WAIT_S = 60.0


@pytest.fixture(scope="module")
def kafka4_profile(kafka4_sandbox, kafka4):
    """``use(profile)``: Kafka 4.4 restarted with the profile's settings if
    it runs with others (the node's own settings made exactly those);
    ``group.consumer.assignment.interval.ms=0`` for the whole module, as a
    dynamic setting. Both put back when the module ends."""
    before = dict(kafka4_sandbox.load().kafka4_settings)
    changed = False
    current = None

    def use(profile: Profile) -> None:
        nonlocal changed, current
        if profile == current:
            return
        if kafka4_sandbox.configure_kafka4(profile.kafka_settings(), replace=True):
            changed = True
            wait_group_coordinator(kafka4)
        _assign_at_once(kafka4, "0")
        current = profile

    try:
        yield use
    finally:
        _assign_at_once(kafka4, None)
        if changed:
            kafka4_sandbox.configure_kafka4(before, replace=True)
            wait_group_coordinator(kafka4)


def _assign_at_once(bootstrap: str, value: str | None) -> None:
    """Set (or, None, remove) the node's dynamic assignment interval, and
    wait until its coordinator works with it (a probe group's second member
    gets, or does not get, a target of its own at once)."""
    from kafka import KafkaAdminClient
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        node = str(admin.describe_cluster()["brokers"][0]["broker_id"])
        op = (AlterConfigOp.SET, value) if value is not None else (AlterConfigOp.DELETE, None)
        admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, node, {ASSIGN_AT_ONCE: op})],
                            raise_on_unknown=False)
    finally:
        admin.close()
    deadline = time.monotonic() + PROFILE_WAIT_S
    while asyncio.run(assigns_at_every_change(bootstrap, f"probe-interval-{uuid.uuid4().hex}")) != (value == "0"):
        assert time.monotonic() < deadline, f"{ASSIGN_AT_ONCE}={value} not in effect after {PROFILE_WAIT_S} s"
        time.sleep(0.2)


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
    suffix = unique_name("")  # "-<test>-<hex>": the scenario's topics share it (a regex can name them)
    names = {k: k + suffix for k in TOPIC_KEYS}
    kafka, ours = asyncio.run(run_both(scenario, kafka4, services.bootstrap_servers, services.zookeeper, zk_hosts,
                                       group, names))
    compare(kafka, ours)
