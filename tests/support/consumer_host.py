"""Kafka 4.x's VerifiableConsumers, many in one JVM, on one clock with Python clients.

Owns :class:`ConsumerHost`: the JVM of ``java/ConsumerHost.java`` (compiled
once into the cache, :func:`tests.support.java4_tools.compiled_classes`),
in which a test starts and stops members (:meth:`ConsumerHost.start_member`,
:meth:`ConsumerHost.stop_member`), each one Kafka's own
``org.apache.kafka.tools.VerifiableConsumer`` as its ``main()`` builds it,
classic or consumer protocol. One JVM start serves every member and every
restart of a test (a rolling bounce restarts each member twice), which on a
2-core machine is most of what a test of several Java members costs.

Each event comes with ``mono_ns``, ``System.nanoTime()`` when the member
printed it: on Linux CLOCK_MONOTONIC, the clock of Python's
``time.monotonic_ns()``, so the assignment changes of these members and of
Python clients (:mod:`tests.support.rdkafka_members`) and the moments a test
kills something are on one time line for
:func:`tests.support.ownership.double_owners`.

A member that should be killed with SIGKILL (no leave, no callback) runs in
a host of its own: :meth:`ConsumerHost.kill` kills the JVM.

:meth:`ConsumerHost.consumer_groups` runs Kafka 4.x's kafka-consumer-groups
(``ConsumerGroupCommand.main``) in the same JVM, its output captured and
Kafka's ``Exit.exit`` turned into its exit code: the tool's own code, two
seconds less than a JVM of its own each time.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support import java_tools
from tests.support.java4_tools import JsonLinesProcess, compiled_classes
from tests.support.java_tools import CONSUMER_GROUP_COMMAND, ToolResult
from tests.support.ownership import AssignmentChange

HOST_SOURCE = Path(__file__).with_name("java") / "ConsumerHost.java"
HOST_MAIN = "ConsumerHost"
RANGE_ASSIGNOR = "org.apache.kafka.clients.consumer.RangeAssignor"  # VerifiableConsumer's default (eager)
TOOL_TIMEOUT_S = 120.0
COMMAND_TIMEOUT_S = 60.0  # a member's start, and its close (a leave, or its close time-out of 30 s)

TopicPartition = tuple[str, int]


def member_properties(bootstrap_servers: str, group: str, protocol: str, *, label: str,
                      assignor: str | None = None, revoke_delay_ms: int = 0,
                      extra: Mapping[str, object] | None = None) -> dict[str, object]:
    """A hosted member's consumer settings, as VerifiableConsumer's command
    line sets them: ``protocol`` ``consumer`` (``assignor``: the group's
    server-side assignor) or ``classic`` (``assignor``: the strategy class,
    RangeAssignor by default); ``client.id`` its label."""
    settings: dict[str, object] = {"bootstrap.servers": bootstrap_servers, "group.id": group,
                                   "group.protocol": protocol, "client.id": label}
    if protocol == "consumer":
        if assignor is not None:
            settings["group.remote.assignor"] = assignor
    else:
        settings["partition.assignment.strategy"] = assignor or RANGE_ASSIGNOR
    if revoke_delay_ms:
        settings["zkcoord.revoke.delay.ms"] = revoke_delay_ms
    settings.update(extra or {})
    return settings


def _partitions(items) -> frozenset[TopicPartition]:
    return frozenset((p["topic"], int(p["partition"])) for p in items)


@dataclass(frozen=True)
class MemberEvent:
    mono_ns: int
    name: str
    data: dict


class HostedMember:
    """What one member of a :class:`ConsumerHost` printed (a view: it reads
    the host's events as they come)."""

    def __init__(self, host: ConsumerHost, label: str):
        self.host, self.label = host, label

    def events(self, name: str | None = None) -> list[MemberEvent]:
        return [MemberEvent(int(e["mono_ns"]), e["event"].get("name"), e["event"])
                for e in self.host.events() if e.get("member") == self.label and "event" in e
                and (name is None or e["event"].get("name") == name)]

    def changes(self) -> list[AssignmentChange]:
        """Its assignment changes, timed in ``mono_ns`` (lost partitions show
        as revoked: VerifiableConsumer leaves onPartitionsLost to its default)."""
        kinds = {"partitions_assigned": "assigned", "partitions_revoked": "revoked"}
        return [AssignmentChange(self.label, kinds[e.name], e.mono_ns, _partitions(e.data["partitions"]))
                for e in self.events() if e.name in kinds]

    def assignment(self) -> frozenset[TopicPartition]:
        held: set[TopicPartition] = set()
        for change in self.changes():
            held = held | change.partitions if change.kind == "assigned" else held - change.partitions
        return frozenset(held)

    def consumed_offsets(self) -> dict[TopicPartition, set[int]]:
        """Offsets consumed per partition (each ``records_consumed`` batch's
        min..max of a partition: every offset of a non-transactional topic)."""
        consumed: dict[TopicPartition, set[int]] = {}
        for event in self.events("records_consumed"):
            for s in event.data["partitions"]:
                consumed.setdefault((s["topic"], int(s["partition"])), set()).update(
                    range(s["minOffset"], s["maxOffset"] + 1))
        return consumed

    def commits(self) -> list[tuple[int, dict[TopicPartition, int]]]:
        """Its acknowledged commits, in order: (mono_ns, {partition: offset})."""
        return [(e.mono_ns, {(o["topic"], int(o["partition"])): int(o["offset"]) for o in e.data["offsets"]})
                for e in self.events("offsets_committed") if e.data.get("success")]

    def consumptions(self) -> list[tuple[TopicPartition, range, tuple[str, int] | None]]:
        """Each batch it consumed: (partition, offsets, ownership), the
        ownership being (its label, the number of the assignment of that
        partition to it, 1 for the first) or None when it did not hold the
        partition by its own callbacks when it printed the batch."""
        held: dict[TopicPartition, int] = {}
        assignments: dict[TopicPartition, int] = {}
        found = []
        for event in self.events():
            if event.name == "partitions_assigned":
                for tp in _partitions(event.data["partitions"]):
                    assignments[tp] = assignments.get(tp, 0) + 1
                    held[tp] = assignments[tp]
            elif event.name == "partitions_revoked":
                for tp in _partitions(event.data["partitions"]):
                    held.pop(tp, None)
            elif event.name == "records_consumed":
                for s in event.data["partitions"]:
                    tp = (s["topic"], int(s["partition"]))
                    found.append((tp, range(s["minOffset"], s["maxOffset"] + 1),
                                  (self.label, held[tp]) if tp in held else None))
        return found

    def failed_commits(self) -> list[dict]:
        return [e.data for e in self.events("offsets_committed") if not e.data.get("success")]

    def shut_down(self) -> bool:
        return bool(self.events("shutdown_complete"))


@dataclass(frozen=True)
class Redelivery:
    """What the members consumed more than once, as Kafka's system tests
    allow it for at-least-once delivery: ``across_rebalance`` offsets
    consumed again by a later owner (another member, or the same one after the
    partition was taken away and given back: it resumes from the last
    commit); ``within_ownership`` offsets consumed twice while one member held
    the partition without a break (a consumer going back on its own: a bug);
    ``unowned`` batches consumed from a partition the member did not hold."""

    across_rebalance: dict[TopicPartition, list[int]]
    within_ownership: dict[TopicPartition, list[int]]
    unowned: list[tuple[str, TopicPartition, range]]

    def count(self) -> int:
        return sum(map(len, self.across_rebalance.values()))


def redelivery(members) -> Redelivery:
    """:class:`Redelivery` of hosted members' consumptions."""
    seen: dict[tuple[TopicPartition, int], list[tuple[str, int]]] = {}
    unowned = []
    for member in members:
        for tp, offsets, ownership in member.consumptions():
            if ownership is None:
                unowned.append((member.label, tp, offsets))
                continue
            for offset in offsets:
                seen.setdefault((tp, offset), []).append(ownership)
    across: dict[TopicPartition, list[int]] = {}
    within: dict[TopicPartition, list[int]] = {}
    for (tp, offset), owners in sorted(seen.items()):
        if len(owners) > len(set(owners)):
            within.setdefault(tp, []).append(offset)
        elif len(owners) > 1:
            across.setdefault(tp, []).append(offset)
    return Redelivery(across, within, unowned)


class ConsumerHost(JsonLinesProcess):
    """The ConsumerHost JVM (see the module docstring). ``start()`` waits
    until it is ready; as a context manager it is stopped on exit (every
    member closes, leaving its group), and killed if that fails."""

    main_class = HOST_MAIN
    stdin_pipe = True

    def __init__(self, label: str = "host"):
        super().__init__([], label, classpath_first=compiled_classes(HOST_SOURCE, HOST_MAIN))
        self._labels: set[str] = set()

    def start(self):
        super().start()
        self.wait_until(lambda: self._host_events("ready"), "ready", COMMAND_TIMEOUT_S)
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _host_events(self, name: str, label: str | None = None) -> list[dict]:
        return [e for e in self.events() if e.get("host") == name and (label is None or e.get("member") == label)]

    def errors(self) -> list[str]:
        return [f"{e.get('member')}: {e['error']}" for e in self._host_events("error")]

    # -- members
    def start_member(self, label: str, topic: str, properties: Mapping[str, object]) -> HostedMember:
        """Start member ``label`` (unique per host) on ``topic`` with the
        consumer ``properties`` (:func:`member_properties`); returns at once
        after the JVM took it (its join goes on in the background)."""
        if label in self._labels:
            raise ValueError(f"member label {label!r} used already in {self.label}: one label per incarnation")
        self._labels.add(label)
        fd, name = tempfile.mkstemp(prefix="member-", suffix=".properties", dir=java_tools._work_dir())
        with os.fdopen(fd, "w") as handle:
            handle.write("".join(f"{key}={value}\n" for key, value in properties.items()))
        try:
            self.send(f"start\t{label}\t{name}\t{topic}")
            self.wait_until(lambda: self._host_events("started", label) or self._failed(label),
                            f"member {label} started", COMMAND_TIMEOUT_S)
        finally:
            Path(name).unlink(missing_ok=True)
        if self._failed(label):
            raise self.error(f"could not start member {label}: {self._failed(label)}")
        return HostedMember(self, label)

    def _failed(self, label: str) -> list[str]:
        return [e["error"] for e in self._host_events("error", label)]

    def stop_member(self, label: str, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        """Close member ``label`` (it leaves its group) and wait until it has."""
        self.stop_members([label], timeout_s)

    def stop_members(self, labels, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        """Close the members ``labels`` at once and wait until each has."""
        labels = list(labels)
        for label in labels:
            self.send(f"stop\t{label}")
        for label in labels:
            self.wait_until(lambda: self._host_events("stopped", label) or self._failed(label),
                            f"member {label} stopped", timeout_s)

    def member(self, label: str) -> HostedMember:
        return HostedMember(self, label)

    def members(self) -> list[HostedMember]:
        return [HostedMember(self, label) for label in sorted(self._labels)]

    def changes(self) -> list[AssignmentChange]:
        return [c for m in self.members() for c in m.changes()]

    # -- tools
    _tool_ids = itertools.count(1)

    def run_tool(self, main_class: str, *args: str, timeout_s: float = TOOL_TIMEOUT_S) -> ToolResult:
        """``main_class``'s ``main(args)`` in this JVM: (exit code, stdout, stderr)."""
        if any("\t" in a or "\n" in a for a in args):
            raise ValueError(f"a tool argument with a tab or newline cannot be sent: {args!r}")
        tool_id = str(next(self._tool_ids))
        self.send("\t".join(("tool", tool_id, main_class, *args)))
        answer = self.wait_until(lambda: [e for e in self._host_events("tool") if e["id"] == tool_id],
                                 f"{main_class.rpartition('.')[2]} {' '.join(args)} done", timeout_s)[0]
        return ToolResult(int(answer["exit"]), answer["stdout"], answer["stderr"])

    def consumer_groups(self, bootstrap_servers: str, *args: str) -> ToolResult:
        """Kafka 4.x's ``kafka-consumer-groups --bootstrap-server ... <args>``
        (exit code, stdout, stderr), whatever its exit code."""
        return self.run_tool(CONSUMER_GROUP_COMMAND, "--bootstrap-server", bootstrap_servers, *args)

    # -- ending it
    def close(self, timeout_s: float = 90.0) -> None:
        """Stop every member (each leaves its group) and the JVM; killed if it
        does not exit within ``timeout_s``."""
        if self.alive():
            try:
                self.send("exit")
                self.proc.wait(timeout_s)
            except (OSError, ValueError):  # its stdin is gone: it is exiting
                pass
            except Exception:
                pass
        self.kill()

    def kill(self) -> int:
        """SIGKILL (no member closes, nobody leaves) and the moment it was
        dead, ``time.monotonic_ns()`` after the JVM was reaped."""
        super().kill()
        if self.proc is not None and self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        return time.monotonic_ns()
