"""A Burrow 1.2 configuration that monitors zkcoord's consumer groups.

This module owns turning zkcoord's settings (its ZooKeeper connection
string, the Kafka brokers, the legacy offsets root) into the TOML file
Burrow reads (``burrow.toml`` in its ``-config-dir``). It is pure: no I/O;
:mod:`zkcoord.cli.burrow_cmd` writes the file.

What Burrow 1.2 reads (its source, ``core/internal/consumer/``):

* ``kafka_zk`` consumer module: ``<zookeeper-path>/consumers/<group>/
  offsets/<topic>/<partition>`` (a decimal offset), watched; the time of a
  commit is the znode's mtime. ``zookeeper-path`` is a prefix and Burrow
  always appends ``/consumers``, so zkcoord's ``--zk-root`` must end in
  ``/consumers``; the chroot of zkcoord's connection string goes in front
  (Burrow's server list has no chroot). Nothing else under a group is read,
  so zkcoord's ``offsets-metadata`` beside ``offsets`` is ignored. Groups
  in ``zookeeper`` storage are seen here (and ``dual`` ones too).
* ``kafka`` consumer module: every record of ``__consumer_offsets`` from
  the oldest (offset keys v0/v1 with values v0, v1 or v3, group metadata
  v0/v1): groups in ``dual`` and ``kafka`` storage.
* Both report into one Burrow cluster, so a group in ``dual`` is one group
  fed twice per commit (Kafka first, then ZooKeeper, milliseconds apart);
  the in-memory storage folds reports closer than ``min-distance`` seconds
  into one window slot, hence ``min_distance_s`` >= 1 here.
* Burrow panics at start on what it cannot parse: host names other than
  letters, digits, ``-`` and ``.`` (or IP addresses), znode path components
  other than ``[A-Za-z0-9_-][A-Za-z0-9_.-]*``, Kafka versions it does not
  know. :class:`BurrowSettings` refuses those first, naming the input.
  Its section names are lower-cased (viper), so cluster names must be lower
  case to match the HTTP paths (``/v3/kafka/<cluster>/consumer/<group>``).

The Kafka protocol version is Burrow 1.2's newest, ``2.1.0``; zkcoord's
brokers run in ZooKeeper mode (up to Kafka 3.9), which still serve it.

The Kafka login (:class:`BurrowKafkaLogin`, from Kafka client properties by
:mod:`zkcoord.cli.burrow_cmd`) goes into the client profile as Burrow 1.2.1
reads it (``core/internal/helpers/sarama.go``): ``tls = "<name>"`` with a
``[tls.<name>]`` of ``cafile``, ``certfile``, ``keyfile`` (PEM files; the CA
file is used only when all three are set, else the system's CAs, and the
brokers' host names are always checked), and ``sasl = "<name>"`` with a
``[sasl.<name>]`` of ``username``, ``password`` and ``handshake-first``:
SASL/PLAIN only (no mechanism key before Burrow 1.3.4). The password is
written only when asked for; otherwise Burrow takes it from the environment
(viper's ``AutomaticEnv`` with the ``burrow`` prefix:
``BURROW_SASL_ZKCOORD_PASSWORD``).
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from zkcoord.errors import UsageError
from zkcoord.kafka.offsets import check_bootstrap_servers
from zkcoord.password import Password
from zkcoord.zk.connection import parse_hosts
from zkcoord.zk.paths import DEFAULT_CONSUMERS_ROOT, check_absolute

__all__ = ["BurrowSettings", "BurrowKafkaLogin", "Number", "NUMBERS", "LOG_LEVELS", "KAFKA_VERSION",
           "CLIENT_PROFILE", "PASSWORD_ENV", "sections", "render", "burrow_toml"]

KAFKA_VERSION = "2.1.0"  # the newest protocol version Burrow 1.2.1 knows (helpers/sarama.go)
CLIENT_PROFILE = "zkcoord"  # also the name of its tls and sasl profiles
PASSWORD_ENV = f"BURROW_SASL_{CLIENT_PROFILE.upper()}_PASSWORD"  # viper: burrow_ + sasl.zkcoord.password
LOG_LEVELS = ("debug", "info", "warn", "error", "panic", "fatal")
CONSUMERS = "/consumers"  # what Burrow's kafka_zk module appends to its zookeeper-path
DEFAULT_KAFKA_PORT = 9092

# Burrow's helpers/validation.go: ValidateHostname and ValidateZookeeperPath.
_LABEL = r"([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])"
_HOSTNAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_ZNODE = re.compile(r"^[a-zA-Z0-9_\-][a-zA-Z0-9_\-.]*$")
_CLUSTER = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_IPV4 = re.compile(r"^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$")


class Number(NamedTuple):
    """A whole number Burrow takes (seconds or a count), with its range."""

    field: str
    low: int
    high: int
    meaning: str  # Burrow's key and what it does

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")


NUMBERS = (
    Number("intervals", 2, 1_000, "storage intervals: offsets kept per partition, the evaluation window"),
    Number("min_distance_s", 1, 3_600, "storage min-distance: commits closer than this share a window slot"),
    Number("offset_refresh_s", 1, 3_600, "cluster offset-refresh: how often the brokers' log end offsets are read"),
    Number("topic_refresh_s", 1, 86_400, "cluster topic-refresh: how often the topic list is read"),
    Number("expire_group_s", 60, 31_536_000, "storage expire-group: a group without commits this long is dropped"),
    Number("expire_cache_s", 1, 3_600, "evaluator expire-cache: how long a group's evaluated status is kept"),
)


@dataclass(frozen=True)
class BurrowKafkaLogin:
    """How Burrow logs in to the brokers: TLS (``tls``; with ``cafile`` and
    ``certfile``, a PEM file holding the client certificate chain and its
    unencrypted key, or neither: the system's CAs), SASL/PLAIN
    (``sasl_username``; ``sasl_password`` written only with ``write_password``)."""

    tls: bool = False
    cafile: str = ""
    certfile: str = ""
    sasl_username: str = ""
    sasl_password: Password | None = None
    write_password: bool = False

    def __post_init__(self) -> None:
        if bool(self.cafile) != bool(self.certfile):
            raise UsageError("Burrow 1.2 uses a CA file only together with a client certificate and key (and "
                             "those only with a CA file): give both or neither")
        if self.write_password and self.sasl_password is None:
            raise UsageError("the SASL password is to be written, but there is none")

    def profile_keys(self) -> dict[str, str]:
        """The client profile's ``tls`` / ``sasl`` keys."""
        return {**({"tls": CLIENT_PROFILE} if self.tls else {}),
                **({"sasl": CLIENT_PROFILE} if self.sasl_username else {})}

    def sections(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        if self.tls:
            files = {"cafile": self.cafile, "certfile": self.certfile, "keyfile": self.certfile} if self.cafile \
                else {}
            found[f"tls.{CLIENT_PROFILE}"] = {**files, "noverify": False}
        if self.sasl_username:
            password = {"password": self.sasl_password.value} if self.write_password else {}
            found[f"sasl.{CLIENT_PROFILE}"] = {"username": self.sasl_username, **password, "handshake-first": True}
        return found


@dataclass(frozen=True)
class BurrowSettings:
    """What ``zkcoord burrow-config`` takes; validated on construction
    (UsageError or ConfigError naming the input, exit code 2)."""

    zookeeper: str  # zkcoord's --zookeeper: HOST:PORT[,HOST:PORT...][/chroot]
    bootstrap_servers: str  # the Kafka brokers, HOST[:PORT][,...]
    cluster: str = "local"  # Burrow's name for the cluster: /v3/kafka/<cluster>/...
    zk_root: str = DEFAULT_CONSUMERS_ROOT  # zkcoord's --offsets-zk-root, inside the chroot
    http_listen: str = ":8000"  # [HOST]:PORT of Burrow's HTTP server (no host: every interface)
    intervals: int = 10
    min_distance_s: int = 1
    offset_refresh_s: int = 10
    topic_refresh_s: int = 60
    expire_group_s: int = 604_800
    expire_cache_s: int = 10
    log_level: str = "info"
    log_file: str = ""  # "": Burrow logs to its stdout
    pidfile: str = ""  # "": Burrow's default, burrow.pid in its working directory
    kafka_login: BurrowKafkaLogin | None = None  # None: PLAINTEXT

    def __post_init__(self) -> None:
        for derived in ("zookeeper_servers", "kafka_servers", "zookeeper_path", "burrow_root_path"):
            getattr(self, derived)  # each raises what is wrong with its input
        if not _CLUSTER.match(self.cluster):
            raise UsageError(f"--cluster {self.cluster!r} must be lower-case letters, digits, '-' and '_' "
                             "(Burrow lower-cases section names, so it is also the name in its HTTP paths)")
        host, sep, port = self.http_listen.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535 or (host and not _burrow_host(host.strip("[]"))):
            raise UsageError(f"--http-listen {self.http_listen!r} is not [HOST]:PORT with a port from 0 to 65535 "
                             "(':8000' listens on every interface)")
        for number in NUMBERS:
            value = getattr(self, number.field)
            if isinstance(value, bool) or not isinstance(value, int) or not number.low <= value <= number.high:
                raise UsageError(f"{number.flag} {value!r} must be a whole number from {number.low} to "
                                 f"{number.high} ({number.meaning})")
        if self.log_level not in LOG_LEVELS:
            raise UsageError(f"--log-level {self.log_level!r} must be one of {', '.join(LOG_LEVELS)}")
        for flag, value in (("--log-file", self.log_file), ("--pidfile", self.pidfile)):
            if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
                raise UsageError(f"{flag} {value!r} must not contain control characters")

    @property
    def zookeeper_servers(self) -> list[str]:
        """ZooKeeper's servers as Burrow takes them (``host:port``, ``[v6]:port``)."""
        servers, _ = parse_hosts(self.zookeeper)
        return [_burrow_address(host, port, "--zookeeper", self.zookeeper) for host, port in servers]

    @property
    def kafka_servers(self) -> list[str]:
        """The brokers as Burrow takes them (a bare host gets Kafka's port 9092)."""
        found = []
        for item in check_bootstrap_servers(self.bootstrap_servers).split(","):
            host, sep, port = item.rpartition(":")
            if not sep:  # a host alone: Kafka's port
                host, port = item, str(DEFAULT_KAFKA_PORT)
            found.append(_burrow_address(host.strip("[]"), int(port), "--bootstrap-servers",
                                         self.bootstrap_servers))
        return found

    @property
    def chroot(self) -> str:
        return parse_hosts(self.zookeeper)[1] or ""

    @property
    def zookeeper_path(self) -> str:
        """The kafka_zk module's ``zookeeper-path``: the chroot and the root
        without its ``/consumers``, which Burrow adds (``""`` for ``/consumers``)."""
        check_absolute(self.zk_root, "--zk-root")
        if not self.zk_root.endswith(CONSUMERS):
            raise UsageError(f"--zk-root {self.zk_root!r} cannot be watched by Burrow 1.2: its ZooKeeper module "
                             "reads <path>/consumers/<group>/offsets, so the root must end in /consumers")
        prefix = self.chroot + self.zk_root[:-len(CONSUMERS)]
        _check_burrow_path(prefix + CONSUMERS, f"the offsets root {prefix + CONSUMERS!r} (chroot and --zk-root)")
        return prefix

    @property
    def burrow_root_path(self) -> str:
        """Where Burrow keeps its own znodes: ``<chroot>/burrow``."""
        path = self.chroot + "/burrow"
        _check_burrow_path(path, f"Burrow's own ZooKeeper path {path!r} (the chroot and /burrow)")
        return path


def _burrow_host(host: str) -> bool:
    """Burrow's ValidateHostPort: an IP address, or a host name of letters,
    digits and '-' (all-digit dotted names must be IPv4 addresses)."""
    if ":" in host:
        return _is_ipv6(host)
    if all(part.isdigit() for part in host.split(".")):
        return bool(_IPV4.match(host))
    return bool(_HOSTNAME.match(host))


def _is_ipv6(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
    except ValueError:
        return False


def _burrow_address(host: str, port: int, flag: str, given: str) -> str:
    if not _burrow_host(host):
        raise UsageError(f"{flag} {given!r}: Burrow 1.2 accepts only IP addresses and host names of letters, "
                         f"digits, '-' and '.'; {host!r} is neither")
    if not 0 < port <= 65535:
        raise UsageError(f"{flag} {given!r}: port {port} is not from 1 to 65535")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_burrow_path(path: str, what: str) -> None:
    bad = [part for part in path.split("/")[1:] if not _ZNODE.match(part)]
    if bad:
        raise UsageError(f"{what} cannot be used by Burrow 1.2: it accepts znode names of letters, digits, "
                         f"'_', '-' and '.' (not first) only, not {bad[0]!r}")


def sections(settings: BurrowSettings) -> dict[str, dict[str, Any]]:
    """Burrow's configuration as ``{section: {key: value}}``, in file order.

    >>> s = sections(BurrowSettings("zk-1:2181/kafka", "k1:9092"))
    >>> s["consumer.local-zookeeper"]["zookeeper-path"], s["zookeeper"]["root-path"]
    ('/kafka', '/kafka/burrow')
    """
    cluster, login = settings.cluster, settings.kafka_login
    general = {"pidfile": settings.pidfile} if settings.pidfile else {}
    logging = {"level": settings.log_level, **({"filename": settings.log_file} if settings.log_file else {})}
    return {
        "general": general,
        "logging": logging,
        "zookeeper": {"servers": settings.zookeeper_servers, "root-path": settings.burrow_root_path},
        f"client-profile.{CLIENT_PROFILE}": {"client-id": f"burrow-{cluster}", "kafka-version": KAFKA_VERSION,
                                             **(login.profile_keys() if login else {})},
        **(login.sections() if login else {}),
        f"cluster.{cluster}": {"class-name": "kafka", "servers": settings.kafka_servers,
                               "client-profile": CLIENT_PROFILE, "offset-refresh": settings.offset_refresh_s,
                               "topic-refresh": settings.topic_refresh_s},
        f"consumer.{cluster}-zookeeper": {"class-name": "kafka_zk", "cluster": cluster,
                                          "servers": settings.zookeeper_servers,
                                          "zookeeper-path": settings.zookeeper_path},
        f"consumer.{cluster}-kafka": {"class-name": "kafka", "cluster": cluster, "servers": settings.kafka_servers,
                                      "client-profile": CLIENT_PROFILE, "offsets-topic": "__consumer_offsets",
                                      "start-latest": False},
        "httpserver.default": {"address": settings.http_listen},
        "storage.default": {"class-name": "inmemory", "intervals": settings.intervals,
                            "min-distance": settings.min_distance_s, "expire-group": settings.expire_group_s},
        "evaluator.default": {"class-name": "caching", "expire-cache": settings.expire_cache_s},
    }


HEADER = ("Burrow 1.2 configuration written by `zkcoord burrow-config`: run `Burrow -config-dir DIR` "
          "with this file as DIR/burrow.toml.")
_COMMENTS = {
    "zookeeper": "Burrow's own ZooKeeper (it creates root-path).",
    "consumer.{c}-zookeeper": ("Groups in zookeeper (and dual) offset storage: zkcoord's legacy layout, "
                               "{root}/<group>/offsets/<topic>/<partition>."),
    "consumer.{c}-kafka": "Groups in dual and kafka offset storage: Kafka's __consumer_offsets.",
    "storage.default": ("A dual group is reported by both modules; min-distance folds the two reports of one "
                        "commit into one slot."),
    f"tls.{CLIENT_PROFILE}": ("TLS to the brokers: their certificates are checked against cafile (the system's "
                             "CAs without one) and their host names."),
    f"sasl.{CLIENT_PROFILE}": ("SASL/PLAIN to the brokers. Without a password here, Burrow reads it from the "
                              f"environment variable {PASSWORD_ENV}."),
}


def render(found: dict[str, dict[str, Any]], comments: dict[str, str] | None = None, header: str = "") -> str:
    """TOML text of :func:`sections`' mapping (strings, ints, bools and lists
    of strings are all it holds), each section after its comment if any;
    empty sections are left out."""
    out: list[str] = [f"# {header}", ""] if header else []
    for name, values in found.items():
        if not values:
            continue
        if comments and name in comments:
            out.append(f"# {comments[name]}")
        out.append(f"[{name}]")
        out.extend(f"{key} = {_value(value)}" for key, value in values.items())
        out.append("")
    return "\n".join(out)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # valid TOML: control characters are refused earlier
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def burrow_toml(settings: BurrowSettings) -> str:
    """The whole ``burrow.toml`` for ``settings``."""
    c = settings.cluster
    root = settings.chroot + settings.zk_root
    comments = {name.format(c=c): text.format(root=root) for name, text in _COMMENTS.items()}
    return render(sections(settings), comments, HEADER)
