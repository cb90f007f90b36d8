"""Heartbeat and commit load from several processes (``--load-processes N``).

One asyncio process sending a request per member over its own connection
is itself the bottleneck of a back-to-back heartbeat run on a small machine
(bench/RESULTS.md: 55 us of the load generator's CPU per heartbeat against
the daemon, 31 against the broker, at a full core): the ratio then measures
the client. Here the members' requests come from N worker processes of
their own instead. The members stay joined in the parent (their group
membership, generation and assignment are the parent's); each worker opens
its own connection per member to the member's coordinator and sends that
member's Heartbeat (or OffsetCommit) there, which the coordinator accepts
as the member's: Kafka's coordinators do not tie a member to a connection.

The workers start with ``spawn`` (no event loop or socket of the parent is
inherited), connect, say they are ready, and start together at the
instant the parent sends (``time.perf_counter`` is the system-wide
monotonic clock on Linux, the same in every process); each sends its
latencies and error counts back when the run ends.
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

__all__ = ["MemberSpec", "ConnectSpec", "LoadProcesses"]


@dataclass(frozen=True)
class MemberSpec:
    """What a worker needs to send one member's requests."""

    host: str
    port: int
    group: str
    member_id: str
    generation: int
    versions: dict
    client_id: str
    topic: str
    assignment: tuple[int, ...]


@dataclass(frozen=True)
class ConnectSpec:
    """The members' TLS trust (a PEM CA file) and SASL login, or neither: what
    KafkaConnection.open's ssl_context and login are made from in a worker."""

    ca_pem: str | None = None
    login: tuple[str, str, str] | None = None

    def open_kwargs(self) -> dict:
        if self.ca_pem is None:
            return {}
        from zkcoord.security.tls import SslSettings

        context = SslSettings(truststore_type="PEM", truststore_location=self.ca_pem).client_context()
        return {"ssl_context": context, "login": self.login}


@dataclass(frozen=True)
class Run:
    committing: bool
    sentinels: tuple[int, ...]


def _template(spec: MemberSpec, run: Run):
    from group_client import Member, RequestTemplate

    # the member's request builders, without a connection of its own here
    member = Member(None, spec.group, spec.topic, len(spec.assignment), spec.versions, 0, 0)
    member.member_id, member.generation, member.assignment = spec.member_id, spec.generation, list(spec.assignment)
    if run.committing:
        return member.commit_template(run.sentinels, spec.client_id)
    return RequestTemplate(member.heartbeat_request(), spec.client_id)


async def _worker_main(conn, specs: list[tuple[int, MemberSpec]], run: Run, connect: ConnectSpec) -> None:
    from group_client import KafkaConnection, commit_errors, heartbeat_errors, member_requests

    errors_of = commit_errors if run.committing else heartbeat_errors
    options = connect.open_kwargs()
    members = []
    for index, spec in specs:
        connection = await KafkaConnection.open(spec.host, spec.port, spec.client_id, **options)
        members.append((index, connection, _template(spec, run)))
    conn.send("ready")
    schedule = await asyncio.to_thread(conn.recv)
    errors: dict[int, int] = {}
    per_member = await asyncio.gather(*(member_requests(c, t, i, schedule, len(run.sentinels), errors_of, errors)
                                        for i, c, t in members))
    for _, connection, _ in members:
        connection.close()
    conn.send(([x for latencies in per_member for x in latencies], errors))
    await asyncio.to_thread(conn.recv)  # alive (its CPU readable) until the parent has sampled it


def _worker(conn, specs, run, connect) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(_worker_main(conn, specs, run, connect))
    except EOFError:  # the parent went away
        pass
    except BaseException as exc:  # told to the parent, which stops the run with it
        try:
            conn.send(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
        except OSError:
            pass
    finally:
        conn.close()


class LoadProcesses:
    """N worker processes sending the members' requests (module docstring)."""

    def __init__(self, processes: int, specs: list[MemberSpec], run: Run, connect: ConnectSpec) -> None:
        context = multiprocessing.get_context("spawn")
        self._pipes, self._procs = [], []
        for n in range(processes):
            mine = [(i, spec) for i, spec in enumerate(specs) if i % processes == n]
            parent, child = context.Pipe()
            proc = context.Process(target=_worker, args=(child, mine, run, connect), daemon=True,
                                   name=f"bench-load-{n}")
            proc.start()
            child.close()
            self._pipes.append(parent)
            self._procs.append(proc)

    @property
    def pids(self) -> dict[str, int]:
        return {f"load-{n}": proc.pid for n, proc in enumerate(self._procs)}

    async def ready(self) -> None:
        for pipe in self._pipes:
            answer = await asyncio.to_thread(pipe.recv)
            if answer != "ready":
                raise RuntimeError(f"a load process failed before the run: {answer!r}")

    def start(self, schedule) -> None:
        """Every load process runs ``schedule`` (group_client.Schedule)."""
        for pipe in self._pipes:
            pipe.send(schedule)

    async def results(self) -> tuple[list[float], collections.Counter]:
        latencies, errors = [], collections.Counter()
        for pipe in self._pipes:
            answer = await asyncio.to_thread(pipe.recv)
            if isinstance(answer, BaseException):
                raise RuntimeError(f"a load process failed: {answer!r}")
            got, their_errors = answer
            latencies += got
            errors.update(their_errors)
        return latencies, errors

    def close(self) -> None:
        for pipe in self._pipes:
            try:
                pipe.send("bye")
            except OSError:
                pass
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        for pipe in self._pipes:
            pipe.close()
