"""The fault proxy (tests/support/fault_proxy.py) against an echo server on loopback.

What each fault does to the bytes: passed unchanged and in order; delayed
by at least the delay; held while stalled and delivered in order on heal;
connections reset by a cut and refused until heal; drops drawn from the
seed, the same for the same seed. Absence is checked from the proxy's own
counters (read but not passed on), not from waiting.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.support.daemons import wait_for
from tests.support.fault_proxy import DOWN, UP, FaultProxy

WAIT_S = 10.0


@pytest.fixture
def echo():
    """An echo server on 127.0.0.1 (a thread per connection); its address."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                conn.sendall(data)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()
    stop.set()
    server.close()


def connect(proxy: FaultProxy) -> socket.socket:
    sock = socket.create_connection(proxy.address, timeout=WAIT_S)
    sock.settimeout(WAIT_S)
    return sock


def receive(sock: socket.socket, size: int) -> bytes:
    got = b""
    while len(got) < size:
        data = sock.recv(size - len(got))
        if not data:
            break
        got += data
    return got


def test_bytes_pass_unchanged_and_in_order(echo):
    payload = bytes(range(256)) * 4096  # 1 MiB: many chunks
    with FaultProxy(echo) as proxy, connect(proxy) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        assert receive(sock, len(payload)) == payload
        sender.join()
        assert proxy.stats.bytes == {UP: len(payload), DOWN: len(payload)}


def test_a_delay_holds_each_direction_at_least_that_long(echo):
    with FaultProxy(echo) as proxy, connect(proxy) as sock:
        proxy.delay(up_ms=150, down_ms=100)
        started = time.monotonic()
        sock.sendall(b"ping")
        assert receive(sock, 4) == b"ping"
        assert time.monotonic() - started >= 0.25  # a lower bound only: never flaky
        proxy.heal()
        sock.sendall(b"pong")
        assert receive(sock, 4) == b"pong"


def test_a_stall_holds_everything_until_heal_then_delivers_in_order(echo):
    with FaultProxy(echo) as proxy, connect(proxy) as sock:
        proxy.stall(up=True, down=False)
        for i in range(5):
            sock.sendall(b"%d;" % i)
        wait_for(lambda: proxy.stats.read[UP] == 10, WAIT_S, "the proxy read what was sent")
        assert proxy.stats.bytes[UP] == 0  # read, held
        late = connect(proxy)  # a new connection stalls too
        late.sendall(b"x")
        wait_for(lambda: proxy.stats.read[UP] == 11, WAIT_S, "the proxy read the new connection's byte")
        assert proxy.stats.bytes[UP] == 0
        proxy.heal()
        assert receive(sock, 10) == b"0;1;2;3;4;"
        assert receive(late, 1) == b"x"
        late.close()


def _broken(proxy: FaultProxy, sock: socket.socket | None = None) -> bool:
    """Whether a round trip (on ``sock``, else a new connection) finds the
    connection reset (at connect, send or receive; an end of stream counts)."""
    try:
        sock = sock or connect(proxy)
        with sock:
            sock.sendall(b"?")
            return sock.recv(1) != b"?"
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_a_cut_resets_connections_and_refuses_new_ones_until_heal(echo):
    with FaultProxy(echo) as proxy:
        sock = connect(proxy)
        sock.sendall(b"a")
        assert receive(sock, 1) == b"a"
        proxy.cut()
        assert _broken(proxy, sock)
        assert _broken(proxy)
        assert proxy.stats.resets == 1 and proxy.stats.refused == 1
        proxy.heal()
        assert not _broken(proxy)


def _drop_pattern(echo, seed: int, count: int = 40) -> list[bool]:
    """For ``count`` connections one after another, each sending one chunk:
    whether the proxy dropped it (probability one half)."""
    pattern = []
    with FaultProxy(echo, seed=seed) as proxy:
        proxy.drop(probability=0.5)
        for _ in range(count):
            with connect(proxy) as sock:
                sock.sendall(b"z")
                try:
                    pattern.append(sock.recv(1) != b"z")
                except ConnectionResetError:
                    pattern.append(True)
    return pattern


def test_drops_follow_the_seed(echo):
    first, again, other = _drop_pattern(echo, 7), _drop_pattern(echo, 7), _drop_pattern(echo, 8)
    assert first == again
    assert first != other  # 2**-40 to fail by chance
    assert 5 < sum(first) < 35
