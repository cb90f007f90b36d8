"""The metrics HTTP responder and the error naming of zkcoord.server.metrics,
without ZooKeeper."""

from __future__ import annotations

import asyncio
import json

from tests.support.http import http_get
from zkcoord.server.metrics import DaemonMetrics, MetricsServer, response_error


def test_metrics_responder_404_405_and_unhealthy_without_zookeeper():
    class Disconnected:
        connected = False

    async def scenario():
        server = MetricsServer(DaemonMetrics(conn=Disconnected()), "127.0.0.1", 0)
        await server.start()
        try:
            status, body = await http_get(server.bound_port, "/other")
            assert (status, body) == (404, b"not found\n")
            status, body = await http_get(server.bound_port, "/health")
            assert status == 503 and json.loads(body)["reason"] == "ZooKeeper not connected"
            status, body = await http_get(server.bound_port, "/metrics")
            assert status == 200 and b"zkcoord_zookeeper_connected 0.0" in body
            for family in (b"zkcoord_zookeeper_commit_session_connected 0.0",  # no offset store yet: at 0
                           b"zkcoord_zookeeper_commit_sessions_opened_total 0.0",
                           b"zkcoord_zookeeper_commit_session_open_failures_total 0.0",
                           b"zkcoord_zookeeper_offset_multis_total 0.0",
                           b"zkcoord_zookeeper_offset_multis_failed_total 0.0"):
                assert family in body
        finally:
            await server.stop()
        assert server.respond("POST", "/metrics")[0] == 405

    asyncio.run(scenario())


def test_response_error_names_first_nonzero_code():
    from kafka.protocol.consumer.group import HeartbeatResponse, OffsetCommitResponse

    from zkcoord.wire.messages import build_message

    assert response_error(build_message(HeartbeatResponse, 3, error_code=27)) == "REBALANCE_IN_PROGRESS"
    assert response_error(build_message(HeartbeatResponse, 3, error_code=0)) == "NONE"
    nested = build_message(OffsetCommitResponse, 7, topics=[{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 3}]}])
    assert response_error(nested) == "UNKNOWN_TOPIC_OR_PARTITION"


class _Tripwire:
    """A value whose every attribute read fails the test: what the error walk must not enter."""

    def __getattribute__(self, name):
        raise AssertionError(f"the walk read {name!r} of a value that holds no error")


def test_the_error_walk_enters_only_fields_that_can_hold_an_error():
    """A DescribeGroups answer's members, or a JoinGroup answer's member list, hold no error
    code: a walk that entered them cost 2.35 s of the event loop for one hostile answer."""
    from kafka.protocol.admin.groups import DescribeGroupsResponse
    from kafka.protocol.consumer.group import JoinGroupResponse

    from zkcoord.wire.messages import build_message
    from zkcoord.wire.response_errors import first_error_code

    described = build_message(DescribeGroupsResponse, 5, groups=[
        {"error_code": 0, "group_id": "a", "group_state": "Stable", "protocol_type": "consumer",
         "protocol_data": "range", "members": []},
        {"error_code": 15, "group_id": "b", "group_state": "", "protocol_type": "", "protocol_data": "",
         "members": []}])
    for group in described.groups:
        group.members = [_Tripwire() for _ in range(3)]
    assert first_error_code(described) == 15
    joined = build_message(JoinGroupResponse, 7, error_code=0, generation_id=1, protocol_type="consumer",
                           protocol_name="range", leader="m", member_id="m", members=[])
    joined.members = [_Tripwire()]
    assert first_error_code(joined) == 0


def test_an_answer_encoded_off_the_loop_carries_its_error_and_is_not_walked_again():
    from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse
    from kafka.protocol.parser import KafkaProtocol

    from zkcoord.wire.messages import build_message
    from zkcoord.wire.requests import decode_request
    from zkcoord.wire.responses import EncodedResponse, encoded_response

    request = DescribeGroupsRequest(version=5, groups=["a", "b"], include_authorized_operations=False)
    protocol = KafkaProtocol(client_id="c")
    protocol.send_request(request)
    frame = protocol.send_bytes()[4:]  # after the size prefix
    decoded = decode_request(frame)
    answer = build_message(DescribeGroupsResponse, 5, groups=[
        {"error_code": 0, "group_id": g, "group_state": "Dead", "protocol_type": "", "protocol_data": "",
         "members": []} for g in ("a", "b")])
    answer.groups[1].error_code = 16
    encoded = encoded_response(decoded, answer)
    assert encoded.error_code == 16
    metrics = DaemonMetrics()
    metrics.observe_request("DescribeGroups", EncodedResponse(_Tripwire(), encoded.correlation_id, encoded.frame,
                                                              encoded.error_code))
    assert metrics.registry.get_sample_value(
        "zkcoord_requests_total", {"api": "DescribeGroups", "error": "NOT_COORDINATOR"}) == 1


