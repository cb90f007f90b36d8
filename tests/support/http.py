"""A one-request HTTP GET over asyncio, for the daemon's metrics endpoint."""

from __future__ import annotations

import asyncio


async def http_get(port: int, path: str) -> tuple[int, bytes]:
    """(status code, body) of ``GET path`` on 127.0.0.1:port."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body
