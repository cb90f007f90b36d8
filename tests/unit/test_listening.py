"""zkcoord.wire.listening: a port's listening sockets (the gateway's), and the check that keeps
SO_REUSEPORT from joining another process's listener. Real sockets on 127.0.0.1."""

from __future__ import annotations

import errno
import socket

import pytest

from tests.support.ports import foreign_listener
from zkcoord.wire.listening import DEFAULT_LISTEN_SOCKETS, check_port_free, listening_sockets, reuse_port_spreads

linux_only = pytest.mark.skipif(not reuse_port_spreads(), reason="SO_REUSEPORT spreads connections on Linux only")


@linux_only
def test_a_kernel_picked_port_gets_every_socket_on_that_port():
    sockets = listening_sockets("127.0.0.1", 0, backlog=16)
    try:
        assert len(sockets) == DEFAULT_LISTEN_SOCKETS
        assert len({s.getsockname() for s in sockets}) == 1
        assert all(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for s in sockets)
        assert not any(s.getblocking() for s in sockets)
        with socket.create_connection(sockets[0].getsockname(), timeout=5):
            pass  # listening: the kernel completes the handshake
    finally:
        for sock in sockets:
            sock.close()


def test_one_socket_is_bound_without_reuse_port():
    (sock,) = listening_sockets("127.0.0.1", 0, count=1)
    with sock:
        assert not sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)


@pytest.mark.parametrize("other_reuses_port", [False, True], ids=["plain", "reuse-port"])
def test_a_port_another_socket_holds_is_refused_and_nothing_is_left_open(other_reuses_port):
    with foreign_listener(other_reuses_port) as other:
        port = other.getsockname()[1]
        with pytest.raises(OSError) as refused:
            check_port_free("127.0.0.1", port)
        assert refused.value.errno == errno.EADDRINUSE and f"127.0.0.1', {port}" in str(refused.value)
        with pytest.raises(OSError) as refused:
            listening_sockets("127.0.0.1", port, count=4)
        assert refused.value.errno == errno.EADDRINUSE
    check_port_free("127.0.0.1", port)  # once it is closed the port is free, and nothing of ours holds it


@linux_only
def test_a_shared_port_joins_the_other_workers_sockets_unchecked():
    with foreign_listener(True) as worker_one:  # another worker's socket on the port they share
        port = worker_one.getsockname()[1]
        sockets = listening_sockets("127.0.0.1", port, count=2, shared=True)
        try:
            assert [s.getsockname()[1] for s in sockets] == [port, port]
        finally:
            for sock in sockets:
                sock.close()
