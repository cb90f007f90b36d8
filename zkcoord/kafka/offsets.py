"""Consumer-group offsets and log ranges in Kafka, through kafka-python's admin client.

This module owns one :class:`KafkaAdminClient` per :class:`KafkaOffsets` and
every question the migration toolkit asks Kafka: partition counts, each
partition's log start and end, a group's committed offsets in
``__consumer_offsets``, whether a group has members, and committing offsets
for a group that has none.

Rules:

1. No I/O in the constructor: :meth:`KafkaOffsets.start` bootstraps (the
   admin client connects in its own constructor), :meth:`close` stops it;
   ``with KafkaOffsets("k1:9092") as kafka:`` does both. The object is built
   from a bootstrap string alone, so a Spark task can make its own.
2. Calls are blocking and serialized by a lock (kafka-python runs its I/O on
   a thread of its own); async callers use ``asyncio.to_thread``.
3. Retriable Kafka errors (no coordinator yet, leader moving, timeouts) are
   retried with backoff until ``request_timeout_ms`` has passed, each retry
   looking the groups' coordinators up again (kafka-python never forgets
   one it found: :mod:`zkcoord.kafka.admin_client`), then become
   :class:`~zkcoord.errors.ServiceUnavailableError` naming the bootstrap
   servers. ACL refusals are AuthorizationError (naming what was asked and
   the user), a refused login AuthenticationError (checked before the admin
   client is built: :func:`zkcoord.kafka.login.check_login`); an unknown
   partition is NotFoundError; any other Kafka error a ZkcoordError saying
   what we asked.
4. Offsets are plain ints; ``None`` means "none" (Kafka's -1).
5. :meth:`KafkaOffsets.abort` ends the client's connections at once, without
   waiting for the call in progress (which holds the lock): from the moment
   it is called no try starts on that client, and the call in progress ends
   at its next try (``before_try`` is asked first, then the call fails with
   ServiceUnavailableError); the next :meth:`~KafkaOffsets.start` builds a
   fresh client. With ``reset_on_close`` every socket of the client has
   ``SO_LINGER`` on with 0 s (and kafka-python's ``TCP_NODELAY``), so closing
   a connection resets it and the kernel drops what it still holds to send:
   a request that has not left this machine never will. The daemon's
   forwarder uses both (:mod:`zkcoord.kafka.forwarder`, rule 5).
"""

from __future__ import annotations

import logging
import re
import socket
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from zkcoord.errors import (
    AuthenticationError, AuthorizationError, ConfigError, NotFoundError, ServiceUnavailableError, UsageError,
    ZkcoordError,
)
from zkcoord.kafka.admin_client import close_quietly, forget_coordinators, reset_and_close

__all__ = ["KafkaOffsets", "LogRange", "KafkaGroup", "TopicPartition", "check_bootstrap_servers",
           "security_options", "is_authentication_failure", "login_refused", "RESET_ON_CLOSE_OPTIONS"]

log = logging.getLogger(__name__)
T = TypeVar("T")
TopicPartition = tuple[str, int]
_CHUNK = 100  # groups per OffsetFetch / DescribeGroups request
_ERROR_NAME = re.compile(r"\s*(?:\[Error -?\d+\]\s*)?(\w+)")
_NOT_CLASSIC = "is not a classic group"  # Kafka 4.x's GROUP_ID_NOT_FOUND message for a consumer group
# kafka-python's default socket options plus SO_LINGER on with 0 s: close() resets the connection and the
# kernel discards the bytes not yet sent (or not yet acknowledged) instead of sending them after the close.
RESET_ON_CLOSE_OPTIONS = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),
                          (socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)))


@dataclass(frozen=True)
class LogRange:
    """A partition's log start (earliest offset) and end (next offset to be written)."""

    start: int
    end: int


@dataclass(frozen=True)
class KafkaGroup:
    """A group as Kafka's coordinator sees it (``Dead``: Kafka does not know it)."""

    state: str
    members: int
    protocol_type: str = ""
    # (member id, client id, client host) of each member, as DescribeGroups names them
    member_ids: tuple[tuple[str, str, str], ...] = ()


def security_options(security) -> dict[str, Any]:
    """kafka-python keyword arguments of a KafkaClientSecurity (None: PLAINTEXT, none)."""
    return {} if security is None else dict(security.kafka_python_options())