def test_rebalances_are_counted_and_timed_from_preparing_to_stable_written_or_not():
    from dataclasses import replace

    from zkcoord.core.group_states import GroupState
    from zkcoord.core.membership import new_group

    now = [0.0]
    metrics = DaemonMetrics(clock=lambda: now[0])
    group = new_group("g")

    def step(state, generation, at):
        now[0] = at
        metrics.observe_transition(replace(group, state=state, generation_id=generation))

    def value(name):
        return metrics.registry.get_sample_value(name) or 0

    metrics.observe_loaded(replace(group, state=GroupState.STABLE, generation_id=4))
    step(GroupState.PREPARING_REBALANCE, 4, 10.0)  # a member joins
    step(GroupState.PREPARING_REBALANCE, 4, 10.5)  # still the same rebalance
    step(GroupState.COMPLETING_REBALANCE, 5, 11.0)  # generation 5 (reserved: not written)
    assert value("zkcoord_rebalances_total") == 1 and value("zkcoord_rebalance_duration_seconds_count") == 0
    step(GroupState.STABLE, 5, 11.25)  # the leader's assignment written
    assert value("zkcoord_rebalance_duration_seconds_count") == 1
    assert value("zkcoord_rebalance_duration_seconds_sum") == 1.25
    step(GroupState.EMPTY, 6, 20.0)  # everybody left: a new (empty) generation, no duration
    assert value("zkcoord_rebalances_total") == 2 and value("zkcoord_rebalance_duration_seconds_count") == 1


def test_groups_by_state_and_mode_list_every_pair_and_count_only_active_groups():
    from types import SimpleNamespace

    from zkcoord.core.group_states import GroupState
    from zkcoord.core.membership import Group, Member

    def runtime(state, mode, active=True):
        members = {m: Member(m, None, "c", "h", 10_000, 10_000, "consumer", (("range", b""),)) for m in ("m1", "m2")}
        return SimpleNamespace(active=active, held_heartbeats=0,
                               group=Group("g", state=state, offset_storage=mode, members=members))

    manager = SimpleNamespace(_loading=set(), runtimes={
        "a": runtime(GroupState.STABLE, "zookeeper"), "b": runtime(GroupState.STABLE, "zookeeper"),
        "c": runtime(GroupState.PREPARING_REBALANCE, "dual"), "d": runtime(GroupState.EMPTY, "kafka"),
        "e": runtime(GroupState.STABLE, "kafka", active=False)})
    metrics = DaemonMetrics(manager=manager)
    got = {(s.labels["type"], s.labels["state"], s.labels["mode"]): s.value
           for family in metrics.registry.collect() if family.name == "zkcoord_groups" for s in family.samples}
    assert len(got) == 30  # 2 types x 5 states x 3 modes, so a selector finds every triple even at 0
    assert {k: v for k, v in got.items() if v} == {
        ("classic", "Stable", "zookeeper"): 2, ("classic", "PreparingRebalance", "dual"): 1,
        ("classic", "Empty", "kafka"): 1}
    assert metrics.registry.get_sample_value("zkcoord_groups_owned") == 4
    assert metrics.registry.get_sample_value("zkcoord_group_members") == 8


