"""Processes in network namespaces of a test's own, and cuts of their links.

This module owns the network namespaces, veth pairs and host routes a test
creates to partition one process (a ``zkcoord run`` daemon, a consumer)
from some of the services it talks to, and their removal, also when the
test failed or a run was killed.

The layout (one :class:`NetNamespace`)::

    root namespace                           namespace <prefix>n<k>
    ZooKeeper, brokers, daemons              the process under test
    on 127.0.0.1 (as the sandbox             address 10.213.<a>.<b>/32 on <prefix>i<k>
    starts them)                             lo left down
          |                                  route 127.0.0.0/8 dev <prefix>i<k>
    <prefix>h<k>: no address  <------ veth ------>  <prefix>i<k>
    route 10.213.<a>.<b>/32 dev <prefix>h<k> src 127.0.0.1

The sandbox's servers listen on 127.0.0.1, and Kafka *advertises*
127.0.0.1:<port> in its metadata, so a process in the namespace must reach
the host's loopback as it is, with the very addresses every other process
uses. Linux routes 127.0.0.0/8 across an interface when that interface's
``route_localnet`` is on (both veth ends here; a per-interface setting that
goes with the interface): inside the namespace ``127.0.0.0/8`` is routed out
of the veth (the namespace's own ``lo`` stays down, so nothing local claims
those addresses there), the host accepts it as local, and answers go back
by the host route to the namespace's address, whose source is 127.0.0.1.
So a daemon in the namespace is started with the same ``--zookeeper
127.0.0.1:<port>/<chroot>`` and ``--bootstrap-servers`` as the others, and
listens on its namespace address, which is what it registers and what
FindCoordinator tells clients; the host reaches it by the /32 route. No
address is added to any interface of the root namespace, no server is
reconfigured, no userspace forwarder sits in the path (a test may still put
a :mod:`tests.support.fault_proxy` there for delays and drops), and only
addresses of namespaces the test creates, or loopback, are used.

Cuts are policy-routing rules in the namespace (``ip rule ... blackhole``,
matching ``ipproto tcp`` and a port, kernel 4.17+), so one port (ZooKeeper,
one broker, the daemons) is cut while the others still pass, which routes
by address alone could not do when every server is 127.0.0.1:

* :meth:`NetNamespace.cut_to` - outgoing connections to those ports (the
  process cut from ZooKeeper, from one broker, from its coordinators);
* :meth:`NetNamespace.cut_clients` - its listening ports, both directions
  (the process cut from its clients);
* :meth:`NetNamespace.link_down` - everything (the veth down);
* :meth:`NetNamespace.heal` - every cut removed.

Packets are dropped silently, as in a real partition: established
connections stall and retransmit, new connections time out. Outgoing
packets are routed (rule ``lookup 213``) into a sink interface of the
namespace (an ``ifb`` device, NOARP: what is sent to it without a tc redirect
is dropped), which discards them: a ``blackhole`` route or rule would fail a
local ``connect()`` at once with EINVAL, which no real partition does.
Incoming packets of a cut port meet a ``blackhole`` rule (silent on input).
Rule changes invalidate the kernel's cached routes, so they apply to
established connections at once.

Names carry a per-run prefix, ``zkt<pid of the test process, hex>``:
:func:`cleanup_leftovers` removes namespaces and interfaces of runs whose
process is gone (a run killed with -9 has no finalizer), and
:class:`Namespaces` (use it as a context manager, or the fixture of the
tests) removes its own at exit. A process still running in a namespace
keeps it alive after ``ip netns del``: stop processes first.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field

from zkcoord.local import procs

PREFIX = "zkt"
SUBNET = ipaddress.ip_network("10.213.0.0/16")  # namespace addresses are /32s drawn from it
_NAME = re.compile(rf"^{PREFIX}([0-9a-f]+)([nhi])(\d+)$")
_FIRST_RULE_PREF = 1000  # our rules' priorities start here (below the main table's 32766)
_SINK_TABLE = 213  # in each namespace: 127.0.0.0/8 into an ifb device, which drops it (module docstring)
_SINK_IF = "sink"


class NetnsUnavailable(RuntimeError):
    """This machine (or user) cannot make network namespaces."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip <args>``; RuntimeError naming the command and its stderr on failure."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def available() -> str | None:
    """None if namespaces can be made here, else why not (a skip reason)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"{PREFIX}{os.getpid():x}n999"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def _pid_alive(pid: int) -> bool:
    return procs.alive(pid)


def _netns_names() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.strip()]


def _link_names() -> list[str]:
    names = []
    for line in ip("-o", "link", "show").stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def cleanup_leftovers(own_pid: int | None = None) -> list[str]:
    """Remove the namespaces and veth ends of runs whose test process is
    gone (names ``zkt<pid hex>...``); what was removed. ``own_pid``'s are
    left alone (default: this process)."""
    own = os.getpid() if own_pid is None else own_pid
    removed = []
    for kind, names in (("link", _link_names()), ("netns", _netns_names())):
        for name in names:
            found = _NAME.match(name)
            if found is None:
                continue
            pid = int(found.group(1), 16)
            if pid == own or _pid_alive(pid):
                continue
            if kind == "link" and found.group(2) != "h":
                continue  # the namespace end: goes with its peer
            ip(kind, "del", name, check=False)
            removed.append(name)
    return removed


def _used_addresses() -> set[ipaddress.IPv4Address]:
    """Addresses of SUBNET already routed on the host (other runs' namespaces).
    A wider route covering SUBNET does not matter: our /32 routes are more specific."""
    used = set()
    for line in ip("-4", "route", "show").stdout.splitlines():
        try:
            net = ipaddress.ip_network(line.split()[0], strict=False)
        except (ValueError, IndexError):
            continue  # "default", "blackhole ...", an empty line
        if net.prefixlen >= SUBNET.prefixlen and net.subnet_of(SUBNET):
            used.update(net) if net.num_addresses <= 256 else used.update(net.hosts())
    return used


@dataclass
class NetNamespace:
    """One namespace, its veth pair and host route (module docstring).
    Create with :meth:`Namespaces.create`."""

    name: str
    host_if: str
    ns_if: str
    address: str
    rules: dict[int, tuple[str, ...]] = field(default_factory=dict)  # pref -> the rule's selector
    link_is_down: bool = False

    # -- processes ------------------------------------------------------------------
    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace: ``ip netns exec`` execs it in
        place, so the process keeps the pid the caller's Popen returns."""
        return ["ip", "netns", "exec", self.name, *argv]

    def listen(self, port: int = 0) -> str:
        """A ``--listen`` value for a daemon in the namespace: its own address
        (the host reaches it; 127.0.0.1 there is the host's)."""
        return f"{self.address}:{port}"

    # -- cuts ----------------------------------------------------------------------------
    def _add_rule(self, *selector: str, action: tuple[str, ...] = ("lookup", str(_SINK_TABLE))) -> None:
        pref = _FIRST_RULE_PREF + len(self.rules)
        while pref in self.rules:
            pref += 1
        ip("-n", self.name, "rule", "add", "pref", str(pref), *selector, *action)
        self.rules[pref] = selector

    def cut_to(self, ports: Iterable[int], host: str = "127.0.0.1") -> None:
        """Drop the namespace's TCP traffic to ``host:port`` for each port
        (its outgoing connections to ZooKeeper, a broker, the daemons)."""
        for port in ports:
            self._add_rule("to", f"{host}/32", "ipproto", "tcp", "dport", str(port))

    def cut_clients(self, ports: Iterable[int]) -> None:
        """Drop TCP traffic to and from the namespace's listening ``ports``:
        its clients' packets die on the way in, its answers on the way out."""
        for port in ports:
            self._add_rule("iif", self.ns_if, "ipproto", "tcp", "dport", str(port), action=("blackhole",))
            self._add_rule("ipproto", "tcp", "sport", str(port))

    def link_down(self) -> None:
        """Take the veth down: the namespace reaches nothing and nothing reaches it."""
        ip("-n", self.name, "link", "set", self.ns_if, "down")
        self.link_is_down = True

    def heal(self) -> None:
        """Remove every cut: the rules, and a downed link (its routes go with
        it, so they are made again)."""
        for pref in sorted(self.rules):
            ip("-n", self.name, "rule", "del", "pref", str(pref), check=False)
        self.rules.clear()
        if self.link_is_down:
            ip("-n", self.name, "link", "set", self.ns_if, "up")
            self._routes()
            self.link_is_down = False

    @property
    def cut(self) -> bool:
        return bool(self.rules) or self.link_is_down

    def unsent(self, port: int, host: str = "127.0.0.1") -> int:
        """Bytes the namespace's kernel still holds to send to ``host:port``:
        the Send-Q (sent but not acknowledged, or not sent yet) of each of its
        TCP sockets to it, those its process closed but the kernel still
        delivers included. 0 once all that was sent there was delivered, or
        dropped by a reset. After a heal the kernel retransmits only at its
        next retransmission time-out (backing off: up to about the length of
        the cut later), so a test waits for this, not for a time."""
        shown = subprocess.run(["ip", "netns", "exec", self.name, "ss", "-tnH", "state", "all", "dst",
                                f"{host}:{port}"], capture_output=True, text=True, check=True).stdout
        return sum(int(line.split()[2]) for line in shown.splitlines() if line.strip())

    # -- making and removing -----------------------------------------------------------
    def _routes(self) -> None:
        ip("-n", self.name, "route", "replace", "127.0.0.0/8", "dev", self.ns_if, "scope", "link",
           "src", self.address)
        ip("-n", self.name, "route", "replace", "127.0.0.0/8", "dev", _SINK_IF, "table", str(_SINK_TABLE),
           "scope", "link", "src", self.address)
        ip("route", "replace", f"{self.address}/32", "dev", self.host_if, "src", "127.0.0.1")

    def _make(self) -> None:
        ip("netns", "add", self.name)
        ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        ip("link", "set", self.ns_if, "netns", self.name)
        _sysctl(None, f"net.ipv4.conf.{self.host_if}.route_localnet", "1")
        _sysctl(self.name, f"net.ipv4.conf.{self.ns_if}.route_localnet", "1")
        _sysctl(self.name, f"net.ipv4.conf.{self.ns_if}.rp_filter", "0")
        ip("-n", self.name, "addr", "add", f"{self.address}/32", "dev", self.ns_if)
        ip("-n", self.name, "link", "add", _SINK_IF, "type", "ifb")
        _sysctl(self.name, f"net.ipv4.conf.{_SINK_IF}.route_localnet", "1")
        ip("-n", self.name, "link", "set", _SINK_IF, "up")
        ip("link", "set", self.host_if, "up")
        ip("-n", self.name, "link", "set", self.ns_if, "up")
        self._routes()

    def remove(self) -> None:
        """Delete the veth (its peer and the host route go with it) and the namespace."""
        ip("link", "del", self.host_if, check=False)
        ip("netns", "del", self.name, check=False)


def _sysctl(namespace: str | None, key: str, value: str) -> None:
    path = "/proc/sys/" + key.replace(".", "/")
    if namespace is None:
        with open(path, "w") as f:
            f.write(value)
        return
    done = subprocess.run(["ip", "netns", "exec", namespace, "sh", "-c", f"echo {value} > {path}"],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"setting {key}={value} in namespace {namespace} failed: {done.stderr.strip()}")


@dataclass
class Namespaces:
    """The namespaces of one test; every one is removed at :meth:`close`
    (a context manager: also when the test failed). Leftovers of killed
    runs are removed when the first one is created."""

    made: list[NetNamespace] = field(default_factory=list)
    _cleaned: bool = False

    def __enter__(self) -> Namespaces:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def create(self) -> NetNamespace:
        if not self._cleaned:
            cleanup_leftovers()
            self._cleaned = True
        index = _next_index()
        tag = f"{PREFIX}{os.getpid():x}"
        for address in _free_addresses():
            ns = NetNamespace(f"{tag}n{index}", f"{tag}h{index}", f"{tag}i{index}", str(address))
            try:
                ns._make()
            except RuntimeError as exc:
                ns.remove()
                if "File exists" in str(exc):  # another run took the address meanwhile
                    continue
                raise
            self.made.append(ns)
            return ns
        raise NetnsUnavailable(f"no free address left in {SUBNET}")

    def close(self) -> None:
        for ns in reversed(self.made):
            ns.remove()
        self.made.clear()


_counter = [0]


def _next_index() -> int:
    _counter[0] += 1
    return _counter[0]


def _free_addresses():
    used = _used_addresses()
    start = os.getpid() % 250 + 1  # runs at once start apart
    for third in [*range(start, 255), *range(1, start)]:
        for fourth in range(2, 255):
            address = ipaddress.IPv4Address(f"10.213.{third}.{fourth}")
            if address not in used:
                yield address
