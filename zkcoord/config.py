"""Typed configuration of the daemon, and how flags, ``ZKCOORD_...``
environment variables and a config file map onto it.

Every setting is a field of a frozen dataclass, validated on construction,
with its unit in its name. One field has three spellings:

* flag ``--session-timeout-ms`` (click),
* environment variable ``ZKCOORD_SESSION_TIMEOUT_MS``,
* config-file key ``session_timeout_ms`` (TOML; ``session-timeout-ms`` too).

Precedence: flag, then environment, then file, then the default. A value of
the wrong type, an unknown file key or an out-of-range number is a
:class:`~zkcoord.errors.ConfigError` naming the setting and where it came
from.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from zkcoord.core import limits, notice
from zkcoord.core.workers import MAX_WORKERS, highest_port, worker_count
from zkcoord.errors import ConfigError
from zkcoord.password import Password

ENV_PREFIX = "ZKCOORD_"
# The daemon's kafka_client_config as a variable; the commands' --command-config reads it too (and the
# demo's clients), so one export serves the daemons and the commands.
KAFKA_CLIENT_CONFIG_ENV = ENV_PREFIX + "KAFKA_CLIENT_CONFIG"
# Old setting names still accepted (flag, environment variable, file key) -> their current name.
ALIASES = {"max_frame_bytes": "socket_request_max_bytes"}


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")  # what zkcoord's listeners check
ACL_AUTHORIZERS = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")
CLIENT_AUTH = ("none", "requested", "required")


def parse_listener(value: str, setting: str) -> tuple[str, str, int]:
    """``[PROTOCOL://]HOST:PORT`` (Kafka's ``listeners`` form) -> (protocol, host, port);
    no protocol means PLAINTEXT."""
    protocol, sep, address = value.partition("://")
    if not sep:
        protocol, address = "PLAINTEXT", value
    protocol = protocol.upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"{setting}={value!r}: unknown security protocol {protocol!r}; expected one of "
                          f"{', '.join(SECURITY_PROTOCOLS)} (PROTOCOL://HOST:PORT)")
    host, port = parse_host_port(address, setting)
    return protocol, host, port


def parse_host_port(value: str, setting: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port), or ConfigError."""
    host, sep, port_text = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"{setting}={value!r} is not HOST:PORT with a port from 0 to 65535")
    return host, int(port_text)


REBALANCE_PROTOCOLS = ("classic", "consumer")  # group_coordinator_rebalance_protocols

