"""Stock clients under faults, checked as Kafka's own system tests check them.

Kafka's ``VerifiableProducer`` (``acks=all``) and ``VerifiableConsumer`` s
(Kafka 4.4's tool, both group protocols; Kafka 3.9's for a classic member)
and a librdkafka consumer printing the same events
(:mod:`tests.support.rdkafka_verifiable`), every one a process of its own,
bootstrapped from the gateways of two ``zkcoord run`` daemons in front of
the sandbox broker (the group's owner is never assumed: it is asked with
FindCoordinator when a test kills it). The faults are those of Kafka's
``tests/kafkatest/tests/client/consumer_test.py``: a rolling bounce of the
consumers (SIGTERM, restart), a hard bounce (kill -9, restart), the group's
coordinator killed (-9) and restarted, static members (``group.instance.id``)
bounced, cleanly and hard; and a librdkafka member bounced among Java ones.

Each test waits for conditions only (the group balanced by the members' own
callbacks, more records consumed, every acknowledged record consumed, the
committed offsets at the ends), never for a time, then hands every event
to :func:`tests.faults.stock_checker.check_stock`: every acknowledged record
consumed, committed offsets never going back and none lost, no partition
held by two live members at once, nothing consumed below a commit, Kafka's
per-consumer assertions, and records consumed twice only after a hard kill
(counted and printed).

``make test`` runs each scenario with one group protocol (the two protocols
alternate between scenarios); ``ZKCOORD_STOCK_FULL=1`` runs both protocols
of each, and ``ZKCOORD_STOCK_BOUNCES=<n>`` bounces each member n times
(Kafka's tests: 5; default 1).
"""

from __future__ import annotations

import asyncio
import json
import os
from contextlib import contextmanager

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.support.daemons import gateway_fleet, wait_for
from tests.support.verifiable import StockClients
from tests.support.wire import find_coordinator

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # ZKCOORD_TEST_SLOW=1; tests/faults runs stock clients

PARTITIONS = 6
WAIT_S = 120.0  # a bound on a failure (a join, a rebalance, a take-over), never a wait
SESSION_TIMEOUT_MS = 6000
FLEET = {"group_consumer_session_timeout_ms": SESSION_TIMEOUT_MS, "group_consumer_heartbeat_interval_ms": 500,
         "group_consumer_assignment_interval_ms": 0, "topic_metadata_refresh_ms": 500}
CLASSIC = {"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 500}
# Static members outlive a restart: longer sessions than a JVM takes to start on a loaded machine
# (the consumer protocol's is the daemons' setting, and a killed static member waits for it to expire).
STATIC_SESSION_TIMEOUT_MS = 45000
STATIC_CONSUMER_SESSION_TIMEOUT_MS = 20000
THROUGHPUT = 200  # records a second
MORE = 100  # records consumed after each step before the next (Kafka's await_consumed_messages)
FULL = os.environ.get("ZKCOORD_STOCK_FULL", "") not in ("", "0")
BOUNCES = int(os.environ.get("ZKCOORD_STOCK_BOUNCES", "1"))


def protocols(default: str):
    """Both group protocols; the one not ``default`` only with ZKCOORD_STOCK_FULL=1."""
    return [pytest.param(p, id=p, marks=() if FULL or p == default else pytest.mark.skip(
        reason=f"the {p} protocol of this scenario runs with ZKCOORD_STOCK_FULL=1 (make test: one per scenario)"))
        for p in ("classic", "consumer")]


@pytest.fixture
def make_fleet(services, zk_hosts, zk, tmp_path, java_tools_available):
    """``make_fleet(**options)``: two daemons with gateways (FLEET and
    ``options``), killed when the test ends."""
    fleets = []

    def make(**options):
        fleet = gateway_fleet(zk_hosts, zk, tmp_path / "daemons", services.bootstrap_servers, 1, 2,
                              **{**FLEET, **options})
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        fleet.close()


def gateways(fleet) -> str:
    return ",".join(d.gateway_address for d in fleet.daemons.values() if d.alive())


def create_topic(bootstrap: str, topic: str) -> list[tuple[str, int]]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="stock-clients-test")
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()
    return [(topic, p) for p in range(PARTITIONS)]


