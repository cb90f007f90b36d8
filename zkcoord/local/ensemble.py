"""The sandbox's ZooKeeper: one standalone server or an ensemble of 3 or 5.

Owns the ensemble's shape, with no I/O:

* the servers' names: ``zookeeper`` alone (as every sandbox before
  ensembles), ``zookeeper-1`` .. ``zookeeper-N`` in an ensemble, where the
  number is the server's ``myid``; each server's directory under the state
  directory carries its name (``<state-dir>/zookeeper-2/data/myid``);
* the connect string every client of the sandbox is given (brokers'
  ``zookeeper.connect``, daemons' ``--zookeeper``, ``ZKCOORD_ZOOKEEPER``):
  every server, ``127.0.0.1:<port>,127.0.0.1:<port>,...``;
* the ``server.<myid>=127.0.0.1:<quorum port>:<election port>`` lines of
  ``zoo.cfg`` (:func:`zkcoord.local.config_files.zoo_cfg`), the same in
  every server's file;
* a server's role as its four-letter word ``srvr`` tells it
  (:func:`mode`): ``Mode: leader``, ``follower`` or ``standalone``; a
  server that is not part of a quorum answers only that it is not serving;
* the quorum: a majority of the ensemble (2 of 3, 3 of 5).

The count is chosen when the sandbox is made and kept: changing it needs
``zkcoord local down`` first (:func:`check_same`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zkcoord.errors import UsageError

SIZES = (1, 3, 5)
MAX_SERVERS = max(SIZES)
STANDALONE_NAME = "zookeeper"
# What a ZooKeeper 3.8 server answers to a four-letter word (other than ruok) while it serves no clients:
# an ensemble member without a quorum, or one still electing or syncing.
NOT_SERVING = "This ZooKeeper instance is not currently serving requests"
SERVING_MODES = frozenset({"leader", "follower", "standalone"})


@dataclass(frozen=True)
class Peer:
    """One ensemble member as the others' ``zoo.cfg`` names it."""

    myid: int
    quorum_port: int
    election_port: int
    host: str = "127.0.0.1"

    def server_line(self) -> str:
        return f"server.{self.myid}={self.host}:{self.quorum_port}:{self.election_port}"


def check_size(count: int) -> None:
    """UsageError unless ``count`` is a size the sandbox runs."""
    if count not in SIZES:
        raise UsageError(f"--zookeepers {count}: the sandbox runs 1 ZooKeeper server, or an ensemble of 3 or 5 "
                         "(an odd number: an ensemble of 2 or 4 survives no more failures than one of 1 or 3).")


def check_same(state_dir: object, recorded: int, asked: int | None) -> None:
    """UsageError when ``asked`` (None: not asked) differs from the count the sandbox was made with."""
    if asked is not None and asked != recorded:
        raise UsageError(f"The sandbox in {state_dir} runs {describe(recorded)}, not {asked}; run "
                         "`zkcoord local down` first to change --zookeepers.")


def describe(count: int) -> str:
    """``1 ZooKeeper server`` / ``a ZooKeeper ensemble of 3``."""
    return "1 ZooKeeper server" if count == 1 else f"a ZooKeeper ensemble of {count}"


def server_names(count: int) -> list[str]:
    """The servers' names, in myid order.

    >>> server_names(1), server_names(3)
    (['zookeeper'], ['zookeeper-1', 'zookeeper-2', 'zookeeper-3'])"""
    check_size(count)
    return [STANDALONE_NAME] if count == 1 else [f"{STANDALONE_NAME}-{myid}" for myid in range(1, count + 1)]


def myid(name: str) -> int | None:
    """An ensemble member's id from its name; None for the standalone server (or any other name).

    >>> myid("zookeeper-2"), myid("zookeeper"), myid("kafka-0")
    (2, None, None)"""
    prefix = f"{STANDALONE_NAME}-"
    if name.startswith(prefix) and name[len(prefix):].isdigit():
        return int(name[len(prefix):])
    return None


def is_zookeeper(name: str) -> bool:
    return name == STANDALONE_NAME or myid(name) is not None


def connect_string(ports: Sequence[int], host: str = "127.0.0.1") -> str:
    """Every server's address, as clients take them.

    >>> connect_string([2181, 2182])
    '127.0.0.1:2181,127.0.0.1:2182'"""
    if not ports:
        raise ValueError("a ZooKeeper connect string needs at least one server")
    return ",".join(f"{host}:{port}" for port in ports)


def server_lines(peers: Sequence[Peer]) -> list[str]:
    """The ``server.N`` lines of every member's ``zoo.cfg``, in myid order; the ids must be distinct."""
    ids = [peer.myid for peer in peers]
    if len(set(ids)) != len(ids):
        raise ValueError(f"ensemble members with the same myid: {sorted(ids)}")
    return [peer.server_line() for peer in sorted(peers, key=lambda p: p.myid)]


def quorum(count: int) -> int:
    """How many servers make a majority.

    >>> quorum(1), quorum(3), quorum(5)
    (1, 2, 3)"""
    return count // 2 + 1


def mode(srvr_answer: str) -> str | None:
    """The role in a ``srvr`` (or ``stat``/``mntr``) answer: ``leader``,
    ``follower``, ``observer`` or ``standalone``; None when the server does not
    serve (no quorum, still electing) or did not answer.

    >>> mode("Zxid: 0x100000002\\nMode: follower\\nNode count: 5\\n"), mode(NOT_SERVING + "\\n"), mode("")
    ('follower', None, None)
    >>> mode("zk_version\\t3.8.6\\nzk_server_state\\tleader\\n")
    'leader'"""
    for line in srvr_answer.splitlines():
        key, _, value = line.partition(":") if line.startswith("Mode:") else line.partition("\t")
        if key.strip() in ("Mode", "zk_server_state"):
            return value.strip() or None
    return None
