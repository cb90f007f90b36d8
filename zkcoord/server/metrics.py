"""Prometheus metrics and a health endpoint of one daemon (``--metrics-listen``).

Every daemon has its own :class:`~prometheus_client.CollectorRegistry` (not
the process-wide one), so several daemons in one process do not clash.

=========================================  =========  ==========================================
metric                                     type       meaning
=========================================  =========  ==========================================
``zkcoord_groups_owned``                   gauge      groups this daemon serves (loaded, active)
``zkcoord_groups{type,state,mode}``        gauge      the same groups by group type (classic,
                                                      consumer), Kafka state name and offset storage
                                                      mode (every triple present, 0 or more)
``zkcoord_group_members``                  gauge      members summed over the owned groups
``zkcoord_members_by_protocol{type,protocol}``  gauge  the same members by group type and by the
                                                      protocol each speaks: ``classic``/``classic``,
                                                      ``consumer``/``consumer``, and ``consumer``/
                                                      ``classic`` (classic members in consumer groups:
                                                      an online upgrade in progress); all three present
``zkcoord_consumer_group_unreconciled_members``  gauge  members of owned consumer groups not at their
                                                      group's target assignment yet (revoking, waiting
                                                      for partitions, or behind the assignment epoch)
``zkcoord_consumer_group_epoch_lag_max``   gauge      the largest group epoch minus target assignment
                                                      epoch of the owned consumer groups (0: every
                                                      target is computed; above 0: a group waits for
                                                      its next target assignment)
``zkcoord_held_heartbeats``                gauge      heartbeats held for the rebalance notice
                                                      (about one per zkcoord-consumer member)
``zkcoord_rebalances_total``               counter    new generations started by this daemon
``zkcoord_rebalance_duration_seconds``     histogram  from the start of PreparingRebalance to the
                                                      group's Stable write (the leader's assignment)
``zkcoord_requests_total{api,error}``      counter    Kafka requests answered; ``error`` is the
                                                      Kafka error name of the response (top-level
                                                      ``error_code``, else the first nonzero nested
                                                      one), ``NONE`` otherwise
``zkcoord_request_latency_seconds{api}``   histogram  time spent answering a request
``zkcoord_zookeeper_connected``            gauge      1 while the ZooKeeper session is connected
``zkcoord_zookeeper_session_expiries_total`` counter  ZooKeeper sessions lost
``zkcoord_zookeeper_suspensions_total``    counter    ZooKeeper connections lost (the session
                                                      suspended; it may come back or expire)
``zkcoord_zookeeper_sessions_given_up_total``  counter  suspensions that lasted the session time-out:
                                                      the session treated as lost, every group
                                                      given up (zkcoord.core.session_loss)
``zkcoord_zookeeper_commit_session_connected``  gauge  1 while the offset commits' own ZooKeeper
                                                      session is open (zkcoord.zk.multi_session;
                                                      opened in the background at the first commit;
                                                      always 0 with a SASL login, whose commits use
                                                      the daemon's)
``zkcoord_zookeeper_commit_sessions_opened_total``  counter  connections of that session opened: a new
                                                      session, or the same one reattached (after
                                                      each reconnect of the daemon's session, and
                                                      after a lost connection)
``zkcoord_zookeeper_commit_session_open_failures_total``  counter  attempts to open one that failed
                                                      (no connection, ZooKeeper's maxClientCnxns,
                                                      a refused login): commits go through the
                                                      daemon's own session meanwhile, slower
``zkcoord_zookeeper_offset_multis_total``  counter    multis the offset commits sent (the commits of
                                                      every owned group share them)
``zkcoord_zookeeper_offset_multis_failed_total``  counter  of those, refused or with their answer lost
                                                      (their commits sent again or failed)
``zkcoord_peer_probes_total{outcome}``     counter    probes of the next daemon's listener (accepted,
                                                      refused, no-answer: zkcoord.core.peer_probe)
``zkcoord_peer_sessions_ended_total{outcome}``  counter  dead daemons' sessions this one ended (ended,
                                                      already expired, gone, registered again, ...)
``zkcoord_offset_commits_total{mode}``     counter    OffsetCommits stored, by the group's offset
                                                      storage mode (zookeeper, dual, kafka)
``zkcoord_forwarded_commit_refusals_total{error}``  counter  partitions of forwarded commits Kafka
                                                      refused, by Kafka's error name
``zkcoord_dual_commit_divergences_total``  counter    dual commits Kafka stored and ZooKeeper did
                                                      not (Kafka ahead; see server.dual_commit)
``zkcoord_forward_aborts_total``           counter    the forwarder's Kafka connections aborted: a
                                                      group lost here with a commit in flight to Kafka
                                                      (server.dual_commit, "A deposed owner's forward")
``zkcoord_groups_with_kafka_members``      gauge      owned dual/kafka groups with members in
                                                      Kafka's own coordinator (last seen)
``zkcoord_kafka_side_members``             gauge      those members, summed over the groups
``zkcoord_mixed_groups``                   gauge      owned groups in handover: legacy ZooKeeper
                                                      consumers registered beside zkcoord's members
                                                      (issue 26, docs/handover.md)
``zkcoord_gateway_connections``            gauge      client connections open on the gateway
``zkcoord_gateway_brokers``                gauge      brokers the gateway has a port for
``zkcoord_gateway_forwarded_requests_total{api}``  counter  requests the gateway passed to a broker
``zkcoord_gateway_forwarded_bytes_total{api,direction}``  counter  bytes of those requests
                                                      (``direction="request"``) and of the brokers'
                                                      answers to them (``"response"``), frames whole
``zkcoord_gateway_broker_connect_failures_total``  counter  client connections closed because no
                                                      broker accepted the gateway's connection
``zkcoord_sasl_logins_total{mechanism,result}``  counter  SASL logins on the daemon's and its
                                                      gateway's listeners (``ok``, ``failed``)
``zkcoord_event_loop_lag_seconds``         histogram  how late the event loop ran a callback due
                                                      every 50 ms (its stalls)
=========================================  =========  ==========================================

The group APIs the gateway answers are counted in ``zkcoord_requests_total``
like those on the daemon's own listener; heartbeats by API there:
``Heartbeat`` (classic members, in classic and in consumer groups) and
``ConsumerGroupHeartbeat`` (KIP-848 members), fast path included.

The gauges computed at scrape time walk the owned groups once, reading
what each group value keeps up to date as it changes (its size, its
classic and reconciled member counts, its epochs): O(1) per group, as
``zkcoord_groups`` and ``zkcoord_group_members`` always were; nothing
walks a group's members at scrape time.

Both follow the owner's in-memory state changes (:meth:`Metrics.observe_transition`),
so they count a rebalance whether or not its start was written; a group
taken over in the middle of a rebalance is timed from its loading.

HTTP (a tiny HTTP/1.1 responder on :func:`asyncio.start_server`; one request
per connection): ``GET /metrics`` is the text exposition (made in a worker
thread: its gauges walk every owned group), ``GET /health``
200 ``{"status": "ready", ...}`` when ZooKeeper is connected and no owned
group is loading, else 503 with the reason; anything else 404.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.utils import floatToGoString

from zkcoord.config import SASL_MECHANISMS
from zkcoord.core.consumer.model import ConsumerGroup
from zkcoord.core.errors import ErrorCode
from zkcoord.core.groups import KINDS, GroupPhase, kind_of
from zkcoord.core.membership import OFFSET_STORAGES
from zkcoord.core.peer_probe import END_RESULTS, Outcome
from zkcoord.wire.bulk_work import off_loop
from zkcoord.wire.response_errors import first_error_code
from zkcoord.wire.responses import EncodedResponse
from zkcoord.zk.connection import SessionEvent

log = logging.getLogger(__name__)


def response_error(response) -> str:
    """The Kafka error name of a response (a message, or an
    :class:`~zkcoord.wire.responses.EncodedResponse`, whose error was found
    when it was encoded): its top-level ``error_code``, else the first
    nonzero nested one, else ``NONE`` (:mod:`zkcoord.wire.response_errors`)."""
    return _error_name(response.error_code if type(response) is EncodedResponse else first_error_code(response))


def _error_name(code: int) -> str:
    if not code:
        return "NONE"
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


LOOP_PROBE_S = 0.05
LOOP_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, float("inf"))


class DaemonMetrics:
    """The metrics of one daemon. ``manager`` and ``conn`` are read at scrape
    time; ``manager`` may be set after construction."""

    def __init__(self, manager=None, conn=None, clock: Callable[[], float] = time.monotonic):
        self.manager = manager
        self.conn = conn
        self._clock = clock
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.rebalances = Counter("zkcoord_rebalances_total", "New group generations started.", registry=r)
        self.rebalance_duration = Histogram(
            "zkcoord_rebalance_duration_seconds",
            "From the start of PreparingRebalance to the group's Stable write.", registry=r)
        self.request_tally = RequestTally()  # zkcoord_requests_total, zkcoord_request_latency_seconds
        r.register(self.request_tally)
        self.session_expiries = Counter("zkcoord_zookeeper_session_expiries_total",
                                        "ZooKeeper sessions lost.", registry=r)
        self.session_suspensions = Counter("zkcoord_zookeeper_suspensions_total",
                                           "ZooKeeper connections lost (session suspended).", registry=r)
        self.sessions_given_up = Counter("zkcoord_zookeeper_sessions_given_up_total",
                                         "Suspensions that lasted the session time-out: the session treated as "
                                         "lost and every group given up.", registry=r)
        self.peer_probes = Counter("zkcoord_peer_probes_total", "Probes of the next daemon's listener, by outcome.",
                                   ["outcome"], registry=r)
        self.peer_sessions_ended = Counter("zkcoord_peer_sessions_ended_total",
                                           "Dead daemons' ZooKeeper sessions this daemon ended, by outcome.",
                                           ["outcome"], registry=r)
        for outcome in Outcome:  # every label value exported from the start, at 0
            self.peer_probes.labels(outcome.value)
        for result in END_RESULTS:
            self.peer_sessions_ended.labels(result)
        self.offset_commits = Counter("zkcoord_offset_commits_total", "OffsetCommits stored, by storage mode.",
                                      ["mode"], registry=r)
        self.forward_refusals = Counter("zkcoord_forwarded_commit_refusals_total",
                                        "Partitions of forwarded commits Kafka refused.", ["error"], registry=r)
        self.dual_divergences = Counter("zkcoord_dual_commit_divergences_total",
                                        "Dual commits stored in Kafka but not in ZooKeeper.", registry=r)
        self.forward_aborts = Counter("zkcoord_forward_aborts_total",
                                      "Times the Kafka connections were aborted because a group stopped being "
                                      "owned here with a commit in flight to Kafka.", registry=r)
        self.forwarded = Counter("zkcoord_gateway_forwarded_requests_total",
                                 "Requests the gateway passed to a broker.", ["api"], registry=r)
        self.forwarded_bytes = Counter("zkcoord_gateway_forwarded_bytes_total",
                                       "Bytes of forwarded requests and of the brokers' answers.",
                                       ["api", "direction"], registry=r)
        self.logins = Counter("zkcoord_sasl_logins_total",
                              "SASL logins on the daemon's and its gateway's listeners, by mechanism and result "
                              "(ok, failed: a wrong password, an unknown user, a refused mechanism).",
                              ["mechanism", "result"], registry=r)
        for mechanism in SASL_MECHANISMS:  # exported from the start, at 0 (a dashboard panel reads them)
            for result in ("ok", "failed"):
                self.logins.labels(mechanism, result)
        self.broker_connect_failures = Counter(
            "zkcoord_gateway_broker_connect_failures_total",
            "Gateway client connections closed because no broker accepted a connection.", registry=r)
        self.loop_lag = Histogram(
            "zkcoord_event_loop_lag_seconds",
            f"How late the daemon's event loop ran a callback due every {LOOP_PROBE_S * 1e3:g} ms: a stall "
            "(a long callback, a collector pass, the process descheduled) delays every request it overlaps.",
            registry=r, buckets=LOOP_LAG_BUCKETS)
        self._loop_probe: asyncio.TimerHandle | None = None
        self._probe_due = 0.0
        self._forwarded_by_key: dict[int, tuple] = {}  # api key -> (requests, request bytes, answer bytes)
        self.gateway = None  # the daemon's Gateway, read at scrape time; None without one
        self.offsets = None  # the daemon's OffsetStore, read at scrape time
        r.register(_ScrapeTimeCollector(self))
        self._generations: dict[str, int] = {}  # group -> last generation seen
        self._preparing: dict[str, float] = {}  # group -> when its PreparingRebalance began
        self._commit_counts: dict[str, Any] = {}  # by storage mode

    # -- the event loop's lateness ---------------------------------------------------
    def start_loop_probe(self) -> None:
        """Observe, every :data:`LOOP_PROBE_S`, how late the running loop is
        (20 callbacks a second: nothing next to a request's cost)."""
        loop = asyncio.get_running_loop()
        self._probe_due = loop.time() + LOOP_PROBE_S
        self._loop_probe = loop.call_at(self._probe_due, self._loop_probe_tick, loop)

    def _loop_probe_tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        self.loop_lag.observe(max(0.0, now - self._probe_due))
        self._probe_due = now + LOOP_PROBE_S
        self._loop_probe = loop.call_at(self._probe_due, self._loop_probe_tick, loop)

    def stop_loop_probe(self) -> None:
        if self._loop_probe is not None:
            self._loop_probe.cancel()
            self._loop_probe = None

    # -- hooks --------------------------------------------------------------------
    def observe_request(self, api: str, response, duration_s: float | None = None) -> None:
        """A request answered (on the event loop's thread)."""
        code = response.error_code if type(response) is EncodedResponse else first_error_code(response)
        self.request_tally.observe(api, code, duration_s)

    def observe_loaded(self, group) -> None:
        """A group was loaded: its stored epoch (generation) is not a new one."""
        self._generations[group.group_id] = kind_of(group).epoch(group)
        self._preparing.pop(group.group_id, None)

    def observe_transition(self, group) -> None:
        """An owned group changed state or epoch (GroupRuntime's on_transition;
        the change is applied: written first if it had to be). A rebalance is
        timed from the first REBALANCING phase to the next STABLE one."""
        kind = kind_of(group)
        group_id, generation, phase = group.group_id, kind.epoch(group), kind.phase(group)
        if generation > self._generations.get(group_id, 0):
            self.rebalances.inc()
        self._generations[group_id] = generation
        if phase is GroupPhase.REBALANCING:
            self._preparing.setdefault(group_id, self._clock())
        elif phase is GroupPhase.STABLE:
            started = self._preparing.pop(group_id, None)
            if started is not None:
                self.rebalance_duration.observe(max(0.0, self._clock() - started))
        else:
            self._preparing.pop(group_id, None)
            if phase is GroupPhase.DEAD:
                self._generations.pop(group_id, None)

    def _forward_children(self, api_key: int) -> tuple:
        children = self._forwarded_by_key.get(api_key)
        if children is None:
            try:
                from kafka.protocol.api_key import ApiKey

                name = ApiKey(api_key).name
            except ValueError:
                name = str(api_key)
            children = self._forwarded_by_key[api_key] = (
                self.forwarded.labels(name), self.forwarded_bytes.labels(name, "request"),
                self.forwarded_bytes.labels(name, "response"))
        return children

    def observe_forward(self, api_key: int, size: int) -> None:
        """The gateway passed a request frame of ``size`` bytes to a broker."""
        requests, request_bytes, _ = self._forward_children(api_key)
        requests.inc()
        request_bytes.inc(size)

    def observe_forwarded_answer(self, api_key: int, size: int) -> None:
        """A broker's answer of ``size`` bytes to a forwarded request began."""
        self._forward_children(api_key)[2].inc(size)

    def observe_login(self, mechanism: str, ok: bool) -> None:
        self.logins.labels(mechanism or "none", "ok" if ok else "failed").inc()

    def observe_broker_connect_failure(self) -> None:
        self.broker_connect_failures.inc()

    def observe_offset_commit(self, mode: str) -> None:
        counted = self._commit_counts.get(mode)
        if counted is None:
            counted = self._commit_counts[mode] = self.offset_commits.labels(mode)
        counted.inc()

    def observe_forward_refusal(self, error: str) -> None:
        self.forward_refusals.labels(error).inc()

    def observe_dual_divergence(self) -> None:
        self.dual_divergences.inc()

    def observe_forward_abort(self) -> None:
        self.forward_aborts.inc()

    def on_session_event(self, event: SessionEvent) -> None:
        """ZkConnection listener (may run on kazoo's thread; counters are thread-safe)."""
        if event is SessionEvent.LOST:
            self.session_expiries.inc()
        elif event is SessionEvent.SUSPENDED:
            self.session_suspensions.inc()
        elif event is SessionEvent.GIVEN_UP:
            self.sessions_given_up.inc()

    # -- scrape / health ------------------------------------------------------------
    def _active_runtimes(self) -> list:
        manager = self.manager
        if manager is None:
            return []
        return [rt for rt in list(manager.runtimes.values()) if rt.active]

    def zookeeper_connected(self) -> bool:
        return bool(self.conn is not None and self.conn.connected)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def health(self) -> tuple[int, dict]:
        """(HTTP status, JSON body)."""
        if not self.zookeeper_connected():
            return 503, {"status": "unavailable", "reason": "ZooKeeper not connected"}
        if self.manager is None:
            return 503, {"status": "unavailable", "reason": "starting"}
        loading = sorted(self.manager._loading)
        if loading:
            return 503, {"status": "unavailable", "reason": "groups loading", "loading": loading}
        return 200, {"status": "ready", "groups_owned": len(self._active_runtimes())}


# (group type, member protocol) of zkcoord_members_by_protocol, each always exported
_MEMBER_PROTOCOLS = (("classic", "classic"), ("consumer", "consumer"), ("consumer", "classic"))


class RequestTally:
    """``zkcoord_requests_total{api,error}`` and
    ``zkcoord_request_latency_seconds{api}`` (Prometheus' default buckets),
    counted in plain dicts by the event loop's thread, the one thread that
    answers requests, and exported as a collector at scrape time. Every
    request is counted, a heartbeat among them: prometheus_client's own
    counter and histogram take a lock per value changed (three for a
    request), more than half the cost of counting it. Both keys are bounded
    (the served APIs, Kafka's error codes). A scrape, in another thread,
    copies each dict in one step before reading it."""

    BUCKETS = Histogram.DEFAULT_BUCKETS

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], int] = {}
        self._latencies: dict[str, list] = {}  # api -> [count per bucket..., sum of seconds]

    def observe(self, api: str, code: int, duration_s: float | None) -> None:
        counts = self._counts
        key = (api, code)
        counts[key] = counts.get(key, 0) + 1
        if duration_s is not None:
            tally = self._latencies.get(api)
            if tally is None:
                tally = self._latencies[api] = [0] * len(self.BUCKETS) + [0.0]
            tally[bisect_left(self.BUCKETS, duration_s)] += 1  # the first bound >= the duration (+Inf last)
            tally[-1] += duration_s

    def collect(self):
        counted = CounterMetricFamily("zkcoord_requests", "Kafka requests answered.", labels=["api", "error"])
        for (api, code), count in sorted(dict(self._counts).items()):
            counted.add_metric([api, _error_name(code)], count)
        yield counted
        timed = HistogramMetricFamily("zkcoord_request_latency_seconds", "Time to answer a Kafka request.",
                                      labels=["api"])
        for api, tally in sorted(dict(self._latencies).items()):
            tally = list(tally)
            cumulative, buckets = 0, []
            for bound, count in zip(self.BUCKETS, tally):
                cumulative += count
                buckets.append((floatToGoString(bound), cumulative))
            timed.add_metric([api], buckets, sum_value=tally[-1])
        yield timed

    def describe(self):
        return []