def zk_offsets(zk, group: str, topic: str) -> dict[tuple[str, int], int]:
    path = f"/consumers/{group}/offsets/{topic}"
    if not zk.exists(path):
        return {}
    return {(topic, int(p)): int(zk.get(f"{path}/{p}")[0]) for p in zk.get_children(path)}


def owner_of(fleet, group: str):
    """The daemon whose gateway FindCoordinator names for ``group`` (None: no live one)."""
    host, port = asyncio.run(find_coordinator(gateways(fleet), group))
    return next((d for d in fleet.daemons.values() if d.alive() and d.gateway_address == f"{host}:{port}"), None)


@contextmanager
def stock_clients(services, fleet, unique_name, tmp_path, **options):
    topic, group = unique_name("t"), unique_name("g")
    partitions = create_topic(services.bootstrap_servers, topic)
    clients = StockClients(gateways(fleet), topic, group, tmp_path / "clients", partitions=partitions, **options)
    try:
        yield clients
    finally:
        clients.close()


def drain_and_check(clients: StockClients, zk, *, hard_kills: int = 0, allowed=("hard-kill",)):
    """The producer stopped, every acknowledged record consumed, the commits
    at the ends, every consumer stopped cleanly; then the verdicts: none
    broken, and duplicates only where a hard kill allows them."""
    clients.stop_producer()
    if clients.send_errors():  # not acknowledged: nothing is owed to the consumers (printed, not a verdict)
        print(f"{len(clients.send_errors())} sends failed, first: {clients.send_errors()[0]}")
    clients.wait_all_consumed("after the faults")
    ends = {tp: max(offsets) + 1 for tp, offsets in clients.acked().items()}
    wait_for(lambda: all(zk_offsets(zk, clients.group, clients.topic).get(tp, -1) >= end for tp, end in ends.items()),
             WAIT_S, "the group's commits at the ends of what was acknowledged", interval_s=0.2)
    clients.stop_all()
    assert clients.died() == [], f"consumers exited by themselves: {clients.died()}"
    verdict = clients.check(final_committed=zk_offsets(zk, clients.group, clients.topic), allowed_duplicates=allowed)
    print("stock clients verdict: " + json.dumps(verdict.summary()))
    for violation in verdict.violations:
        print(f"VIOLATION {violation.kind}: {violation.detail}")
    assert verdict.violations == [], f"{len(verdict.violations)} violation(s), first: {verdict.violations[0]}"
    if not hard_kills:
        assert sum(verdict.duplicates.values()) == 0, verdict.duplicates
    # nothing vacuous: records went through and commits were made
    assert verdict.acked >= MORE and verdict.commits > 0
    return verdict


def start_group(clients: StockClients, labels, what: str, **options) -> None:
    for label in labels:
        clients.start_java(label, **options)
    clients.wait_balanced(what)


# -- 1. a rolling bounce, clean (Kafka's test_consumer_bounce, bounce_mode=rolling) ------------------

@pytest.mark.parametrize("protocol", protocols("classic"))
def test_rolling_bounce_of_consumers(services, make_fleet, zk, unique_name, tmp_path, protocol):
    """Three VerifiableConsumers under a VerifiableProducer, each stopped
    (SIGTERM: it commits, leaves) and restarted in turn, the group balanced
    and consuming again before the next: no violation, no duplicate."""
    fleet = make_fleet()
    with stock_clients(services, fleet, unique_name, tmp_path, classic_properties=CLASSIC) as clients:
        clients.start_producer(THROUGHPUT)
        start_group(clients, ("c1", "c2", "c3"), "three members", protocol=protocol)
        clients.wait_consumed_more(MORE, "before the bounces")
        for round_ in range(BOUNCES):
            for label in ("c1", "c2", "c3"):
                clients.stop(label)
                clients.wait_balanced(f"{label} stopped")
                clients.restart(label)
                clients.wait_balanced(f"{label} back (round {round_ + 1})")
                clients.wait_consumed_more(MORE, f"{label} back")
        drain_and_check(clients, zk)