def test_consumer_groups_by_state_members_by_protocol_and_convergence():
    """KIP-848 groups in zkcoord_groups (their own states), members by the protocol they
    speak (classic members of a mixed group apart), members not at their target yet,
    and how far a group epoch runs ahead of its target assignment."""
    from dataclasses import replace
    from types import SimpleNamespace

    from zkcoord.core.consumer.model import ClassicMetadata, ConsumerMember, MemberState, new_consumer_group
    from zkcoord.core.membership import Group, Member

    def consumer_group(name, epoch, target_epoch, *members):
        group = new_consumer_group(name).with_assignment_epoch(target_epoch, 0)
        for member in members:
            group = group.with_member(member)
        return SimpleNamespace(active=True, held_heartbeats=0, group=replace(group, group_epoch=epoch))

    classic = ClassicMetadata(45_000, (("range", b""),))
    steady = consumer_group("steady", 4, 4, ConsumerMember("a", member_epoch=4), ConsumerMember("b", member_epoch=4))
    mixed = consumer_group("mixed", 7, 5, ConsumerMember("c", member_epoch=5),
                           ConsumerMember("d", member_epoch=5, classic=classic),
                           ConsumerMember("e", member_epoch=4, state=MemberState.UNREVOKED_PARTITIONS))
    old = SimpleNamespace(active=True, held_heartbeats=0, group=Group("old", members={
        "m": Member("m", None, "c", "h", 10_000, 10_000, "consumer", (("range", b""),))}))
    metrics = DaemonMetrics(manager=SimpleNamespace(_loading=set(), runtimes={"s": steady, "m": mixed, "o": old}))
    value = metrics.registry.get_sample_value
    assert value("zkcoord_groups", {"type": "consumer", "state": "Stable", "mode": "zookeeper"}) == 1
    assert value("zkcoord_groups", {"type": "consumer", "state": "Assigning", "mode": "zookeeper"}) == 1
    by_protocol = {(s.labels["type"], s.labels["protocol"]): s.value for family in metrics.registry.collect()
                   if family.name == "zkcoord_members_by_protocol" for s in family.samples}
    assert by_protocol == {("classic", "classic"): 1, ("consumer", "consumer"): 4, ("consumer", "classic"): 1}
    assert value("zkcoord_group_members") == 6
    assert value("zkcoord_consumer_group_unreconciled_members") == 1  # e: behind, revoking
    assert value("zkcoord_consumer_group_epoch_lag_max") == 2  # mixed: group epoch 7, target 5
    idle = DaemonMetrics(manager=SimpleNamespace(_loading=set(), runtimes={}))
    assert idle.registry.get_sample_value("zkcoord_consumer_group_epoch_lag_max") == 0
    assert idle.registry.get_sample_value("zkcoord_members_by_protocol",
                                          {"type": "consumer", "protocol": "classic"}) == 0


def test_forwarded_requests_and_bytes_by_api_and_direction():
    metrics = DaemonMetrics()
    metrics.observe_forward(1, 120)  # Fetch
    metrics.observe_forward(1, 80)
    metrics.observe_forwarded_answer(1, 5000)
    value = metrics.registry.get_sample_value
    assert value("zkcoord_gateway_forwarded_requests_total", {"api": "Fetch"}) == 2
    assert value("zkcoord_gateway_forwarded_bytes_total", {"api": "Fetch", "direction": "request"}) == 200
    assert value("zkcoord_gateway_forwarded_bytes_total", {"api": "Fetch", "direction": "response"}) == 5000


def test_the_commits_session_and_multis_are_read_from_the_offset_store_at_scrape_time():
    from types import SimpleNamespace

    from zkcoord.zk.offsets import OffsetStats

    class Session:
        connected, sessions_opened, open_failures = True, 3, 2

    stats = OffsetStats(multis=40, failed_multis=1)
    metrics = DaemonMetrics()
    metrics.offsets = SimpleNamespace(commit_session=Session(), stats=stats)
    value = metrics.registry.get_sample_value
    assert value("zkcoord_zookeeper_commit_session_connected") == 1
    assert value("zkcoord_zookeeper_commit_sessions_opened_total") == 3
    assert value("zkcoord_zookeeper_commit_session_open_failures_total") == 2
    assert (value("zkcoord_zookeeper_offset_multis_total"), value("zkcoord_zookeeper_offset_multis_failed_total")) \
        == (40, 1)
    metrics.offsets = SimpleNamespace(commit_session=None, stats=stats)  # a SASL login: multis through kazoo
    assert value("zkcoord_zookeeper_commit_session_connected") == 0
    assert value("zkcoord_zookeeper_commit_sessions_opened_total") == 0
    assert value("zkcoord_zookeeper_offset_multis_total") == 40


def test_zookeeper_suspensions_and_expiries_are_counted_apart():
    from zkcoord.zk.connection import SessionEvent

    metrics = DaemonMetrics()
    for event in (SessionEvent.SUSPENDED, SessionEvent.RECONNECTED, SessionEvent.SUSPENDED, SessionEvent.GIVEN_UP,
                  SessionEvent.LOST):
        metrics.on_session_event(event)
    value = metrics.registry.get_sample_value
    assert value("zkcoord_zookeeper_suspensions_total") == 2
    assert value("zkcoord_zookeeper_sessions_given_up_total") == 1
    assert value("zkcoord_zookeeper_session_expiries_total") == 1


def test_a_stall_of_the_event_loop_is_observed_as_its_lateness():
    """A callback holding the loop for 0.4 s makes the probe (due every 50 ms)
    run at least 0.35 s late; the probe stops when asked."""
    import time

    metrics = DaemonMetrics()

    async def scenario():
        metrics.start_loop_probe()
        await asyncio.sleep(0.12)
        time.sleep(0.4)  # the stall: nothing else runs meanwhile
        await asyncio.sleep(0.12)
        metrics.stop_loop_probe()

    asyncio.run(scenario())
    text = metrics.render().decode()

    def sample(name: str) -> float:
        [line] = [line for line in text.splitlines() if line.startswith(name + " ")]
        return float(line.split()[-1])

    count = sample("zkcoord_event_loop_lag_seconds_count")
    under_quarter = sample('zkcoord_event_loop_lag_seconds_bucket{le="0.25"}')
    assert count >= 3 and count - under_quarter >= 1  # the stall, at least 0.25 s late
    assert metrics._loop_probe is None


