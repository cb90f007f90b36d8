"""A minimal Kafka-protocol client for tests: kafka-python's own client-side
framing (``KafkaProtocol``) over an asyncio connection, one request at a
time, so tests can send any API at any version to a daemon or a broker."""

from __future__ import annotations

import asyncio

from kafka.protocol.parser import KafkaProtocol

TIMEOUT_S = 30.0


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

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)
