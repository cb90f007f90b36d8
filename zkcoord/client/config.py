"""Settings of the thin consumer: one frozen dataclass, validated on
construction, units in the names.

The fields carry the names Kafka users know (``session_timeout_ms``,
``max_poll_interval_ms``, ``auto_offset_reset``, ...) and map onto
kafka-python's ``KafkaConsumer`` options in :meth:`ConsumerConfig.kafka_options`.
As with the daemon's settings (:mod:`zkcoord.config`), every field is also an
environment variable (``coordinators`` is ``ZKCOORD_COORDINATORS``,
``bootstrap_servers`` is ``ZKCOORD_BOOTSTRAP_SERVERS``) when the config is
built with :func:`zkcoord.config.build_config`; so a boolean or a list may
arrive as text (``"false"``, ``"range,sticky"``) and is normalised here.

Security is Kafka's client settings with Kafka's names, as one value:
``security`` is a :class:`~zkcoord.kafka.client_security.KafkaClientSecurity`
(``KafkaClientSecurity.from_file("alice.properties")`` reads a Java client
properties file: ``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.truststore.location``, ...). It logs in to the
brokers and to the zkcoord daemons, which in a secured deployment share the
users; ``coordinator_security`` is for daemons that listen with other
settings than the brokers (kafka-python connects to each node with the
settings of its own kind: :mod:`zkcoord.client.network`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from zkcoord.config import parse_host_port
from zkcoord.kafka.client_security import KafkaClientSecurity
from zkcoord.core.errors import ErrorCode, validate_group_id
from zkcoord.errors import ConfigError

ASSIGNORS = {
    "range": RangePartitionAssignor,
    "roundrobin": RoundRobinPartitionAssignor,
    "sticky": StickyPartitionAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}
COOPERATIVE = {"cooperative-sticky"}
OFFSET_RESETS = ("earliest", "latest", "none")
GROUP_PROTOCOLS = ("classic", "consumer")  # Kafka's group.protocol
# Kafka refuses these with group.protocol=consumer: the coordinator decides them (ConsumerConfig 4.4).
COORDINATOR_DECIDES = {"session_timeout_ms": "the daemons' group_consumer_session_timeout_ms",
                       "heartbeat_interval_ms": "the daemons' group_consumer_heartbeat_interval_ms",
                       "assignment_strategy": "group_remote_assignor, among the daemons' group_consumer_assignors"}
_INSTANCE_ID = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


@dataclass(frozen=True)
class ConsumerConfig:
    """Settings of one :class:`~zkcoord.client.Consumer`.

    ``coordinators`` are zkcoord daemons (any of them: each one knows which
    daemon owns the group), ``bootstrap_servers`` the Kafka brokers that
    serve the data. ``rebalance_timeout_ms`` 0 means ``max_poll_interval_ms``,
    as in Kafka's consumer; ``group_instance_id`` "" means a dynamic member.
    """

    coordinators: str = ""
    bootstrap_servers: str = ""
    group_id: str = ""
    client_id: str = "zkcoord-consumer"
    group_instance_id: str = ""
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    rebalance_timeout_ms: int = 0
    assignment_strategy: tuple[str, ...] = ("range",)
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    auto_offset_reset: str = "latest"
    max_poll_records: int = 500
    fetch_max_wait_ms: int = 500
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    reconnect_backoff_max_ms: int = 1_000
    metadata_max_age_ms: int = 300_000
    bootstrap_timeout_ms: int = 30_000
    # Hear of rebalances through the daemon's held heartbeats (zkcoord.client.notice), where it offers them.
    rebalance_notice: bool = True
    # Kafka's client settings (security.protocol, sasl.*, ssl.*) for the brokers and the daemons; None: PLAINTEXT.
    security: KafkaClientSecurity | None = None
    # The daemons' own, when their listeners differ from the brokers' (None: ``security`` for both).
    coordinator_security: KafkaClientSecurity | None = None
    # Kafka's group.protocol: classic (JoinGroup/SyncGroup) or consumer (KIP-848's ConsumerGroupHeartbeat).
    group_protocol: str = "classic"
    # Kafka's group.remote.assignor: the coordinator's assignor for this member (consumer protocol); "": its default.
    group_remote_assignor: str = ""

    def __post_init__(self) -> None:
        self._normalise()
        if not self.coordinators:
            raise ConfigError("coordinators (--coordinators, ZKCOORD_COORDINATORS) is required: the zkcoord "
                              "daemons as HOST:PORT[,HOST:PORT...]")
        if not self.bootstrap_servers:
            raise ConfigError("bootstrap_servers (--bootstrap-servers, ZKCOORD_BOOTSTRAP_SERVERS) is required: "
                              "the Kafka brokers as HOST:PORT[,HOST:PORT...]")
        self.daemon_addresses  # validates
        for address in self.bootstrap_servers.split(","):
            parse_host_port(address.strip(), "bootstrap_servers")
        if not self.group_id:
            raise ConfigError("group_id (--group, ZKCOORD_GROUP_ID) is required: the consumer group to join")
        if validate_group_id(self.group_id) is not ErrorCode.NONE:
            raise ConfigError(f"group_id={self.group_id!r} is not a valid group id: it must be 1 to 249 "
                              "characters")
        if self.group_instance_id and not _INSTANCE_ID.match(self.group_instance_id):
            raise ConfigError(f"group_instance_id={self.group_instance_id!r} must be 1 to 249 characters "
                              "from A-Z, a-z, 0-9, '.', '_' and '-'")
        self._check_timeouts()
        if self.auto_offset_reset not in OFFSET_RESETS:
            raise ConfigError(f"auto_offset_reset={self.auto_offset_reset!r} must be one of "
                              f"{', '.join(OFFSET_RESETS)}")
        self._check_strategies()
        self._check_protocol()
        for name in ("security", "coordinator_security"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, KafkaClientSecurity):
                raise ConfigError(f"{name} must be Kafka client settings (KafkaClientSecurity.from_file(path) of a "
                                  f"client properties file), got a {type(value).__name__}")

    def _normalise(self) -> None:
        """Text from flags or the environment -> the field's type."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type == "bool" and isinstance(value, str):
                lowered = value.strip().lower()
                if lowered not in _TRUE | _FALSE:
                    raise ConfigError(f"{field.name}={value!r} must be true or false")
                object.__setattr__(self, field.name, lowered in _TRUE)
            elif field.type == "tuple[str, ...]" and isinstance(value, (str, list)):
                items = value.split(",") if isinstance(value, str) else value
                object.__setattr__(self, field.name, tuple(s.strip() for s in items if s.strip()))
            elif field.type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{field.name} must be a whole number, got {value!r}")

    def _check_timeouts(self) -> None:
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms",
                     "auto_commit_interval_ms", "max_poll_records", "request_timeout_ms",
                     "reconnect_backoff_max_ms", "metadata_max_age_ms", "bootstrap_timeout_ms"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be at least 1")
        for name in ("rebalance_timeout_ms", "fetch_max_wait_ms", "retry_backoff_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must not be negative")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(f"heartbeat_interval_ms={self.heartbeat_interval_ms} must be lower than "
                              f"session_timeout_ms={self.session_timeout_ms} (a third of it is usual)")
        if not self.fetch_max_wait_ms < self.request_timeout_ms:
            raise ConfigError(f"request_timeout_ms={self.request_timeout_ms} must be larger than "
                              f"fetch_max_wait_ms={self.fetch_max_wait_ms}")

    def _check_strategies(self) -> None:
        if not self.assignment_strategy:
            raise ConfigError("assignment_strategy must name at least one of " + ", ".join(ASSIGNORS))
        unknown = [s for s in self.assignment_strategy if s not in ASSIGNORS]
        if unknown:
            raise ConfigError(f"assignment_strategy {', '.join(unknown)} unknown; known: {', '.join(ASSIGNORS)}")
        cooperative = {s in COOPERATIVE for s in self.assignment_strategy}
        if len(cooperative) > 1:
            raise ConfigError("assignment_strategy cannot mix cooperative-sticky with eager strategies "
                              f"({', '.join(self.assignment_strategy)}): members must agree on one "
                              "rebalance protocol; list cooperative-sticky alone")

    def _check_protocol(self) -> None:
        protocol = self.group_protocol.strip().lower()
        if protocol not in GROUP_PROTOCOLS:
            raise ConfigError(f"group_protocol={self.group_protocol!r} must be classic or consumer (Kafka's "
                              "group.protocol)")
        object.__setattr__(self, "group_protocol", protocol)
        object.__setattr__(self, "group_remote_assignor", self.group_remote_assignor.strip())
        if protocol == "classic":
            if self.group_remote_assignor:
                raise ConfigError(f"group_remote_assignor={self.group_remote_assignor!r} cannot be set when "
                                  "group_protocol=classic: it names the coordinator's assignor of the consumer "
                                  "protocol (classic members use assignment_strategy)")
            return
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        changed = [name for name in COORDINATOR_DECIDES if getattr(self, name) != defaults[name]]
        if changed:
            raise ConfigError(f"{', '.join(changed)} cannot be set when group_protocol=consumer (as in Kafka): "
                              "the coordinator decides " + "; ".join(f"{n}: {COORDINATOR_DECIDES[n]}" for n in changed))

    @property
    def consumer_protocol(self) -> bool:
        return self.group_protocol == "consumer"

    @property
    def daemon_addresses(self) -> tuple[tuple[str, int], ...]:
        """The zkcoord daemons as ``((host, port), ...)``."""
        return tuple(parse_host_port(a.strip(), "coordinators") for a in self.coordinators.split(",") if a.strip())

    @property
    def daemon_security(self) -> KafkaClientSecurity | None:
        """The login to the zkcoord daemons: ``coordinator_security``, else ``security``."""
        return self.coordinator_security if self.coordinator_security is not None else self.security

    @property
    def effective_rebalance_timeout_ms(self) -> int:
        return self.rebalance_timeout_ms or self.max_poll_interval_ms

    def kafka_options(self) -> dict:
        """Keyword arguments for kafka-python's ``KafkaConsumer`` (without
        ``kafka_client``, which :mod:`zkcoord.client.consumer` adds); the
        login's secrets in clear text: do not log them."""
        security = dict(self.security.kafka_python_options()) if self.security is not None else {}
        return {
            **security,
            "bootstrap_servers": [a.strip() for a in self.bootstrap_servers.split(",") if a.strip()],
            "group_id": self.group_id,
            "client_id": self.client_id,
            "group_instance_id": self.group_instance_id or None,
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "max_poll_interval_ms": self.max_poll_interval_ms,
            "partition_assignment_strategy": tuple(ASSIGNORS[s] for s in self.assignment_strategy),
            "enable_auto_commit": self.enable_auto_commit,
            "auto_commit_interval_ms": self.auto_commit_interval_ms,
            "auto_offset_reset": self.auto_offset_reset,
            "max_poll_records": self.max_poll_records,
            "fetch_max_wait_ms": self.fetch_max_wait_ms,
            "request_timeout_ms": self.request_timeout_ms,
            "retry_backoff_ms": self.retry_backoff_ms,
            "reconnect_backoff_max_ms": self.reconnect_backoff_max_ms,
            "metadata_max_age_ms": self.metadata_max_age_ms,
            "bootstrap_timeout_ms": self.bootstrap_timeout_ms,
        }