# -- 2. a hard bounce (kill -9; Kafka's test_consumer_bounce / test_consumer_failure, clean_shutdown=False) ---

@pytest.mark.parametrize("protocol", protocols("consumer"))
def test_hard_bounce_of_consumers(services, make_fleet, zk, unique_name, tmp_path, protocol):
    """Each of three consumers killed (-9: no commit, no leave) in turn: the
    others take its partitions once its session times out, it comes back
    and gets its share again; duplicates only of what a killed member had
    consumed and not committed (counted)."""
    fleet = make_fleet()
    with stock_clients(services, fleet, unique_name, tmp_path, classic_properties=CLASSIC) as clients:
        clients.start_producer(THROUGHPUT)
        start_group(clients, ("c1", "c2", "c3"), "three members", protocol=protocol)
        clients.wait_consumed_more(MORE, "before the kills")
        kills = 0
        for round_ in range(BOUNCES):
            for label in ("c1", "c2", "c3"):
                clients.kill(label)
                kills += 1
                clients.wait_balanced(f"{label} killed: the others holding its partitions")
                clients.wait_consumed_more(MORE, f"{label} killed")
                clients.restart(label)
                clients.wait_balanced(f"{label} back (round {round_ + 1})")
                clients.wait_consumed_more(MORE, f"{label} back")
        verdict = drain_and_check(clients, zk, hard_kills=kills)
        print(f"{kills} hard kills: {verdict.duplicates['hard-kill']} records consumed again")


# -- 3. the coordinator killed (Kafka's test_broker_failure: here the group's daemon) --------------

@pytest.mark.parametrize("protocol", protocols("consumer"))
def test_coordinator_killed_under_consumers(services, make_fleet, zk, unique_name, tmp_path, protocol):
    """The daemon owning the group killed (-9) under three consumers and a
    producer: the other daemon takes the group over from ZooKeeper and the
    consumers go on through its gateway; the killed daemon restarted (the
    group may move back: placement is hashed) and the consumers go on again;
    no violation and, no consumer having been killed, no duplicate."""
    fleet = make_fleet()
    with stock_clients(services, fleet, unique_name, tmp_path, classic_properties=CLASSIC) as clients:
        clients.start_producer(THROUGHPUT)
        start_group(clients, ("c1", "c2", "c3"), "three members", protocol=protocol)
        clients.wait_consumed_more(MORE, "before the kill")
        for round_ in range(BOUNCES):
            owner = wait_for(lambda: owner_of(fleet, clients.group), WAIT_S, "the group's owner named")
            owner.kill()
            survivor = next(d for d in fleet.daemons.values() if d.alive())
            wait_for(lambda: owner_of(fleet, clients.group) is survivor, WAIT_S,
                     f"daemon {survivor.node_id} owning the group after daemon {owner.node_id}'s kill")
            clients.wait_consumed_more(MORE, f"daemon {owner.node_id} killed (round {round_ + 1})")
            clients.wait_balanced("on the surviving daemon")
            fleet.start(owner.node_id)
            clients.bootstrap = gateways(fleet)
            clients.wait_consumed_more(MORE, f"daemon {owner.node_id} back")
            clients.wait_balanced(f"daemon {owner.node_id} back")
        drain_and_check(clients, zk)


# -- 4. static members bounced (Kafka's test_static_consumer_bounce) ---------------------------------