def test_requests_are_counted_and_timed_by_api_and_error_from_the_children_kept():
    from zkcoord.wire.responses import EncodedResponse

    metrics = DaemonMetrics()
    for code, seconds in ((0, 0.001), (0, 0.002), (27, 0.003), (9999, None)):  # 27: REBALANCE_IN_PROGRESS
        metrics.observe_request("Heartbeat", EncodedResponse(None, 1, b"", code), seconds)
    metrics.observe_request("OffsetCommit", EncodedResponse(None, 2, b"", 0), 0.5)
    for mode in ("zookeeper", "zookeeper", "dual"):
        metrics.observe_offset_commit(mode)
    value = metrics.registry.get_sample_value
    assert value("zkcoord_requests_total", {"api": "Heartbeat", "error": "NONE"}) == 2
    assert value("zkcoord_requests_total", {"api": "Heartbeat", "error": "REBALANCE_IN_PROGRESS"}) == 1
    assert value("zkcoord_requests_total", {"api": "Heartbeat", "error": "9999"}) == 1  # a code with no name
    assert value("zkcoord_requests_total", {"api": "OffsetCommit", "error": "NONE"}) == 1
    assert value("zkcoord_request_latency_seconds_count", {"api": "Heartbeat"}) == 3  # the untimed one left out
    assert abs(value("zkcoord_request_latency_seconds_sum", {"api": "Heartbeat"}) - 0.006) < 1e-9
    assert value("zkcoord_request_latency_seconds_count", {"api": "OffsetCommit"}) == 1
    assert value("zkcoord_offset_commits_total", {"mode": "zookeeper"}) == 2
    assert value("zkcoord_offset_commits_total", {"mode": "dual"}) == 1


def test_a_scrape_is_made_off_the_loop_which_keeps_serving_meanwhile():
    """The scrape-time gauges walk every owned group: the exposition is made
    in a worker thread, so the loop runs other callbacks until it is ready."""
    from types import SimpleNamespace

    from zkcoord.core.groups import new_group

    runtimes = {f"g{i}": SimpleNamespace(active=True, group=new_group(f"g{i}"), held_heartbeats=0)
                for i in range(2000)}
    metrics = DaemonMetrics(manager=SimpleNamespace(runtimes=runtimes))
    server = MetricsServer(metrics, "127.0.0.1", 0)

    async def scenario():
        ticks = 0
        done = False

        async def ticker():
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        other = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        before = ticks
        status, _, body = await server.respond_async("GET", "/metrics")
        during = ticks - before
        done = True
        await other
        return status, body, during

    status, body, during = asyncio.run(scenario())
    assert status == 200 and b"zkcoord_groups_owned 2000.0" in body
    assert during > 0  # the loop ran the ticker while the scrape was being made


def test_the_request_tally_exports_what_prometheus_clients_own_counter_and_histogram_would():
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from zkcoord.server.metrics import RequestTally

    bounds = [b for b in RequestTally.BUCKETS if b != float("inf")]
    durations = st.one_of(st.sampled_from(bounds), st.floats(0, 20, allow_nan=False), st.none())
    observation = st.tuples(st.sampled_from(["Heartbeat", "OffsetCommit"]), st.sampled_from([0, 25, 27]), durations)

    @settings(max_examples=200, deadline=None)
    @given(st.lists(observation, max_size=40))
    def same(observations):
        tally, registry = RequestTally(), CollectorRegistry()
        counter = Counter("zkcoord_requests_total", "Kafka requests answered.", ["api", "error"], registry=registry)
        histogram = Histogram("zkcoord_request_latency_seconds", "Time to answer a Kafka request.", ["api"],
                              registry=registry)
        names = {0: "NONE", 25: "UNKNOWN_MEMBER_ID", 27: "REBALANCE_IN_PROGRESS"}
        for api, code, seconds in observations:
            tally.observe(api, code, seconds)
            counter.labels(api, names[code]).inc()
            if seconds is not None:
                histogram.labels(api).observe(seconds)

        def samples(families):
            return sorted((s.name, tuple(sorted(s.labels.items())), round(s.value, 9))
                          for family in families for s in family.samples if not s.name.endswith("_created"))

        assert samples(tally.collect()) == samples(registry.collect())

    same()
