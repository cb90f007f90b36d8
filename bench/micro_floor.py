"""Micro-benchmark: what a bare event-loop server costs per request on this
machine, with nothing of zkcoord in it (issue 27: how much of a daemon's CPU per
request is the event loop and the socket calls, and how much its own work).

The server is one process on uvloop's event loop (as ``zkcoord run``'s), its
protocol a length-prefixed frame in and a constant 28-byte frame out per
request, as small as a Heartbeat's answer; ``--work-us`` adds that much CPU per
request (a busy loop on the thread's clock), to see the loop's cost at the
rates a daemon reaches (a daemon at 25,000 heartbeats/s or 9,000 commits/s
wakes up for fewer requests at a time than a bare server at 100,000/s). The
clients: ``--processes`` processes of ``--connections`` connections each, on
uvloop, every connection with one 64-byte request in flight, as
``bench_coordinator.py``'s closed-loop load. Each process's CPU comes from
``/proc/<pid>/stat`` over ``--seconds`` after one second of warm-up. Linux
only; run by hand::

    .venv/bin/python bench/micro_floor.py                      # --work-us 0, 30, 80
    .venv/bin/python bench/micro_floor.py --work-us 0 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import struct
import sys
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_env import process_cpu_s  # noqa: E402

REQUEST = struct.pack("!i", 60) + bytes(60)
ANSWER = struct.pack("!i", 24) + bytes(24)


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class _Server(asyncio.Protocol):
    work_s = 0.0

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.inbox = bytearray()

    def data_received(self, data: bytes) -> None:
        inbox = self.inbox
        inbox += data
        pos, out = 0, []
        while len(inbox) - pos >= 4:
            size = int.from_bytes(inbox[pos:pos + 4], "big")
            if len(inbox) - pos - 4 < size:
                break
            _frame = bytes(inbox[pos + 4:pos + 4 + size])  # as the daemon copies each frame out
            pos += 4 + size
            if self.work_s:
                _spin(self.work_s)
            out.append(ANSWER)
        if pos:
            del inbox[:pos]
        if out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))


def _serve(port: int, work_s: float, ready) -> None:
    _Server.work_s = work_s
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(loop.create_server(_Server, "127.0.0.1", port, backlog=4096))
    ready.set()
    loop.run_forever()


class _Client(asyncio.Protocol):
    answered = 0

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.inbox = bytearray()
        transport.write(REQUEST)

    def data_received(self, data: bytes) -> None:
        inbox = self.inbox
        inbox += data
        while len(inbox) >= len(ANSWER):
            del inbox[:len(ANSWER)]
            _Client.answered += 1
            self.transport.write(REQUEST)


def _load(port: int, connections: int, seconds: float, results) -> None:
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)

    async def run() -> None:
        for _ in range(connections):
            await loop.create_connection(_Client, "127.0.0.1", port)
        await asyncio.sleep(1.0)
        first = _Client.answered
        await asyncio.sleep(seconds)
        results.put(_Client.answered - first)

    loop.run_until_complete(run())


def measure(work_us: float, processes: int, connections: int, seconds: float) -> str:
    ctx = multiprocessing.get_context("fork")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ready, results = ctx.Event(), ctx.Queue()
    server = ctx.Process(target=_serve, args=(port, work_us / 1e6, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(10):
            raise SystemExit("error: the server did not start")
        loads = [ctx.Process(target=_load, args=(port, connections, seconds, results), daemon=True)
                 for _ in range(processes)]
        for load in loads:
            load.start()
        time.sleep(1.0)
        server_a, loads_a = process_cpu_s(server.pid), sum(process_cpu_s(p.pid) for p in loads)
        time.sleep(seconds)
        server_b, loads_b = process_cpu_s(server.pid), sum(process_cpu_s(p.pid) for p in loads)
        answered = sum(results.get(timeout=30) for _ in loads)
        for load in loads:
            load.join(10)
    finally:
        server.terminate()
        server.join(5)
    rate = answered / seconds
    server_us = 1e6 * (server_b - server_a) / seconds / rate
    loads_us = 1e6 * (loads_b - loads_a) / seconds / rate
    return (f"work {work_us:5.0f} us  {rate:9,.0f} requests/s   server {server_us:6.1f} us/request "
            f"({server_us - work_us:5.1f} us besides the work, {(server_b - server_a) / seconds:.2f} cores)   "
            f"clients {loads_us:5.1f} us/request ({(loads_b - loads_a) / seconds:.2f} cores)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-us", type=float, action="append",
                        help="CPU per request besides the loop (repeatable) [default: 0, 30, 80]")
    parser.add_argument("--processes", type=int, default=2, help="client processes [default: 2]")
    parser.add_argument("--connections", type=int, default=50, help="connections per client process [default: 50]")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run [default: 10]")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; {args.processes} x {args.connections} connections, one request in flight each",
          flush=True)
    for work in args.work_us or [0.0, 30.0, 80.0]:
        print(measure(work, args.processes, args.connections, args.seconds), flush=True)


if __name__ == "__main__":
    main()
