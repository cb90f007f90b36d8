"""A minimal Kafka-protocol client for tests: kafka-python's own client-side
framing (``KafkaProtocol``) over an asyncio connection, one request at a
time, so tests can send any API at any version to a daemon or a broker.

Group requests go to the group's owner: :func:`coordinator_client` asks
FindCoordinator (key type 0, the group) on a list of addresses (daemons,
gateways or brokers, as a client's bootstrap list) and connects to the owner
it names. A daemon that does not own a group answers NOT_COORDINATOR, with
no members, so a test that picks a daemon by its place in a list tests the
placement hash, not what it claims (tests/unit/test_suite_rules.py refuses
such picks). :func:`open_client` with a ``security`` logs in (TLS, SASL)
first, as :func:`zkcoord.kafka.client_security.open_kafka_connection` does.
"""

from __future__ import annotations

import asyncio
import fcntl
import struct
import termios
import time

import kafka.errors
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.parser import KafkaProtocol

from zkcoord.errors import ServiceUnavailableError
from zkcoord.kafka.client_security import KafkaClientSecurity, open_kafka_connection

TIMEOUT_S = 30.0
E_NONE, E_COORDINATOR_NOT_AVAILABLE, E_NOT_COORDINATOR = 0, 15, 16
# What a lookup answers while an owner is being elected or has just moved: ask again.
LOOKUP_RETRIABLE = frozenset({E_COORDINATOR_NOT_AVAILABLE, E_NOT_COORDINATOR})
LOOKUP_TIMEOUT_S = 30.0
LOOKUP_RETRY_S = 0.2


class WireClient:
    def __init__(self, reader, writer, client_id: str):
        self.reader, self.writer = reader, writer
        self.protocol = KafkaProtocol(client_id=client_id)
        self._received: list = []

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str = "zkcoord-test") -> "WireClient":
        return cls(*await asyncio.open_connection(host, port), client_id)

    async def call(self, request, timeout_s: float = TIMEOUT_S):
        """Send ``request`` and return its decoded response."""
        self.protocol.send_request(request)
        self.writer.write(self.protocol.send_bytes())
        await self.writer.drain()
        while not self._received:
            data = await asyncio.wait_for(self.reader.read(65536), timeout_s)
            if not data:
                raise ConnectionError("connection closed by the server")
            self._received.extend(self.protocol.receive_bytes(data))
        _, response = self._received.pop(0)
        return response

    def unacknowledged_bytes(self) -> int:
        """Bytes written to this connection that the peer's kernel has not
        acknowledged yet (Linux SIOCOUTQ): 0 once everything sent sits in the
        peer's receive buffer, read or not (a stopped process's kernel
        acknowledges too)."""
        fd = self.writer.get_extra_info("socket").fileno()
        return struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, struct.pack("i", 0)))[0]

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def parse_addresses(addresses: str | tuple[str, int]) -> list[tuple[str, int]]:
    """``"h1:p1,h2:p2"`` (a bootstrap list) or one ``(host, port)`` -> [(host, port), ...]."""
    if isinstance(addresses, tuple):
        return [addresses]
    found = [parse_address(a.strip()) for a in addresses.split(",") if a.strip()]
    if not found:
        raise ValueError(f"no address in {addresses!r}; give host:port[,host:port...]")
    return found


async def open_client(host: str, port: int, *, security: KafkaClientSecurity | None = None,
                      client_id: str = "zkcoord-test") -> WireClient:
    """A connection to ``host:port``: PLAINTEXT without ``security``, else
    with its TLS and SASL login done (AuthenticationError if refused)."""
    if security is None:
        return await WireClient.connect(host, port, client_id)
    connection = await open_kafka_connection(host, port, security, client_id=client_id)
    return WireClient(connection.reader, connection.writer, client_id)


async def find_coordinator(addresses: str | tuple[str, int], group: str, *,
                           security: KafkaClientSecurity | None = None, client_id: str = "zkcoord-test",
                           timeout_s: float = LOOKUP_TIMEOUT_S) -> tuple[str, int]:
    """The ``(host, port)`` FindCoordinator names as ``group``'s owner, asked
    of the first of ``addresses`` that accepts a connection (as a client's
    bootstrap list). COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR are asked
    again every 0.2 s for up to ``timeout_s``; any other error fails."""
    deadline = time.monotonic() + timeout_s
    finder, where = await _first_reachable(parse_addresses(addresses), security, client_id)
    try:
        while True:
            found = await finder.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
            if found.error_code == E_NONE:
                return found.host, found.port
            if found.error_code not in LOOKUP_RETRIABLE or time.monotonic() > deadline:
                name = kafka.errors.for_code(found.error_code).__name__
                raise AssertionError(f"FindCoordinator of group {group!r} on {where}: {name} "
                                     f"({found.error_code}: {found.error_message!r})")
            await asyncio.sleep(LOOKUP_RETRY_S)
    finally:
        await finder.close()


async def coordinator_client(addresses: str | tuple[str, int], group: str, *,
                             security: KafkaClientSecurity | None = None,
                             client_id: str = "zkcoord-test") -> WireClient:
    """A connection to ``group``'s owner, found by :func:`find_coordinator`
    on ``addresses`` (any of the daemons, or of the gateways: a gateway's
    answer names the owner's gateway)."""
    host, port = await find_coordinator(addresses, group, security=security, client_id=client_id)
    return await open_client(host, port, security=security, client_id=client_id)


async def _first_reachable(addresses: list[tuple[str, int]], security, client_id: str) -> tuple[WireClient, str]:
    refused = []
    for host, port in addresses:
        try:
            return await open_client(host, port, security=security, client_id=client_id), f"{host}:{port}"
        except (OSError, ServiceUnavailableError) as exc:  # refused or unreachable: the next, as a bootstrap list
            refused.append(f"{host}:{port} ({exc})")
    raise ConnectionError(f"no address accepted a connection: {', '.join(refused)}")