@pytest.mark.parametrize("protocol", protocols("classic"))
def test_static_members_bounced(services, make_fleet, zk, unique_name, tmp_path, protocol):
    """Three static members (group.instance.id): c2 and c3 stopped (SIGTERM)
    and restarted in turn within their sessions: each gets back exactly what
    it held, and the member kept alive (c1) is never asked to give a
    partition up (no rebalance: Kafka's assertion). Then c3 killed (-9) and
    restarted: with the classic protocol at once (its new JoinGroup takes
    the instance id over, fencing the dead member, and gets its
    assignment back); with the consumer protocol once its session expired
    and the others took its partitions (before, the instance id is still
    owned: UNRELEASED_INSTANCE_ID, as Kafka 4.4 answers). The verdicts hold,
    duplicates only from the kill."""
    fleet = make_fleet(group_consumer_session_timeout_ms=STATIC_CONSUMER_SESSION_TIMEOUT_MS)
    static_classic = {**CLASSIC, "session.timeout.ms": STATIC_SESSION_TIMEOUT_MS}
    with stock_clients(services, fleet, unique_name, tmp_path, classic_properties=static_classic) as clients:
        clients.start_producer(THROUGHPUT)
        for label in ("c1", "c2", "c3"):
            clients.start_java(label, protocol=protocol, instance_id=f"{clients.group}-{label}")
        clients.wait_balanced("three static members")
        clients.wait_consumed_more(MORE, "before the bounces")
        kept = clients.current("c1")
        revocations_before = len(kept.events("partitions_revoked"))
        for round_ in range(BOUNCES):
            for label in ("c2", "c3"):
                held = clients.current(label).assignment()
                assert held, f"{label} holds nothing before its bounce"
                clients.stop(label)
                back = clients.restart(label)
                back.wait_until(lambda: back.assignment() == held, f"{back.member} holding {sorted(held)} again")
                clients.wait_balanced(f"{back.member} back")
                clients.wait_consumed_more(MORE, f"{back.member} back (round {round_ + 1})")
        revoked = [e for e in kept.events("partitions_revoked")[revocations_before:] if e["partitions"]]
        assert revoked == [], f"the live static member gave partitions up during the clean bounces: {revoked}"

        held = clients.current("c3").assignment()
        clients.kill("c3")
        if protocol == "consumer":
            clients.wait_balanced("c3 killed: its session expired, c1 and c2 holding its partitions")
        back = clients.restart("c3")
        if protocol == "classic":
            back.wait_until(lambda: back.assignment() == held, f"{back.member} holding {sorted(held)} again")
        clients.wait_balanced(f"{back.member} back after the kill")
        clients.wait_consumed_more(MORE, f"{back.member} back after the kill")
        drain_and_check(clients, zk, hard_kills=1)


# -- 5. librdkafka among Java members -------------------------------------------------------------

@pytest.mark.parametrize("protocol", protocols("classic"))
def test_librdkafka_member_bounced_among_java_members(services, make_fleet, zk, unique_name, tmp_path, protocol):
    """A librdkafka consumer with two VerifiableConsumers in one group (with
    the classic protocol one of them Kafka 3.9's tool), all three bounced
    cleanly in turn, then the librdkafka one killed (-9) and restarted: its
    events, in VerifiableConsumer's shape, checked with theirs."""
    fleet = make_fleet()
    # librdkafka's classic assignors are named by protocol name: "range" is Java's RangeAssignor
    with stock_clients(services, fleet, unique_name, tmp_path, classic_properties=CLASSIC) as clients:
        clients.start_producer(THROUGHPUT)
        clients.start_java("java-a", protocol=protocol)
        clients.start_java("java-b", protocol=protocol, kafka4=protocol != "classic")
        clients.start_rdkafka("rdkafka", protocol=protocol, assignor="range" if protocol == "classic" else None)
        clients.wait_balanced("two Java members and a librdkafka one")
        clients.wait_consumed_more(MORE, "before the bounces")
        kills = 0
        for round_ in range(BOUNCES):
            for label in ("java-a", "rdkafka", "java-b"):
                clients.stop(label)
                clients.wait_balanced(f"{label} stopped")
                clients.restart(label)
                clients.wait_balanced(f"{label} back (round {round_ + 1})")
                clients.wait_consumed_more(MORE, f"{label} back")
            clients.kill("rdkafka")
            kills += 1
            clients.wait_balanced("rdkafka killed: the Java members holding its partitions")
            clients.restart("rdkafka")
            clients.wait_balanced("rdkafka back")
            clients.wait_consumed_more(MORE, "rdkafka back")
        assert any(r.client.startswith("librdkafka") for r in clients.runs())
        drain_and_check(clients, zk, hard_kills=kills)
