"""Micro-benchmark: the CPU a forwarder spends per MB moved between two
loopback TCP connections, by three means (the gateway's data path, issue 27):

* ``rw``: ``recv`` into a new bytes object, ``sendall`` (what an event loop's
  ``data_received`` and ``write`` do);
* ``rwinto``: ``recv_into`` one reused buffer, ``sendall`` of a memoryview;
* ``splice``: ``splice(2)`` from the socket into a pipe and from the pipe into
  the other socket (zkcoord.gateway.splice), the bytes never in user space.

A sender thread writes ``--mb`` MB as fast as it can, a receiver thread reads
and drops them; the forwarder runs on the main thread, blocking, and its own
user and system CPU (``RUSAGE_THREAD``) is reported per MB. Linux only; run by
hand::

    .venv/bin/python bench/micro_splice.py            # all three, 1024 MB each
    .venv/bin/python bench/micro_splice.py --mb 256 splice
"""

from __future__ import annotations

import argparse
import fcntl
import os
import resource
import socket
import sys
import threading
import time

MB = 1 << 20
F_SETPIPE_SZ = 1031


def _pair() -> tuple[socket.socket, socket.socket]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    return client, server


def run(mode: str, total_mb: int) -> str:
    src_w, src_r = _pair()  # sender -> forwarder
    dst_w, dst_r = _pair()  # forwarder -> receiver
    dst_w.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)  # as the gateway's client connections
    blob = b"x" * MB

    def sender() -> None:
        for _ in range(total_mb):
            src_w.sendall(blob)
        src_w.shutdown(socket.SHUT_WR)

    def receiver() -> None:
        buf = bytearray(MB)
        while dst_r.recv_into(buf):
            pass

    threading.Thread(target=sender, daemon=True).start()
    reading = threading.Thread(target=receiver)
    reading.start()
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_THREAD)
    moved = 0
    if mode == "rw":
        while data := src_r.recv(256_000):  # uvloop's read size
            dst_w.sendall(data)
            moved += len(data)
    elif mode == "rwinto":
        buf = bytearray(MB)
        view = memoryview(buf)
        while n := src_r.recv_into(buf):
            dst_w.sendall(view[:n])
            moved += n
    else:
        read_end, write_end = os.pipe()
        fcntl.fcntl(write_end, F_SETPIPE_SZ, MB)
        while n := os.splice(src_r.fileno(), write_end, MB, flags=os.SPLICE_F_MOVE):
            left = n
            while left:
                left -= os.splice(read_end, dst_w.fileno(), left, flags=os.SPLICE_F_MOVE)
            moved += n
        os.close(read_end)
        os.close(write_end)
    dst_w.shutdown(socket.SHUT_WR)
    after = resource.getrusage(resource.RUSAGE_THREAD)
    reading.join()
    wall = time.perf_counter() - started
    for sock in (src_w, src_r, dst_w, dst_r):
        sock.close()
    mbs = moved / MB
    user, system = (after.ru_utime - before.ru_utime) * 1000 / mbs, (after.ru_stime - before.ru_stime) * 1000 / mbs
    return (f"{mode:<7} {mbs:>6,.0f} MB in {wall:6.2f} s; forwarder CPU per MB: user {user:.3f} ms, "
            f"system {system:.3f} ms, total {user + system:.3f} ms")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modes", nargs="*", help="rw, rwinto, splice [default: all three]")
    parser.add_argument("--mb", type=int, default=1024, help="MB moved per mode [default: 1024]")
    args = parser.parse_args(argv)
    args.modes = args.modes or ["rw", "rwinto", "splice"]
    if set(args.modes) - {"rw", "rwinto", "splice"}:
        parser.error("modes are rw, rwinto and splice")
    if not hasattr(os, "splice") and "splice" in args.modes:
        print("os.splice is Linux only", file=sys.stderr)
        return 2
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for mode in args.modes:
        print(run(mode, args.mb), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
