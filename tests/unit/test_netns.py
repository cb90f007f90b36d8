"""Network namespaces of tests/support/netns.py, with no servers but a few
sockets of this process: a process in the namespace reaches the host's
loopback services under their own addresses and the host reaches it; each
cut stops exactly what it names and heals; nothing is left behind, and the
leftovers of a dead run are removed. Skipped where namespaces cannot be
made (not root, no iproute2).

A cut connection is seen by a connect that times out: the time-out only
bounds the wait, the outcome (connected or not) is what is asserted.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from tests.support import netns

pytestmark = pytest.mark.skipif(netns.available() is not None, reason=str(netns.available()))

PROBE = """
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    with socket.create_connection((host, port), timeout=float(sys.argv[3])) as s:
        s.settimeout(float(sys.argv[3]))
        s.sendall(b"?")
        print("ok" if s.recv(1) == b"?" else "eof")
except OSError as exc:
    print(type(exc).__name__)
"""


@pytest.fixture
def echo_servers():
    """Two echo servers on the host's 127.0.0.1; their ports."""
    servers, stop = [], threading.Event()
    for _ in range(2):
        server = socket.create_server(("127.0.0.1", 0))
        servers.append(server)
        threading.Thread(target=_serve, args=(server, stop), daemon=True).start()
    yield [s.getsockname()[1] for s in servers]
    stop.set()
    for s in servers:
        s.close()


def _serve(server: socket.socket, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            data = conn.recv(1)
            if data:
                conn.sendall(data)


@pytest.fixture
def ns():
    with netns.Namespaces() as spaces:
        yield spaces.create()


def from_ns(ns: netns.NetNamespace, port: int, timeout_s: float = 1.0, host: str = "127.0.0.1") -> str:
    done = subprocess.run(ns.wrap([sys.executable, "-c", PROBE, host, str(port), str(timeout_s)]),
                          capture_output=True, text=True, timeout=30)
    return done.stdout.strip() or done.stderr.strip()


def from_host(address: str, port: int, timeout_s: float = 1.0) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, address, str(port), str(timeout_s)],
                          capture_output=True, text=True, timeout=30)
    return done.stdout.strip()


@pytest.fixture
def ns_server(ns):
    """An echo server inside the namespace, on its address; its port."""
    code = ("import socket\ns = socket.create_server((%r, 0))\nprint(s.getsockname()[1], flush=True)\n"
            "while True:\n    c, _ = s.accept()\n    d = c.recv(1)\n    c.sendall(d)\n    c.close()\n") % ns.address
    proc = subprocess.Popen(ns.wrap([sys.executable, "-c", code]), stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    yield port
    proc.kill()
    proc.wait(10)


def test_the_namespace_reaches_host_loopback_and_the_host_reaches_it(ns, echo_servers, ns_server):
    assert [from_ns(ns, p) for p in echo_servers] == ["ok", "ok"]
    assert from_host(ns.address, ns_server) == "ok"


def test_cut_to_one_port_leaves_the_others_and_heals(ns, echo_servers):
    cut, other = echo_servers
    ns.cut_to([cut])
    assert from_ns(ns, cut) == "TimeoutError"  # dropped silently, as in a partition: no error at once
    assert from_ns(ns, other) == "ok"
    ns.heal()
    assert from_ns(ns, cut) == "ok"


def test_cut_clients_stops_both_directions_of_its_ports_only(ns, echo_servers, ns_server):
    ns.cut_clients([ns_server])
    assert from_host(ns.address, ns_server) == "TimeoutError"
    assert from_ns(ns, echo_servers[0]) == "ok"  # what it connects to itself still passes
    ns.heal()
    assert from_host(ns.address, ns_server) == "ok"


def test_link_down_cuts_everything_until_heal(ns, echo_servers, ns_server):
    ns.link_down()
    assert from_ns(ns, echo_servers[0]) != "ok"
    assert from_host(ns.address, ns_server) != "ok"
    ns.heal()
    assert from_ns(ns, echo_servers[0]) == "ok"
    assert from_host(ns.address, ns_server) == "ok"


def _ours() -> str:
    return subprocess.run("ip netns list; ip -o link show; ip route show", shell=True, capture_output=True,
                          text=True).stdout


def test_close_removes_everything_and_leftovers_of_dead_runs_go():
    with netns.Namespaces() as spaces:
        made = spaces.create()
        assert made.name in _ours() and made.host_if in _ours() and made.address in _ours()
    assert made.name not in _ours() and made.host_if not in _ours() and made.address not in _ours()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid is free now (reuse within this test is not a worry)
    stale = f"{netns.PREFIX}{dead.pid:x}n1"
    netns.ip("netns", "add", stale)
    netns.ip("link", "add", f"{netns.PREFIX}{dead.pid:x}h1", "type", "veth", "peer", "name",
             f"{netns.PREFIX}{dead.pid:x}i1")
    removed = netns.cleanup_leftovers()
    assert stale in removed and f"{netns.PREFIX}{dead.pid:x}h1" in removed
    assert stale not in _ours() and f"{netns.PREFIX}{dead.pid:x}" not in _ours()