class _ScrapeTimeCollector:
    """Gauges computed when scraped, from the manager and the connection."""

    def __init__(self, metrics: DaemonMetrics):
        self.metrics = metrics

    def collect(self):
        runtimes = self.metrics._active_runtimes()
        yield GaugeMetricFamily("zkcoord_groups_owned", "Groups this daemon serves.", value=len(runtimes))
        counts = dict.fromkeys(((kind.name, s, m) for kind in KINDS for s in kind.state_names
                                for m in OFFSET_STORAGES), 0)
        members = dict.fromkeys(_MEMBER_PROTOCOLS, 0)
        unreconciled = epoch_lag = 0
        for rt in runtimes:
            group = rt.group
            kind = kind_of(group)
            key = (kind.name, kind.state_name(group), group.offset_storage)
            counts[key] = counts.get(key, 0) + 1
            if type(group) is ConsumerGroup:  # its counters, kept as it changes: O(1) here
                members[("consumer", "classic")] += group.classic_members
                members[("consumer", "consumer")] += group.size - group.classic_members
                unreconciled += group.size - group.reconciled_members
                epoch_lag = max(epoch_lag, group.group_epoch - group.assignment_epoch)
            else:
                members[(kind.name, "classic")] = members.get((kind.name, "classic"), 0) + group.size
        by_state = GaugeMetricFamily("zkcoord_groups", "Groups this daemon serves, by type, state and offset storage.",
                                     labels=["type", "state", "mode"])
        for labels, count in counts.items():
            by_state.add_metric(list(labels), count)
        yield by_state
        yield GaugeMetricFamily("zkcoord_group_members", "Members summed over the owned groups.",
                                value=sum(members.values()))
        by_protocol = GaugeMetricFamily("zkcoord_members_by_protocol",
                                        "Members of the owned groups, by group type and the protocol each speaks.",
                                        labels=["type", "protocol"])
        for labels, count in members.items():
            by_protocol.add_metric(list(labels), count)
        yield by_protocol
        yield GaugeMetricFamily("zkcoord_consumer_group_unreconciled_members",
                                "Members of owned consumer groups not at their target assignment yet.",
                                value=unreconciled)
        yield GaugeMetricFamily("zkcoord_consumer_group_epoch_lag_max",
                                "Largest group epoch minus target assignment epoch of the owned consumer groups.",
                                value=epoch_lag)
        yield GaugeMetricFamily("zkcoord_held_heartbeats", "Heartbeats held for the rebalance notice.",
                                value=sum(rt.held_heartbeats for rt in runtimes))
        offsets = getattr(self.metrics.manager, "group_offsets", None)
        seen = getattr(getattr(offsets, "forwarded", None), "kafka_members", None)
        yield GaugeMetricFamily("zkcoord_groups_with_kafka_members",
                                "Owned groups with members in Kafka's own coordinator.",
                                value=seen.groups if seen is not None else 0)
        yield GaugeMetricFamily("zkcoord_kafka_side_members", "Members in Kafka's own coordinator of owned groups.",
                                value=seen.members if seen is not None else 0)
        handovers = getattr(self.metrics.manager, "handovers", None)
        yield GaugeMetricFamily("zkcoord_mixed_groups",
                                "Owned groups shared with legacy ZooKeeper consumers (in handover).",
                                value=len(handovers) if handovers is not None else 0)
        yield GaugeMetricFamily("zkcoord_zookeeper_connected", "1 while the ZooKeeper session is connected.",
                                value=1 if self.metrics.zookeeper_connected() else 0)
        yield from self._commit_session()
        gateway = self.metrics.gateway
        if gateway is not None:
            yield GaugeMetricFamily("zkcoord_gateway_connections", "Client connections open on the gateway.",
                                    value=gateway.connection_count)
            yield GaugeMetricFamily("zkcoord_gateway_brokers", "Brokers the gateway has a port for.",
                                    value=gateway.broker_count)

    def _commit_session(self):
        """The offset commits' own ZooKeeper session and their multis (0 before the store exists)."""
        store = self.metrics.offsets
        session = store.commit_session if store is not None else None
        stats = store.stats if store is not None else None
        yield GaugeMetricFamily("zkcoord_zookeeper_commit_session_connected",
                                "1 while the offset commits' own ZooKeeper session is open (opened in the "
                                "background at the first commit; 0 with a SASL login, whose commits go on the "
                                "daemon's session).",
                                value=1 if session is not None and session.connected else 0)
        yield CounterMetricFamily("zkcoord_zookeeper_commit_sessions_opened",
                                  "Connections of the offset commits' session opened: a new session, or the same one "
                                  "reattached (after each reconnect of the daemon's session, and after a lost "
                                  "connection).",
                                  value=session.sessions_opened if session is not None else 0)
        yield CounterMetricFamily("zkcoord_zookeeper_commit_session_open_failures",
                                  "Attempts to open the offset commits' session that failed (no connection, "
                                  "ZooKeeper's maxClientCnxns, a refused login): commits go through the daemon's "
                                  "own session meanwhile.",
                                  value=session.open_failures if session is not None else 0)
        yield CounterMetricFamily("zkcoord_zookeeper_offset_multis",
                                  "Multis the offset commits sent to ZooKeeper (shared by every owned group).",
                                  value=stats.multis if stats is not None else 0)
        yield CounterMetricFamily("zkcoord_zookeeper_offset_multis_failed",
                                  "Offset commit multis refused, or whose answer was lost.",
                                  value=stats.failed_multis if stats is not None else 0)

    def describe(self):
        return []


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            503: "Service Unavailable"}
READ_TIMEOUT_S = 10.0