@dataclass(frozen=True)
class DaemonConfig:
    """Settings of one ``zkcoord run`` daemon."""

    zookeeper: str = ""
    listen: str = "127.0.0.1:9300"
    advertised: str = ""
    node_id: int = -1  # -1: allocate the next free id in ZooKeeper
    bootstrap_servers: str = ""
    zk_session_timeout_ms: int = 10_000
    zk_connect_timeout_ms: int = 15_000
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2**31 - 1
    offsets_zk_root: str = "/consumers"
    # KIP-848 (Kafka's names and defaults): the group protocols served (classic always), and the settings
    # of consumer groups (zkcoord.core.consumer.config).
    group_coordinator_rebalance_protocols: str = "classic,consumer"
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_max_size: int = 2**31 - 1
    group_consumer_assignors: str = "uniform,range"
    group_consumer_migration_policy: str = "bidirectional"
    group_consumer_regex_refresh_interval_ms: int = 600_000
    group_consumer_assignment_interval_ms: int = 1_000
    group_consumer_assignor_offload_enable: bool = True
    group_consumer_assignor_offload_min_size: int = 2_000
    # Request limits (zkcoord.core.limits): Kafka's names and defaults where Kafka has one.
    socket_request_max_bytes: int = limits.DEFAULT_SOCKET_REQUEST_MAX_BYTES  # any frame; once max_frame_bytes
    group_request_max_bytes: int = limits.DEFAULT_GROUP_REQUEST_MAX_BYTES  # OffsetCommit/Fetch, Join/SyncGroup
    group_admin_request_max_bytes: int = limits.DEFAULT_GROUP_ADMIN_REQUEST_MAX_BYTES  # every other API
    offset_metadata_max_bytes: int = limits.DEFAULT_OFFSET_METADATA_MAX_BYTES
    connections_max_idle_ms: int = limits.DEFAULT_CONNECTIONS_MAX_IDLE_MS  # daemon and gateway connections
    partial_requests_max_bytes: int = limits.DEFAULT_PARTIAL_REQUESTS_MAX_BYTES  # unanswered frames, per listener
    # Connections the kernel queues for the listener until the daemon accepts them (a reconnect storm after a
    # fail-over brings thousands at once); 0: the operating system's maximum (net.core.somaxconn).
    listen_backlog: int = 0
    # The sockets of the listener's port and of each gateway port (SO_REUSEPORT, Linux): each queues listen_backlog
    # connections, so a storm of this many times the backlog is held for the loop to accept (zkcoord.wire.listening).
    listen_sockets: int = 4
    max_state_bytes: int = 1_000_000  # the largest znode of a group's state (its JSON, or each packed part)
    max_group_state_bytes: int = 8_000_000  # a packed state, all its znodes together (zkcoord.core.packed_record)
    shutdown_timeout_ms: int = 5_000
    # How often a daemon probes the next one's listener; a port that refuses connections proves that daemon
    # dead, and its ZooKeeper session is ended at once rather than at its expiry (zkcoord.core.peer_probe).
    # 0: no probes (only ZooKeeper's expiry ends a dead daemon's session).
    peer_probe_interval_ms: int = 250
    # Worker processes of one `zkcoord run`, each its own node (zkcoord.core.workers); 0: one per core.
    workers: int = 0
    topic_metadata_refresh_ms: int = 5_000  # Kafka Metadata polling, when ZooKeeper has no topics for us
    metrics_listen: str = ""  # HOST:PORT of the Prometheus /metrics and /health endpoint; "": none
    # A dynamic member's session ends this long after its last connection closes; -1: off (Kafka: a
    # closed connection means nothing, only the session timeout removes a member).
    member_disconnect_grace_ms: int = -1
    # zkcoord's own clients keep a heartbeat in flight that is answered as soon as their group starts
    # rebalancing (zkcoord.core.notice); this is the longest such a heartbeat is held. 0: never held.
    rebalance_notice_hold_ms: int = notice.DEFAULT_HOLD_MS
    # Kafka's name and default: how often the owner removes its groups that are Empty with no committed
    # offsets (their state and election znodes), as Kafka's offsets cleanup removes such groups.
    offsets_retention_check_interval_ms: int = 600_000
    # The gateway (zkcoord.gateway): stock Kafka clients bootstrap from it. "": no gateway.
    gateway_listen: str = ""  # HOST:PORT of the gateway's own port; broker ports follow it
    gateway_advertised: str = ""  # HOST or HOST:PORT clients are told; default: the listen host and port
    gateway_broker_ids: str = "0-31"  # broker b is served on gateway port + 1 + (b - LOW)
    # "on": offer Fetch v16+ / Produce v10+, whose answers may carry KIP-951 leader hints (node endpoints),
    # decoded and rewritten; "off": those versions are not offered, and every Fetch/Produce answer streams.
    gateway_leader_hints: str = "off"
    # Security (docs/security.md), with Kafka's names. A listener's protocol is the PROTOCOL:// of `listen`
    # and `gateway_listen`; both listeners share the TLS and SASL settings.
    ssl_keystore_type: str = ""  # PEM or PKCS12; "": from the file
    ssl_keystore_location: str = ""
    ssl_keystore_password: Password | None = None
    ssl_key_password: Password | None = None
    ssl_truststore_type: str = ""
    ssl_truststore_location: str = ""  # CAs client certificates are checked against
    ssl_truststore_password: Password | None = None
    ssl_client_auth: str = "none"  # none, requested, required
    ssl_enabled_protocols: str = "TLSv1.2,TLSv1.3"
    ssl_cipher_suites: str = ""  # "": the TLS library's defaults
    ssl_principal_mapping_rules: str = "DEFAULT"  # a client certificate's DN -> principal name
    sasl_enabled_mechanisms: str = "SCRAM-SHA-256,SCRAM-SHA-512"
    sasl_plain_users_file: str = ""  # PLAIN: a JAAS file with user_<name>="<password>", or name=password lines
    authorizer_class_name: str = ""  # kafka.security.authorizer.AclAuthorizer: Kafka's ACLs in ZooKeeper
    super_users: str = ""  # User:admin;User:ops
    allow_everyone_if_no_acl_found: bool = False
    # Java client properties (security.protocol, sasl.*, ssl.*) for every connection the daemon opens to
    # the brokers: offsets and metadata, the gateway's own requests and its broker connections.
    kafka_client_config: str = ""
    # The ZooKeeper login (zkcoord.zk.auth): a JAAS file's Client section (SASL), and/or digest USER:PASSWORD;
    # zookeeper_set_acl: what zkcoord creates only its own identity may write (Kafka's zookeeper.set.acl).
    zookeeper_sasl_jaas_file: str = ""
    zookeeper_sasl_client_section: str = "Client"
    zookeeper_digest: Password | None = None
    zookeeper_set_acl: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.zookeeper_digest, str):  # a flag's text: a secret from now on
            object.__setattr__(self, "zookeeper_digest", Password(self.zookeeper_digest))
        if not self.zookeeper:
            raise ConfigError("--zookeeper (ZKCOORD_ZOOKEEPER) is required: HOST:PORT[,HOST:PORT...][/chroot]")
        for host_port in self.zookeeper.split("/", 1)[0].split(","):
            parse_host_port(host_port, "zookeeper")
        parse_listener(self.listen, "listen")
        if self.advertised:
            parse_host_port(self.advertised.partition("://")[2] or self.advertised, "advertised")
        if self.metrics_listen:
            parse_host_port(self.metrics_listen, "metrics_listen")
        self._check_gateway()
        self._check_security()
        _check_range("node_id", self.node_id, -1, 2**31 - 1)
        _check_range("workers", self.workers, 0, MAX_WORKERS)
        _check_range("zk_session_timeout_ms", self.zk_session_timeout_ms, 1_000, 600_000)
        _check_range("group_min_session_timeout_ms", self.group_min_session_timeout_ms, 1, 2**31 - 1)
        _check_range("group_max_session_timeout_ms", self.group_max_session_timeout_ms,
                     self.group_min_session_timeout_ms, 2**31 - 1)
        _check_range("group_initial_rebalance_delay_ms", self.group_initial_rebalance_delay_ms, 0, 2**31 - 1)
        _check_range("member_disconnect_grace_ms", self.member_disconnect_grace_ms, -1, 2**31 - 1)
        _check_range("rebalance_notice_hold_ms", self.rebalance_notice_hold_ms, 0, 600_000)
        _check_range("offsets_retention_check_interval_ms", self.offsets_retention_check_interval_ms, 1, 2**31 - 1)
        _check_range("topic_metadata_refresh_ms", self.topic_metadata_refresh_ms, 100, 3_600_000)
        _check_range("socket_request_max_bytes", self.socket_request_max_bytes, 1024, 2**31 - 1)
        _check_range("group_request_max_bytes", self.group_request_max_bytes, 1024, 2**31 - 1)
        _check_range("group_admin_request_max_bytes", self.group_admin_request_max_bytes, 1024, 2**31 - 1)
        _check_range("offset_metadata_max_bytes", self.offset_metadata_max_bytes, 0,
                     limits.MAX_OFFSET_METADATA_MAX_BYTES)
        _check_range("connections_max_idle_ms", self.connections_max_idle_ms, 100, 2**31 - 1)
        _check_range("partial_requests_max_bytes", self.partial_requests_max_bytes, 1024, 2**40)
        _check_range("listen_backlog", self.listen_backlog, 0, 65535)
        _check_range("listen_sockets", self.listen_sockets, 1, 64)
        _check_range("peer_probe_interval_ms", self.peer_probe_interval_ms, 0, 60_000)
        _check_range("max_state_bytes", self.max_state_bytes, 1024, 1_048_576 - 1024)
        _check_range("max_group_state_bytes", self.max_group_state_bytes, 1024, 2**31 - 1)
        self.rebalance_protocols  # noqa: B018 (checks group_coordinator_rebalance_protocols)
        self.consumer_group_config  # noqa: B018 (checks the group_consumer_* settings)
        if not self.offsets_zk_root.startswith("/") or self.offsets_zk_root.endswith("/"):
            raise ConfigError(f"offsets_zk_root={self.offsets_zk_root!r} must start with '/' and not end with one")
        self.zookeeper_security  # noqa: B018 (building it checks the ZooKeeper login settings)

    @property
    def rebalance_protocols(self) -> frozenset[str]:
        """The group protocols served: ``classic``, and ``consumer`` (KIP-848) unless left out."""
        names = [p.strip().lower() for p in self.group_coordinator_rebalance_protocols.split(",") if p.strip()]
        unknown = [p for p in names if p not in REBALANCE_PROTOCOLS]
        if unknown or "classic" not in names:
            raise ConfigError(f"group_coordinator_rebalance_protocols={self.group_coordinator_rebalance_protocols!r}:"
                              f" name classic and optionally consumer (comma-separated)"
                              + (f"; {', '.join(unknown)} unknown" if unknown else "; classic is required"))
        return frozenset(names)

    @property
    def consumer_group_config(self):
        """The group_consumer_* settings as the core takes them (ConfigError if one is out of range)."""
        from zkcoord.core.consumer.config import ConsumerGroupConfig

        for name in ("group_consumer_session_timeout_ms", "group_consumer_heartbeat_interval_ms",
                     "group_consumer_regex_refresh_interval_ms", "group_consumer_max_size"):
            _check_range(name, getattr(self, name), 1, 2**31 - 1)
        _check_range("group_consumer_assignment_interval_ms", self.group_consumer_assignment_interval_ms,
                     0, 2**31 - 1)
        _check_range("group_consumer_assignor_offload_min_size", self.group_consumer_assignor_offload_min_size,
                     0, 2**31 - 1)
        return ConsumerGroupConfig(
            session_timeout_ms=self.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=self.group_consumer_heartbeat_interval_ms,
            max_size=self.group_consumer_max_size,
            assignors=tuple(a.strip() for a in self.group_consumer_assignors.split(",") if a.strip()),
            migration_policy=self.group_consumer_migration_policy.strip().lower(),
            regex_refresh_interval_ms=self.group_consumer_regex_refresh_interval_ms,
            assignment_interval_ms=self.group_consumer_assignment_interval_ms,
            assignor_offload=self.group_consumer_assignor_offload_enable,
            offload_min_size=self.group_consumer_assignor_offload_min_size)

    def _check_gateway(self) -> None:
        from zkcoord.core.gateway import parse_broker_ids

        try:
            low, high = parse_broker_ids(self.gateway_broker_ids)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.gateway_leader_hints not in ("on", "off"):
            raise ConfigError(f"gateway_leader_hints={self.gateway_leader_hints!r} must be on or off")
        if not self.gateway_listen:
            return
        _, _, port = parse_listener(self.gateway_listen, "gateway_listen")
        if not self.bootstrap_servers:
            raise ConfigError("gateway_listen needs bootstrap_servers (--bootstrap-servers): the Kafka brokers "
                              "the gateway forwards to")
        if port and port + 1 + high - low > 65535:
            raise ConfigError(f"gateway_listen port {port} leaves no room for the ports of brokers {low}-{high} "
                              f"(up to {port + 1 + high - low}); choose a lower port or narrow gateway_broker_ids")
        if self.gateway_advertised:
            text = self.gateway_advertised
            if ":" in text.strip("[]") and text.rpartition(":")[2].isdigit():
                parse_host_port(text, "gateway_advertised")
            elif not text.strip("[]"):
                raise ConfigError(f"gateway_advertised={text!r} is not HOST or HOST:PORT")

    def _check_security(self) -> None:
        protocols = {self.listener_protocol} | ({self.gateway_protocol} if self.gateway_listen else set())
        if self.ssl_client_auth not in CLIENT_AUTH:
            raise ConfigError(f"ssl_client_auth={self.ssl_client_auth!r} must be one of {', '.join(CLIENT_AUTH)}")
        if any(p.endswith("SSL") for p in protocols) and not self.ssl_keystore_location:
            raise ConfigError("a listener speaks TLS (SSL or SASL_SSL in listen/gateway_listen) but "
                              "ssl_keystore_location (--ssl-keystore-location) is not set: the server certificate "
                              "and key")
        mechanisms = self.sasl_mechanisms
        unknown = [m for m in mechanisms if m not in SASL_MECHANISMS]
        if unknown:
            raise ConfigError(f"sasl_enabled_mechanisms={self.sasl_enabled_mechanisms!r}: zkcoord's listeners check "
                              f"{', '.join(SASL_MECHANISMS)}, not {', '.join(unknown)}")
        if any(p.startswith("SASL") for p in protocols):
            if not mechanisms:
                raise ConfigError("a listener speaks SASL but sasl_enabled_mechanisms is empty")
            if "PLAIN" in mechanisms and not self.sasl_plain_users_file:
                raise ConfigError("sasl_enabled_mechanisms has PLAIN but sasl_plain_users_file "
                                  "(--sasl-plain-users-file) is not set: the users PLAIN logins are checked against")
        if self.authorizer_class_name and self.authorizer_class_name not in ACL_AUTHORIZERS:
            raise ConfigError(f"authorizer_class_name={self.authorizer_class_name!r}: zkcoord enforces Kafka's "
                              f"ZooKeeper ACLs, {ACL_AUTHORIZERS[0]}, or nothing ('')")
        for principal in self.super_user_principals:
            if ":" not in principal.strip(":"):
                raise ConfigError(f"super_users={self.super_users!r}: {principal!r} is not TYPE:NAME "
                                  "(User:admin;User:ops)")

    @property
    def listener_protocol(self) -> str:
        return parse_listener(self.listen, "listen")[0]

    @property
    def gateway_protocol(self) -> str:
        return parse_listener(self.gateway_listen, "gateway_listen")[0] if self.gateway_listen else "PLAINTEXT"

    @property
    def sasl_mechanisms(self) -> tuple[str, ...]:
        return tuple(m.strip().upper() for m in self.sasl_enabled_mechanisms.split(",") if m.strip())

    @property
    def super_user_principals(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.super_users.split(";") if p.strip())

    @property
    def zookeeper_security(self):
        """The ZooKeeper login and ACLs (:class:`zkcoord.zk.auth.ZkSecurity`), None for neither."""
        from zkcoord.zk.auth import zk_security

        return zk_security(self.zookeeper_sasl_jaas_file, self.zookeeper_sasl_client_section,
                           self.zookeeper_digest, self.zookeeper_set_acl)

    @property
    def request_limits(self) -> limits.RequestLimits:
        """The largest request frame read, per API (:mod:`zkcoord.core.limits`)."""
        return limits.RequestLimits(self.socket_request_max_bytes, self.group_request_max_bytes,
                                    self.group_admin_request_max_bytes)

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_listener(self.listen, "listen")[1:]

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        return parse_host_port(self.metrics_listen, "metrics_listen") if self.metrics_listen else None

    @property
    def worker_count(self) -> int:
        """How many worker processes ``zkcoord run`` starts (``workers``, 0: one per core)."""
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # not Linux
            cpus = os.cpu_count() or 1
        return worker_count(self.workers, cpus)

    def check_worker_ports(self, count: int) -> None:
        """ConfigError when ``count`` workers' own ports would pass 65535
        (worker k's: the listen port + k, the metrics port + k, the gateway's after its broker ports)."""
        if count <= 1:
            return
        checks = [("listen", self.listen_address[1], 0)]
        if self.metrics_address is not None:
            checks.append(("metrics_listen", self.metrics_address[1], 0))
        if self.gateway_listen:
            from zkcoord.core.gateway import parse_broker_ids

            low, high = parse_broker_ids(self.gateway_broker_ids)
            checks.append(("gateway_listen", parse_listener(self.gateway_listen, "gateway_listen")[2], high - low + 1))
        for name, port, span in checks:
            if highest_port(port, count, span) > 65535:
                raise ConfigError(f"{name} port {port} leaves no room for the own ports of {count} workers (up to "
                                  f"{highest_port(port, count, span)}); choose a lower port or fewer --workers")

    def advertised_address(self, bound_port: int, worker=None) -> tuple[str, int]:
        """What FindCoordinator tells clients: --advertised, else the
        listen host (0.0.0.0 becomes this host's name) and bound port. Worker
        k of several (a :class:`~zkcoord.core.workers.WorkerPlan`) advertises
        its own port: the advertised port + k (the bound port when the listen
        port is 0)."""
        if self.advertised:
            host, port = parse_host_port(self.advertised.partition("://")[2] or self.advertised, "advertised")
            if worker is None:
                return host, port
            return host, worker.own_port(port) if self.listen_address[1] else bound_port
        import socket

        host, _ = self.listen_address
        if host in ("0.0.0.0", "::", ""):
            host = socket.getfqdn()
        return host, bound_port


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ConfigError(f"{name}={value} is out of range: {low} to {high}")


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _coerce(name: str, kind: Any, raw: Any, source: str) -> Any:
    if kind in (bool, "bool"):
        if isinstance(raw, bool):
            return raw
        text = raw.strip().lower() if isinstance(raw, str) else None
        if text not in _TRUE + _FALSE:
            raise ConfigError(f"{name} from {source} must be true or false, got {raw!r}")
        return text in _TRUE
    if kind in (Password, "Password", "Password | None"):
        if isinstance(raw, Password):
            return raw
        if not isinstance(raw, str):  # the value is a secret: named by its type only
            raise ConfigError(f"{name} from {source} must be a string, got a {type(raw).__name__}")
        return Password(raw) if raw else None
    if kind in (int, "int"):
        if isinstance(raw, bool):
            raise ConfigError(f"{name} from {source} must be a whole number, got {raw!r}")
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} from {source} must be a whole number, got {raw!r}") from None
    if not isinstance(raw, str):
        raise ConfigError(f"{name} from {source} must be a string, got {raw!r}")
    return raw