def is_authentication_failure(exc: BaseException) -> bool:
    """A kafka-python error that means the broker refused our login (SASL or TLS)."""
    from kafka import errors

    kinds = tuple(getattr(errors, name) for name in ("SaslAuthenticationFailedError", "AuthenticationFailedError",
                                                      "IllegalSaslStateError", "UnsupportedSaslMechanismError")
                  if hasattr(errors, name))
    import ssl

    return isinstance(exc, kinds + (ssl.SSLCertVerificationError,))


def login_refused(bootstrap_servers: str, security, exc: BaseException) -> AuthenticationError:
    who = security.describe() if security is not None else "PLAINTEXT"
    return AuthenticationError(f"Kafka at {bootstrap_servers} refused the login ({who}): {exc}; check the client "
                               "settings (--command-config, kafka_client_config) and the user's credentials")


def check_bootstrap_servers(value: str) -> str:
    """``host:port[,host:port...]`` (``host`` alone means port 9092), else ConfigError."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("the Kafka bootstrap servers are empty; expected HOST:PORT[,HOST:PORT...] "
                          "(--bootstrap-servers or ZKCOORD_BOOTSTRAP_SERVERS)")
    for item in value.split(","):
        host, sep, port = item.strip().rpartition(":")
        host = host.strip("[]") if sep else item.strip()
        if not host or (sep and (not port.isdigit() or not 0 < int(port) <= 65535)):
            raise ConfigError(f"Kafka bootstrap servers {value!r}: {item.strip()!r} is not HOST:PORT")
    return ",".join(item.strip() for item in value.split(","))


class KafkaOffsets:
    """Offsets and log ranges of one Kafka cluster. No I/O until :meth:`start`."""

    def __init__(self, bootstrap_servers: str, *, request_timeout_ms: int = 15_000,
                 client_id: str = "zkcoord-migrate", security=None, reset_on_close: bool = False) -> None:
        self.bootstrap_servers = check_bootstrap_servers(bootstrap_servers)
        self.security = security  # KafkaClientSecurity (security.protocol, SASL, TLS); None: PLAINTEXT
        if isinstance(request_timeout_ms, bool) or not isinstance(request_timeout_ms, int) \
                or not 1_000 <= request_timeout_ms <= 3_600_000:
            raise ConfigError(f"request_timeout_ms must be from 1000 to 3600000, got {request_timeout_ms!r}")
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id
        self.reset_on_close = reset_on_close  # rule 5
        self._admin: Any = None
        self._lock = threading.Lock()  # serializes the calls (held for a whole call, retries included)
        # Guards _admin and _aborted between a call and abort(); never held while waiting for Kafka.
        self._state = threading.Lock()
        self._aborted: Any = None  # the client abort() ended (while it is still _admin); None: none
        self._abort_reason = ""

    # ------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Connect to the cluster, or raise ServiceUnavailableError / ConfigError."""
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        from zkcoord.kafka.login import check_login

        with self._lock:
            if self._admin is not None and self._admin is not self._aborted:
                return
            # kafka-python retries a refused login until its bootstrap time-out: find out at once (login.py)
            check_login(self.bootstrap_servers, self.security, timeout_s=self.request_timeout_ms / 1000)
            options = {"socket_options": list(RESET_ON_CLOSE_OPTIONS)} if self.reset_on_close else {}
            try:
                admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap_servers, client_id=self.client_id,
                    request_timeout_ms=self.request_timeout_ms, bootstrap_timeout_ms=self.request_timeout_ms,
                    **options, **security_options(self.security))
            except (KafkaError, OSError) as exc:
                if is_authentication_failure(exc):
                    raise login_refused(self.bootstrap_servers, self.security, exc) from None
                raise ServiceUnavailableError(
                    f"cannot connect to Kafka at {self.bootstrap_servers}: no broker answered within "
                    f"{self.request_timeout_ms / 1000:g} s ({exc}); check the address and that Kafka is up"
                ) from None
            except ValueError as exc:
                raise ConfigError(f"Kafka bootstrap servers {self.bootstrap_servers!r}: {exc}") from None
            with self._state:  # no call is in progress (we hold the lock): none can be on the client replaced
                self._admin, self._aborted = admin, None  # an aborted client replaced is closed by its abort

    def close(self) -> None:
        with self._lock, self._state:
            admin, self._admin = self._admin, None
            aborted, self._aborted = admin is self._aborted, None
        if admin is not None and not aborted:  # an aborted client is closed by its abort
            close_quietly(admin)

    def abort(self, reason: str) -> Callable[[], None] | None:
        """Rule 5: end the client's connections without waiting for the call
        in progress. Returns at once, the client marked aborted (no try starts
        on it from now on), with the function that resets its connections and
        stops it (blocking: it joins kafka-python's I/O thread; run it off the
        event loop); None when there is no client to abort."""
        with self._state:
            admin = self._admin
            if admin is None or admin is self._aborted:
                return None
            self._aborted, self._abort_reason = admin, reason
        return lambda: reset_and_close(admin, reason)

    def __enter__(self) -> KafkaOffsets:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------ questions
    def partition_counts(self, topics: Iterable[str]) -> dict[str, int | None]:
        """Topic -> number of partitions (None: the topic does not exist)."""
        wanted = sorted(set(topics))
        if not wanted:
            return {}
        described = self._call(f"describe topics {_short(wanted)}", self._describe_topics, wanted)
        counts: dict[str, int | None] = {topic: None for topic in wanted}
        for entry in described:
            name = entry.get("name") or entry.get("topic")
            if name in counts and not entry.get("error_code"):
                counts[name] = len(entry.get("partitions") or ()) or None
        return counts

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str | None]:
        """Topic -> its id in Kafka's text form (None: the topic does not
        exist, or the broker names no id: Metadata below v10)."""
        from uuid import UUID

        from zkcoord.topic_ids import topic_id_text

        wanted = sorted(set(topics))
        if not wanted:
            return {}
        described = self._call(f"describe topics {_short(wanted)}", self._describe_topics, wanted)
        found: dict[str, str | None] = {topic: None for topic in wanted}
        for entry in described:
            name, raw = entry.get("name") or entry.get("topic"), entry.get("topic_id")
            if name not in found or entry.get("error_code") or raw is None:
                continue
            try:
                topic_id = raw if isinstance(raw, UUID) else UUID(str(raw))
            except ValueError:
                continue
            found[name] = topic_id_text(topic_id) if topic_id.int else None
        return found

    def _describe_topics(self, topics: list[str]) -> list[dict]:
        import kafka.errors as Errors

        described = self._admin.describe_topics(topics)
        for entry in described:
            error = Errors.for_code(entry.get("error_code") or 0)
            if error is Errors.NoError or error is Errors.UnknownTopicOrPartitionError:
                continue
            if error.retriable or error is Errors.TopicAuthorizationFailedError:
                raise error(f"topic {entry.get('name')!r}")
            # any other error (an invalid name, say): the topic cannot exist
        return described

    def log_ranges(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, LogRange]:
        """Log start and end of each partition; NotFoundError if one does not exist
        (ask :meth:`partition_counts` first)."""
        from kafka import TopicPartition as KafkaTP
        from kafka.admin import OffsetSpec

        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        what = f"list the log offsets of {len(wanted)} partition(s)"
        earliest = self._call(what, self._admin_call, "list_partition_offsets",
                              {KafkaTP(t, p): OffsetSpec.EARLIEST for t, p in wanted})
        latest = self._call(what, self._admin_call, "list_partition_offsets",
                            {KafkaTP(t, p): OffsetSpec.LATEST for t, p in wanted})
        found = {}
        for topic, partition in wanted:
            start, end = earliest.get(KafkaTP(topic, partition)), latest.get(KafkaTP(topic, partition))
            if start is None or end is None:
                raise ZkcoordError(f"Kafka at {self.bootstrap_servers} gave no log offsets for {topic}-{partition}")
            found[(topic, partition)] = LogRange(start.offset, end.offset)
        return found

    def committed_offsets(self, groups: Iterable[str]) -> dict[str, dict[TopicPartition, int]]:
        """Group -> {(topic, partition): committed offset}; groups without
        offsets in Kafka map to ``{}``."""
        wanted = sorted(set(groups))
        found: dict[str, dict[TopicPartition, int]] = {g: {} for g in wanted}
        for chunk in _chunks(wanted):
            answer = self._call(f"fetch the committed offsets of group(s) {_short(chunk)}",
                                self._admin_call, "list_group_offsets", {g: None for g in chunk})
            for group, offsets in answer.items():
                found[group] = {(tp.topic, tp.partition): oam.offset for tp, oam in offsets.items()
                                if oam.offset is not None and oam.offset >= 0}
        return found

    def groups(self, groups: Iterable[str]) -> dict[str, KafkaGroup]:
        """Group -> its state and member count in Kafka."""
        wanted = sorted(set(groups))
        found = {}
        for chunk in _chunks(wanted):
            answer = self._call(f"describe group(s) {_short(chunk)}", self._describe_groups, chunk)
            for group in chunk:
                entry = answer.get(group) or {}
                members = entry.get("members") or ()
                found[group] = KafkaGroup(str(entry.get("group_state") or "Dead"), len(members),
                                          str(entry.get("protocol_type") or ""), _member_ids(members))
        return found

    def group(self, group: str) -> KafkaGroup:
        """One group's state and members in Kafka's own coordinator."""
        return self.groups([group])[group]

    def _describe_groups(self, groups: list[str]) -> dict[str, dict]:
        """DescribeGroups' entries by group. Kafka 4.x (DescribeGroups v6, KIP-1043) answers
        GROUP_ID_NOT_FOUND where older brokers answered state Dead: for a group it does not know
        (Dead here too) and for a group of another type, "Group g is not a classic group."
        (KIP-848's consumer groups: described with ConsumerGroupDescribe instead)."""
        import kafka.errors as Errors

        answer = self._admin.describe_groups(groups)
        modern = []
        for group, entry in answer.items():
            error = entry.get("error")  # kafka-python gives "[Error 14] <ErrorClass>: <message>", not the class
            if error:
                name = _ERROR_NAME.match(str(error))
                kind = getattr(Errors, name.group(1), None) if name else None
                if kind is Errors.GroupIdNotFoundError:
                    entry.update(error=None, group_state="Dead", members=[])
                    if _NOT_CLASSIC in str(error):
                        modern.append(group)
                    continue
                if isinstance(kind, type) and issubclass(kind, Errors.KafkaError):
                    raise kind(f"group {group!r}")
                raise Errors.KafkaError(f"group {group!r}: {error}")
        if modern:
            answer.update(self._run(self._describe_consumer_groups, modern))
        return answer

    async def _describe_consumer_groups(self, groups: list[str]) -> dict[str, dict]:
        """On kafka-python's I/O loop: ConsumerGroupDescribe (API 69) of KIP-848 consumer groups, as
        DescribeGroups-like entries (state, protocol type ``consumer``, members)."""
        import kafka.errors as Errors

        from zkcoord.schemas import ConsumerGroupDescribeRequest

        admin = self._admin
        by_node: dict[int, list[str]] = {}
        for group, node in (await admin._find_coordinator_ids(groups)).items():
            by_node.setdefault(node, []).append(group)
        found = {}
        for node, chunk in by_node.items():
            request = ConsumerGroupDescribeRequest(group_ids=chunk, include_authorized_operations=False)
            response = await admin._manager.send(request, node_id=node)
            for entry in response.groups:
                error = Errors.for_code(entry.error_code)
                if error is Errors.GroupIdNotFoundError:  # gone, or converted back to classic since
                    found[entry.group_id] = {"group_state": "Dead", "members": [], "error": None}
                    continue
                if error is not Errors.NoError:
                    raise error(f"group {entry.group_id!r}: {entry.error_message or ''}".rstrip(": "))
                found[entry.group_id] = {
                    "group_state": entry.group_state, "protocol_type": "consumer", "error": None,
                    "members": [{"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host}
                                for m in entry.members]}
        return found

    def list_groups(self) -> list[str]:
        """Every consumer group Kafka's coordinators know, sorted."""
        listed = self._call("list the consumer groups", self._admin_call, "list_groups")
        return sorted({entry["group_id"] for entry in listed})

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``{(topic, partition): offset}`` for ``group``, which must
        have no active members (Kafka refuses commits from outside a live group)."""
        from kafka import TopicPartition as KafkaTP
        from kafka.structs import OffsetAndMetadata

        request = {}
        for (topic, partition), offset in offsets.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise UsageError(f"offset of {topic}-{partition} must be a whole number >= 0, got {offset!r}")
            request[KafkaTP(topic, partition)] = OffsetAndMetadata(offset, "", None)
        if not request:
            return
        answer = self._call(f"commit offsets of group {group!r}", self._admin_call, "alter_group_offsets",
                            group, request)
        failed = {f"{tp.topic}-{tp.partition}": error for tp, error in answer.items()
                  if error.__name__ != "NoError"}
        if failed:
            raise self._commit_refused(group, failed)

    def commit_many(self, commits: Mapping[str, Mapping[TopicPartition, int]]) -> dict[str, ZkcoordError | None]:
        """:meth:`commit_offsets` for many groups at once: every group's
        OffsetCommit is sent before any answer is awaited (one connection per
        coordinator, requests pipelined; coordinators found with one batched
        FindCoordinator where the broker has v4). Returns group -> None
        (committed) or the error :meth:`commit_offsets` would have raised
        for it; a lost connection or time-out raises, as one commit does.
        Groups with a retriable error (the coordinator moved, say) are sent
        again one at a time through :meth:`commit_offsets` (rule 3)."""
        from kafka import TopicPartition as KafkaTP
        from kafka.structs import OffsetAndMetadata

        requests = {}
        for group, offsets in commits.items():
            request = {}
            for (topic, partition), offset in offsets.items():
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                    raise UsageError(f"offset of {topic}-{partition} must be a whole number >= 0, got {offset!r}")
                request[KafkaTP(topic, partition)] = OffsetAndMetadata(offset, "", None)
            if request:
                requests[group] = request
        found: dict[str, ZkcoordError | None] = {group: None for group in commits}
        if not requests:
            return found
        answers = self._call(f"commit offsets of {len(requests)} group(s) {_short(sorted(requests))}",
                             self._run, self._commit_pipelined, requests)
        again = []
        for group, answer in answers.items():
            if isinstance(answer, BaseException):
                again.append(group)
                continue
            failed = {f"{tp.topic}-{tp.partition}": error for tp, error in answer.items()
                      if error.__name__ != "NoError"}
            if any(getattr(error, "retriable", False) for error in failed.values()):
                again.append(group)
            elif failed:
                found[group] = self._commit_refused(group, failed)
        for group in again:
            try:
                self.commit_offsets(group, commits[group])
            except ServiceUnavailableError:
                raise
            except ZkcoordError as exc:
                found[group] = exc
        return found

    def _commit_refused(self, group: str, failed: Mapping[str, type]) -> ZkcoordError:
        """The error of a commit Kafka refused for the partitions in ``failed`` (name -> error class)."""
        import kafka.errors as Errors

        listed = ", ".join(f"{tp} {error.__name__}" for tp, error in sorted(failed.items(), key=lambda kv: kv[0]))
        denied = (Errors.TopicAuthorizationFailedError, Errors.GroupAuthorizationFailedError)
        if any(issubclass(error, denied) for error in failed.values()):
            return AuthorizationError(f"Kafka at {self.bootstrap_servers} refused offsets of group {group!r}: "
                                      f"{listed}: not authorized for {self._who()}; grant READ on the group and "
                                      f"the topics")
        return ZkcoordError(f"Kafka at {self.bootstrap_servers} refused offsets of group {group!r}: {listed} "
                            "(a group with active members accepts no commits from outside)")

    async def _commit_pipelined(self, requests: dict) -> dict:
        """On kafka-python's I/O loop: one OffsetCommit per group, pipelined
        (up to the connection's in-flight limit per coordinator, the next sent
        as the oldest is answered); group -> partition errors, or
        the exception of that group's request. Uses the admin client's own
        request builder and coordinator cache (kafka-python 3.0's
        ``_find_coordinator_ids`` / ``_alter_group_offsets_request``)."""
        admin = self._admin
        coordinators = await admin._find_coordinator_ids(list(requests))
        # A connection takes max_in_flight_requests_per_connection requests at once and refuses more
        # (NodeNotReadyError "Node paused"), so each coordinator gets a sliding window one smaller (room
        # for the client's own metadata requests): the oldest answer is awaited before the next is sent.
        window = max(1, int(admin.config.get("max_in_flight_requests_per_connection", 5)) - 1)
        pending: deque = deque()
        in_flight: Counter = Counter()
        answers = {}

        async def settle_oldest() -> None:
            group, node, future = pending.popleft()
            in_flight[node] -= 1
            try:
                answers[group] = admin._alter_group_offsets_process_response(await future)
            except Exception as exc:  # that group's; the caller sends it again alone
                answers[group] = exc

        for group, offsets in requests.items():
            node = coordinators[group]
            while in_flight[node] >= window:
                await settle_oldest()
            pending.append((group, node, admin._manager.send(admin._alter_group_offsets_request(group, offsets),
                                                             node_id=node)))
            in_flight[node] += 1
        while pending:
            await settle_oldest()
        return answers

    def _run(self, coroutine_fn: Callable[..., Any], *args: Any) -> Any:
        return self._admin._manager.run(coroutine_fn, *args)

    # ------------------------------------------------------------ plumbing
    def _admin_call(self, method: str, *args: Any) -> Any:
        return getattr(self._admin, method)(*args)

    def _call(self, what: str, fn: Callable[..., T], *args: Any, before_try: Callable[[], None] | None = None) -> T:
        """``fn(*args)`` under the lock, retrying retriable errors until the
        deadline. ``before_try()`` runs before each try and may refuse it by
        raising (a forwarded commit's owner re-checks that it still owns the
        group: a try after its deposition would store an older offset)."""
        from kafka.errors import KafkaError

        deadline = time.monotonic() + self.request_timeout_ms / 1000
        delay = 0.1
        with self._lock:
            admin = self._admin
            if admin is None:
                raise RuntimeError("KafkaOffsets.start() has not been called")
            while True:
                if before_try is not None:
                    before_try()
                self._not_aborted(admin, what)
                try:
                    return fn(*args)
                except Exception as exc:
                    if self._aborted is admin:
                        continue  # aborted under this try (rule 5): before_try, then the abort, end the call
                    if not isinstance(exc, (KafkaError, OSError)):
                        raise
                    if not self._retriable(exc) or time.monotonic() + delay > deadline:
                        raise self._translate(exc, what) from None
                    log.debug("retrying %s after %r", what, exc)
                    forget_coordinators(admin)  # the group's coordinator may have moved (admin_client.py)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _not_aborted(self, admin: Any, what: str) -> None:
        """Raise ServiceUnavailableError if ``admin`` was aborted (rule 5)."""
        with self._state:
            if admin is not self._aborted:
                return
            reason = self._abort_reason
        raise ServiceUnavailableError(f"cannot {what}: the connections to Kafka at {self.bootstrap_servers} were "
                                      f"aborted ({reason}); the next call connects again")

    @staticmethod
    def _retriable(exc: BaseException) -> bool:
        import kafka.errors as Errors

        if isinstance(exc, Errors.UnknownTopicOrPartitionError):
            return False  # it will not appear by waiting; the caller asked for something absent
        return isinstance(exc, OSError) or bool(getattr(exc, "retriable", False))

    def _translate(self, exc: BaseException, what: str) -> ZkcoordError:
        import kafka.errors as Errors

        where = f"Kafka at {self.bootstrap_servers}"
        if isinstance(exc, Errors.UnknownTopicOrPartitionError):
            return NotFoundError(f"cannot {what}: {where} does not know a topic or partition asked for ({exc})")
        if isinstance(exc, (Errors.TopicAuthorizationFailedError, Errors.GroupAuthorizationFailedError,
                            Errors.ClusterAuthorizationFailedError)):
            return AuthorizationError(f"{where} refused to let us {what}: not authorized ({exc or type(exc).__name__})"
                                      f" for {self._who()}; grant DESCRIBE/READ on the topics and groups")
        if is_authentication_failure(exc):
            return login_refused(self.bootstrap_servers, self.security, exc)
        if isinstance(exc, OSError) or self._retriable(exc):
            return ServiceUnavailableError(f"{where} did not let us {what} within "
                                           f"{self.request_timeout_ms / 1000:g} s (last error: {exc}); "
                                           "check that the brokers are up and reachable")
        return ZkcoordError(f"{where} failed to {what}: {exc}")

    def _who(self) -> str:
        return self.security.describe() if self.security is not None else "PLAINTEXT"


def _chunks(items: list[str]) -> Iterable[list[str]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i:i + _CHUNK]


def _short(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _member_ids(members) -> tuple[tuple[str, str, str], ...]:
    """(member id, client id, client host) of DescribeGroups' member entries, sorted."""
    found = []
    for member in members:
        if isinstance(member, dict):
            found.append((str(member.get("member_id") or ""), str(member.get("client_id") or ""),
                          str(member.get("client_host") or "")))
    return tuple(sorted(found))