class MetricsServer:
    """``GET /metrics`` and ``GET /health`` over a minimal HTTP/1.1 responder."""

    def __init__(self, metrics: DaemonMetrics, host: str, port: int):
        self.metrics = metrics
        self.host, self.port = host, port
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[asyncio.Task] = set()

    @property
    def bound_port(self) -> int:
        assert self._server is not None and self._server.sockets
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._clients):
            task.cancel()
        await self._server.wait_closed()
        self._server = None

    def respond(self, method: str, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a request line."""
        refused = self._refused(method, path)
        if refused is not None:
            return refused
        if path.split("?", 1)[0] == "/metrics":
            return 200, CONTENT_TYPE_LATEST, self.metrics.render()
        status, body = self.metrics.health()
        return status, "application/json", (json.dumps(body) + "\n").encode()

    async def respond_async(self, method: str, path: str) -> tuple[int, str, bytes]:
        """:meth:`respond`, for a source whose ``render()`` and ``health()`` are
        coroutines (the supervisor's sum of its workers)."""
        if not inspect.iscoroutinefunction(self.metrics.render):
            if path.split("?", 1)[0] == "/metrics" and self._refused(method, path) is None:
                # In a worker thread: the scrape-time gauges walk every owned group (10,000 of
                # them took 25-60 ms), which on the loop would stall every request meanwhile.
                return 200, CONTENT_TYPE_LATEST, await off_loop(self.metrics.render)
            return self.respond(method, path)
        refused = self._refused(method, path)
        if refused is not None:
            return refused
        if path.split("?", 1)[0] == "/metrics":
            return 200, CONTENT_TYPE_LATEST, await self.metrics.render()
        status, body = await self.metrics.health()
        return status, "application/json", (json.dumps(body) + "\n").encode()

    @staticmethod
    def _refused(method: str, path: str) -> tuple[int, str, bytes] | None:
        if path.split("?", 1)[0] not in ("/metrics", "/health"):
            return 404, "text/plain; charset=utf-8", b"not found\n"
        if method not in ("GET", "HEAD"):
            return 405, "text/plain; charset=utf-8", b"method not allowed\n"
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._clients.add(task)
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
                method, path, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
                status, content_type, body = await self.respond_async(method, path)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
                return
            except ValueError:
                status, content_type, body, method = 400, "text/plain; charset=utf-8", b"bad request\n", "GET"
            except Exception:  # a bug must not kill the server
                log.exception("metrics endpoint failed")
                return
            header = (f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {content_type}\r\n"
                      f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("latin-1")
            writer.write(header if method == "HEAD" else header + body)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._clients.discard(task)
            writer.close()
