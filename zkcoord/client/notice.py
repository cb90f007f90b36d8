"""The thin consumer's side of the rebalance notice (:mod:`zkcoord.core.notice`).

In Kafka's classic protocol a member hears that its group is rebalancing
only in the answer to its next heartbeat, up to one ``heartbeat_interval_ms``
later, and the whole group waits for the member whose heartbeat comes last.
A zkcoord daemon can hold a heartbeat until the group starts rebalancing.
:class:`RebalanceNotice` keeps one such heartbeat in flight per member, on a
connection of its own to the group's coordinator, so a member learns of a
rebalance one round trip after it starts; kafka-python's own heartbeats go
on as before on the coordinator connection, and carry the session.

The notice is used only where the daemon advertises it (the supported
feature :data:`~zkcoord.core.notice.FEATURE` in its ApiVersions answer to
the notice connection); a Kafka broker or a daemon with the hold off does
not, and the notice then stays quiet until the coordinator changes.

The thread acts on one answer only: REBALANCE_IN_PROGRESS for the
generation the member is still Stable in makes the member rejoin (as
kafka-python does for the same heartbeat answer, through the coordinator's
``request_rejoin``, which also wakes the application thread). Every other
outcome (a lost connection, NOT_COORDINATOR, ILLEGAL_GENERATION, ...) is
left to kafka-python's own heartbeat, which meets it within one interval;
the thread backs off, then follows the coordinator and generation it then
has. A NONE answer that came at once instead of after a hold (the group is
loading, or between states after a fail-over) is followed by a pause of
``retry_backoff_ms``, so the thread never spins. The member's generation is
read again right before a heartbeat is sent, under the coordinator's lock
(kafka-python marks a rejoin under it before sending the JoinGroup):
opening the connection takes a round trip or two, in which a member that
has just joined may rejoin (a leader whose assignment changed the
metadata), and a heartbeat of the old generation would only earn, and count
on the daemon as, ILLEGAL_GENERATION. Only the two connections' own
ordering is left to chance: a heartbeat written just before the JoinGroup
can still reach the daemon after it.
Encoding and framing are kafka-python's (``KafkaProtocol``).

Security: the notice connection logs in to the daemon as kafka-python's
connections to the daemons do (the same kafka-python settings:
``security_protocol``, ``ssl_context``, ``sasl_*``; the daemons' own when
the consumer has them, :mod:`zkcoord.client.network`): TLS first, then
ApiVersions, SaslHandshake v1 and SaslAuthenticate driven by kafka-python's
mechanism classes. A refused login or an untrusted certificate makes the
notice quiet for that coordinator (logged once), as a daemon without the
feature does: kafka-python's own connection reports the refusal.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time

from kafka.net.sasl import get_sasl_mechanism
from kafka.net.transport import KafkaSSLTransport
from kafka.protocol.consumer.group import HeartbeatRequest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from kafka.structs import MemberState

from zkcoord import __version__
from zkcoord.core import notice
from zkcoord.core.api_keys import SASL_AUTHENTICATE

log = logging.getLogger(__name__)

NONE, REBALANCE_IN_PROGRESS = 0, 27
HEARTBEAT_VERSION = 4  # what the daemon serves and the Java consumer sends
# kafka-python's settings that say how to log in (as zkcoord.client.network.SECURITY_KEYS, ssl_* apart)
_LOGIN_KEYS = ("security_protocol", "ssl_context", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
               "sasl_kerberos_name", "sasl_kerberos_service_name", "sasl_kerberos_domain_name",
               "sasl_oauth_token_provider")


class _LoginRefused(Exception):
    """The daemon refused the notice connection's TLS or SASL login."""