def read_config_file(path: Path, cls=DaemonConfig) -> dict[str, Any]:
    """The TOML file's keys (``a-b`` or ``a_b``), checked against ``cls``."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    known = {f.name: f for f in fields(cls)}
    values = {}
    for key, value in _flatten(raw).items():
        name = key.replace("-", "_").replace(".", "_")
        name = ALIASES.get(name, name) if cls is DaemonConfig else name
        if name not in known:
            raise ConfigError(f"config file {path}: unknown key {key!r}; known keys: {', '.join(sorted(known))}")
        values[name] = _coerce(name, known[name].type, value, f"config file {path}")
    return values


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML's dotted keys are nested tables: ``ssl.keystore.location = ...`` is
    read as the key ``ssl.keystore.location`` (Kafka's spelling of ``ssl_keystore_location``)."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def build_config(flags: dict[str, Any], config_file: Path | None = None, cls=DaemonConfig,
                 environ: dict[str, str] | None = None):
    """Merge defaults < file < environment < flags into ``cls``."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    if config_file is None and environ.get(f"{ENV_PREFIX}CONFIG"):
        config_file = Path(environ[f"{ENV_PREFIX}CONFIG"])
    if config_file is not None:
        values.update(read_config_file(config_file, cls))
    known = {field.name: field for field in fields(cls)}
    aliases = {old: new for old, new in ALIASES.items() if new in known}
    for old, new in aliases.items():
        env_name = ENV_PREFIX + old.upper()
        if env_name in environ:
            values[new] = _coerce(new, known[new].type, environ[env_name], f"${env_name}")
    for field in known.values():
        env_name = ENV_PREFIX + field.name.upper()
        if env_name in environ:
            values[field.name] = _coerce(field.name, field.type, environ[env_name], f"${env_name}")
    for name, value in flags.items():
        if value is not None:
            name = aliases.get(name, name)
            kind = known[name].type if name in known else None
            if kind in ("bool", "Password | None"):
                value = _coerce(name, kind, value, "--" + name.replace("_", "-"))
            values[name] = value
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(str(exc)) from None


def describe_settings(cls=DaemonConfig) -> list[tuple[str, str, str, str]]:
    """(flag, environment variable, file key, default) of every setting, for docs."""
    rows = []
    for field in fields(cls):
        default = field.default if field.default is not dataclasses.MISSING else ""
        rows.append((f"--{field.name.replace('_', '-')}", ENV_PREFIX + field.name.upper(), field.name, repr(default)))
    return rows