class RebalanceNotice:
    """One member's notice connection, on a daemon thread. ``start()`` once
    the coordinator exists; ``close()`` before the member leaves. ``config``
    is the consumer's (kafka-python's ``KafkaConsumer.config``); ``daemon_options``
    the daemons' own login settings (kafka-python's names), if they differ."""

    def __init__(self, coordinator, config: dict, daemon_options: dict | None = None) -> None:
        self._coordinator = coordinator
        login = daemon_options if daemon_options is not None else config
        self._login = {key: login.get(key) for key in _LOGIN_KEYS}
        self._ssl_config = {key: value for key, value in login.items() if key.startswith("ssl_")}
        self._tls: ssl.SSLContext | None = None  # built at the first connection (it may read files)
        self._client_id = config["client_id"]
        self._backoff_s = max(config["retry_backoff_ms"], 50) / 1000
        self._idle_s = config["heartbeat_interval_ms"] / 1000
        # An answer comes within the daemon's hold (at most half the session) plus a request's time.
        self._read_timeout_s = (config["session_timeout_ms"] / 2 + config["request_timeout_ms"]) / 1000
        self._changed = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._address: tuple[str, int] | None = None
        self._protocol: KafkaProtocol | None = None
        self._unsupported: tuple[str, int] | None = None  # a coordinator without the feature
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"zkcoord-notice-{coordinator.group_id}")
        self.notices = 0  # rebalances this member learned of through the notice

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """The member's generation or coordinator may have changed: look
        again (and leave a connection to a coordinator that is not the
        group's any more, rather than wait for its answer)."""
        target = self._target()
        if target is not None and self._address is not None and target[0] != self._address:
            self._drop_connection()
        self._changed.set()

    def close(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self._changed.set()
        self._drop_connection()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    # -- the thread --------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._step()
        except Exception:  # the notice only speeds rebalances up; never take the consumer down
            log.exception("group %s: the rebalance notice stopped", self._coordinator.group_id)
        finally:
            self._drop_connection()

    def _step(self) -> None:
        target = self._target()
        if target is None or target[0] == self._unsupported:
            self._wait(self._idle_s)
            return
        address, generation_id, member_id = target
        sent = time.monotonic()
        try:
            sock, protocol = self._connect(address)
            if sock is None:  # protocol: why not
                self._unsupported = address
                log.info("group %s: no rebalance notice from coordinator %s:%d (%s); rebalances are heard "
                         "through the member's heartbeats only", self._coordinator.group_id, *address, protocol)
                return
            request = HeartbeatRequest(
                version=HEARTBEAT_VERSION, group_id=self._coordinator.group_id, generation_id=generation_id,
                member_id=member_id, group_instance_id=self._coordinator.group_instance_id)
            # Checked and sent under the lock kafka-python takes to start a rejoin, so no JoinGroup is
            # sent between: a member that rejoined meanwhile would only earn ILLEGAL_GENERATION.
            with self._coordinator._lock:
                if not self._still(generation_id, member_id):
                    return
                self._send(sock, protocol, request)
            answer = self._receive(sock, protocol)
        except Exception as exc:  # noqa: BLE001 - connection trouble of any kind: back off
            if not self._stopping.is_set():
                log.debug("group %s: notice connection to %s:%d: %r", self._coordinator.group_id, *address, exc)
            self._drop_connection()
            self._wait(self._backoff_s)
            return
        if answer.error_code == NONE:
            # The hold ran out: hold again. An answer that came at once was not held (the group is
            # loading or between states): do not spin on such answers.
            if time.monotonic() - sent < self._backoff_s:
                self._wait(self._backoff_s)
            return
        if answer.error_code == REBALANCE_IN_PROGRESS and self._still(generation_id, member_id):
            self.notices += 1
            log.debug("group %s: rebalance notice for generation %d", self._coordinator.group_id, generation_id)
            self._coordinator.request_rejoin()
        # Whatever follows (the rejoin, kafka-python handling an error) changes the generation.
        self._wait_for_change(generation_id, member_id)

    def _target(self) -> tuple[tuple[str, int], int, str] | None:
        """(coordinator address, generation, member id) while Stable, else None."""
        c = self._coordinator
        if c.state is not MemberState.STABLE:
            return None
        generation = c._generation
        node_id = c.coordinator_id
        if node_id is None or generation.generation_id < 0 or not generation.member_id:
            return None
        broker = c._client.cluster.broker_metadata(node_id)
        if broker is None:
            return None
        return (broker.host, broker.port), generation.generation_id, generation.member_id

    def _still(self, generation_id: int, member_id: str) -> bool:
        target = self._target()
        return target is not None and target[1:] == (generation_id, member_id)

    def _wait_for_change(self, generation_id: int, member_id: str) -> None:
        waited = 0.0
        while not self._stopping.is_set() and self._still(generation_id, member_id) and waited < self._idle_s:
            self._wait(self._backoff_s)
            waited += self._backoff_s

    def _wait(self, seconds: float) -> None:
        self._changed.wait(seconds)
        self._changed.clear()

    # -- the connection ------------------------------------------------------------
    def _connect(self, address: tuple[str, int]):
        """The open notice connection to ``address`` (opened, logged in and
        announced if needed): (socket, protocol), or (None, why) if the daemon
        there does not advertise the notice or refuses our login."""
        with self._lock:
            if self._sock is not None and self._address == address:
                return self._sock, self._protocol
        self._drop_connection()
        sock = socket.create_connection(address, timeout=self._read_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock = self._start_tls(sock, address[0])
        except ssl.SSLError as exc:
            sock.close()
            return self._refused(f"TLS: {exc.reason or exc}")
        protocol = KafkaProtocol(client_id=self._client_id)
        with self._lock:
            if self._stopping.is_set():
                sock.close()
                raise OSError("closing")
            self._sock, self._address, self._protocol = sock, address, protocol
        versions = self._call(sock, protocol, ApiVersionsRequest(
            version=3, client_software_name=notice.CLIENT_SOFTWARE_NAME, client_software_version=__version__))
        if self._login["security_protocol"] in ("SASL_PLAINTEXT", "SASL_SSL"):
            try:
                self._sasl_login(sock, protocol, versions, address[0])
            except _LoginRefused as exc:
                return self._refused(str(exc))
        features = {f.name: (f.min_version, f.max_version) for f in (versions.supported_features or [])}
        span = features.get(notice.FEATURE)
        if versions.error_code != NONE or span is None or not span[0] <= notice.FEATURE_VERSION <= span[1]:
            self._drop_connection()
            return None, "it does not hold heartbeats"
        return sock, protocol

    def _start_tls(self, sock: socket.socket, host: str) -> socket.socket:
        if self._login["security_protocol"] not in ("SSL", "SASL_SSL"):
            return sock
        if self._tls is None:  # kafka-python's own context for these settings
            self._tls = KafkaSSLTransport._build_ssl_context({**KafkaSSLTransport.DEFAULT_CONFIG, **self._ssl_config})
        return self._tls.wrap_socket(sock, server_hostname=host)

    def _sasl_login(self, sock: socket.socket, protocol: KafkaProtocol, versions, host: str) -> None:
        """SaslHandshake v1 and SaslAuthenticate, the client side kafka-python's mechanism."""
        name = self._login["sasl_mechanism"]
        shaken = self._call(sock, protocol, SaslHandshakeRequest(version=1, mechanism=name))
        if shaken.error_code != NONE:
            raise _LoginRefused(f"SaslHandshake for {name} answered error {shaken.error_code} (offered: "
                                f"{', '.join(shaken.mechanisms or []) or 'none'})")
        table = {key.api_key: key.max_version for key in versions.api_keys}
        version = min(table.get(SASL_AUTHENTICATE, 0), SaslAuthenticateRequest.max_version)
        mechanism = get_sasl_mechanism(name)(host=host, **self._login)
        while not mechanism.is_done():
            answer = self._call(sock, protocol, SaslAuthenticateRequest(version=version,
                                                                        auth_bytes=mechanism.auth_bytes()))
            if answer.error_code != NONE:
                raise _LoginRefused(f"{name} login of {self._login['sasl_plain_username']!r} refused (error "
                                    f"{answer.error_code}: {answer.error_message})")
            mechanism.receive(bytes(answer.auth_bytes))
        if not mechanism.is_authenticated():
            raise _LoginRefused(f"the {name} exchange ended without success")

    def _refused(self, why: str) -> tuple[None, str]:
        """A login the daemon refused: the notice stays quiet for it (kafka-python reports the refusal)."""
        self._drop_connection()
        return None, f"it refused the notice connection's login: {why}"

    def _call(self, sock: socket.socket, protocol: KafkaProtocol, request):
        self._send(sock, protocol, request)
        return self._receive(sock, protocol)

    @staticmethod
    def _send(sock: socket.socket, protocol: KafkaProtocol, request) -> None:
        protocol.send_request(request)
        sock.sendall(protocol.send_bytes())  # a heartbeat on a connection of its own: the buffer has room

    @staticmethod
    def _receive(sock: socket.socket, protocol: KafkaProtocol):
        while True:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the coordinator closed the notice connection")
            responses = protocol.receive_bytes(data)
            if responses:
                return responses[0][1]

    def _drop_connection(self) -> None:
        with self._lock:
            sock, self._sock, self._address = self._sock, None, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
