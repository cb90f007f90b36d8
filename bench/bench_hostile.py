"""Another group's heartbeat latency while a hostile client sends the largest
requests a daemon reads (issue 16; :mod:`zkcoord.core.limits`).

Starts the usual bench environment (``bench_env.Environment``: a sandbox,
one ``zkcoord run`` daemon), joins one member to a victim group, and has it
heartbeat back to back for ``--seconds`` with no hostile client, then
``--seconds`` per hostile kind, each hostile client in a process of its own
sending its request again as soon as the last is answered:

* ``describe``: DescribeGroups with ~110,000 distinct ids of groups that
  exist nowhere (just under group_admin_request_max_bytes, 1 MiB);
* ``describe-same``: DescribeGroups with ~1,000,000 empty ids (1 MiB);
* ``delete``: DeleteGroups with ~110,000 distinct names (1 MiB);
* ``commit``: OffsetCommit with ~460,000 partitions (just under
  group_request_max_bytes, 8 MiB), committed to ZooKeeper;
* ``fetch``: OffsetFetch of one group with ~2,000,000 partitions (8 MiB);
* ``metadata``: OffsetCommit of 2 partitions with 2 MB of metadata each;
* ``find``: FindCoordinator v4 with ~100,000 distinct keys of groups nobody
  owns (1 MiB);
* ``find-same``: FindCoordinator v4 with 300,000 copies of one key of a
  group nobody owns (1 MiB);
* ``consumer-join``: ConsumerGroupHeartbeat joining with ~40,000 subscribed
  topic names (1 MiB; the member's record would be over --max-state-bytes,
  so it is refused each time after the coordinator's work);
* ``consumer-owned``: ConsumerGroupHeartbeat of a joined member claiming
  ~250,000 partitions it owns (1 MiB).
* ``pipelined``: a member of a group of its own sends 16,000 Heartbeats in
  one write (1 MiB, each a request the daemon answers at once), then reads
  their answers, again and again.

The daemon serves ``--metrics-listen`` as every sandbox daemon does (each
answer's error is counted); ``--no-metrics`` runs it without. With
``--gateway`` the daemon also runs its gateway, and the hostile client and
the victim both go through it (the gateway decodes the group requests and
hands them to the daemon's handler in the same process).

Prints per kind the heartbeat p50/p99/max, the p99 ratio to the quiet run,
and whether the p99 meets the 50 ms goal. Run by hand:

    PYTHONPATH=. python bench/bench_hostile.py --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest  # noqa: E402
from kafka.protocol.consumer.group import (  # noqa: E402
    HeartbeatRequest, JoinGroupRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest  # noqa: E402
from kafka.protocol.parser import KafkaProtocol  # noqa: E402

from zkcoord.schemas import ConsumerGroupHeartbeatRequest  # noqa: E402

GOAL_P99_MS = 50.0
SETTLE_S = 5.0
KINDS = ("describe", "describe-same", "delete", "commit", "fetch", "metadata", "find", "find-same",
         "consumer-join", "consumer-owned", "pipelined")
PIPELINED = 16_000  # Heartbeats of ~65 bytes sent in one write: 1 MiB
HOSTILE_MEMBER = "hostileAAAAAAAAAAAAAAA"  # a KIP-848 member id: 22 characters
Topic = OffsetCommitRequest.OffsetCommitRequestTopic
Partition = Topic.OffsetCommitRequestPartition


class Wire:
    """kafka-python's client framing over asyncio, one request at a time."""

    def __init__(self, reader, writer, client_id: str):
        self.reader, self.writer = reader, writer
        self.protocol = KafkaProtocol(client_id=client_id)

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str) -> "Wire":
        return cls(*await asyncio.open_connection(host, port), client_id)

    async def call(self, request):
        self.protocol.send_request(request)
        self.writer.write(self.protocol.send_bytes())
        received = []
        while not received:
            data = await self.reader.read(1 << 20)
            if not data:
                raise ConnectionError("closed by the daemon")
            received = self.protocol.receive_bytes(data)
        return received[0][1]


def hostile_request(kind: str, epoch: int = 0):
    if kind == "describe":
        return DescribeGroupsRequest(version=5, groups=[f"x{i:07d}" for i in range(110_000)],
                                     include_authorized_operations=False)
    if kind == "describe-same":
        return DescribeGroupsRequest(version=5, groups=[""] * 1_040_000, include_authorized_operations=False)
    if kind == "delete":
        return DeleteGroupsRequest(version=2, groups_names=[f"d{i:07d}" for i in range(110_000)])
    if kind == "commit":
        return OffsetCommitRequest(version=8, group_id="hostile", generation_id_or_member_epoch=-1, member_id="",
                                   group_instance_id=None, topics=[Topic(name="t", partitions=[
                                       Partition(partition_index=i, committed_offset=1, committed_leader_epoch=-1,
                                                 committed_metadata="") for i in range(460_000)])])
    if kind == "fetch":
        return OffsetFetchRequest(version=8, require_stable=False, groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id="hostile", topics=[
                OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                    name="t", partition_indexes=list(range(2_000_000)))])])
    if kind == "metadata":
        return OffsetCommitRequest(version=8, group_id="hostile", generation_id_or_member_epoch=-1, member_id="",
                                   group_instance_id=None, topics=[Topic(name="t", partitions=[
                                       Partition(partition_index=i, committed_offset=1, committed_leader_epoch=-1,
                                                 committed_metadata="m" * 2_000_000) for i in range(2)])])
    if kind == "find":
        return FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=[f"f{i:06d}" for i in range(100_000)])
    if kind == "find-same":
        return FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=["f"] * 300_000)
    if kind == "consumer-join":
        return ConsumerGroupHeartbeatRequest(
            version=1, group_id="hostile", member_id=HOSTILE_MEMBER, member_epoch=0, rebalance_timeout_ms=30_000,
            subscribed_topic_names=[f"topic-{i:06d}-{'x' * 10}" for i in range(40_000)], topic_partitions=[])
    if kind == "consumer-owned":
        return ConsumerGroupHeartbeatRequest(
            version=1, group_id="hostile", member_id=HOSTILE_MEMBER, member_epoch=epoch,
            topic_partitions=[ConsumerGroupHeartbeatRequest.TopicPartitions(
                topic_id=uuid.UUID(int=t + 1), partitions=list(range(1_000))) for t in range(250)])
    raise ValueError(kind)


async def hostile(kind: str, host: str, port: int) -> None:
    """Send the kind's request again and again; answers are read as raw frames."""
    wire = await Wire.connect(host, port, "hostile")
    await wire.call(FindCoordinatorRequest(version=3, key="hostile", key_type=0))
    epoch = 0
    if kind == "consumer-owned":  # a member first, whose heartbeats then claim the partitions
        joined = await wire.call(ConsumerGroupHeartbeatRequest(
            version=1, group_id="hostile", member_id=HOSTILE_MEMBER, member_epoch=0, rebalance_timeout_ms=30_000,
            subscribed_topic_names=["hostile-topic"], topic_partitions=[]))
        epoch = joined.member_epoch
    if kind == "pipelined":
        await pipelined(wire)
        return
    protocol = KafkaProtocol(client_id="hostile")
    protocol.send_request(hostile_request(kind, epoch))
    frame = protocol.send_bytes()
    print(f"hostile {kind}: {len(frame)}-byte request", flush=True)
    while True:
        wire.writer.write(frame)
        size = int.from_bytes(await wire.reader.readexactly(4), "big")
        await wire.reader.readexactly(size)


async def pipelined(wire: Wire) -> None:
    """A member of a group of its own, then its Heartbeats, PIPELINED in one write each round."""
    member_id, generation = await join_alone(wire, "hostile")
    request = HeartbeatRequest(version=3, group_id="hostile", generation_id=generation, member_id=member_id,
                               group_instance_id=None)
    protocol = KafkaProtocol(client_id="hostile")
    for _ in range(PIPELINED):
        protocol.send_request(request)
    frames = protocol.send_bytes()
    print(f"hostile pipelined: {PIPELINED} Heartbeats in one {len(frames)}-byte write", flush=True)
    while True:
        wire.writer.write(frames)
        for _ in range(PIPELINED):
            size = int.from_bytes(await wire.reader.readexactly(4), "big")
            await wire.reader.readexactly(size)


async def join_alone(wire: Wire, group: str) -> tuple[str, int]:
    """(member id, generation) of a member that joined and synced ``group`` alone."""
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]

    def join(member_id):
        return JoinGroupRequest(version=5, group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
                                member_id=member_id, group_instance_id=None, protocol_type="consumer",
                                protocols=protocols)

    member_id = (await wire.call(join(""))).member_id
    joined = await wire.call(join(member_id))
    await wire.call(SyncGroupRequest(version=3, group_id=group, generation_id=joined.generation_id,
                                     member_id=member_id, group_instance_id=None, assignments=[]))
    return member_id, joined.generation_id


async def heartbeats(address: tuple[str, int], seconds: float) -> list[float]:
    """Latencies (ms) of back-to-back heartbeats of a fresh member of a victim group."""
    group = f"victim-{time.monotonic_ns()}"
    wire = await Wire.connect(*address, "victim")
    await wire.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
    member_id, generation = await join_alone(wire, group)
    request = HeartbeatRequest(version=3, group_id=group, generation_id=generation, member_id=member_id,
                               group_instance_id=None)
    latencies = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        answer = await wire.call(request)
        latencies.append((time.perf_counter() - start) * 1000)
        if answer.error_code != 0:
            raise RuntimeError(f"heartbeat answered error {answer.error_code}")
        await asyncio.sleep(0.005)
    wire.writer.close()
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(env, kinds: list[str], seconds: float, gateway: bool = False) -> None:
    from bench_env import cpu_snapshot  # noqa: F401 - the same environment as the other benchmarks

    address = env.gateway_address if gateway else env.daemon_address
    quiet = asyncio.run(heartbeats(address, seconds))
    rows = [("none", quiet)]
    for kind in kinds:
        proc = subprocess.Popen([sys.executable, __file__, "--hostile", kind, f"{address[0]}:{address[1]}"])
        try:
            time.sleep(3.0)  # it encodes its request first
            rows.append((kind, asyncio.run(heartbeats(address, seconds))))
        finally:
            proc.terminate()
            proc.wait()
            time.sleep(SETTLE_S)  # the daemon finishes the request it was serving before the next row
    base = percentile(quiet, 0.99)
    metrics = "with" if "--metrics-listen" in env.daemon_args else "without"
    where = "through the daemon's gateway" if gateway else "on the same daemon"
    print(f"\nheartbeat latency of another group {where} ({metrics} metrics), {seconds:g} s per row "
          f"(goal: p99 under {GOAL_P99_MS:g} ms)")
    print(f"{'hostile':<13} {'beats':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99/quiet':>10}  goal")
    for kind, values in rows:
        p99 = percentile(values, 0.99)
        print(f"{kind:<13} {len(values):>6} {percentile(values, 0.5):>8.2f} {p99:>8.2f} {max(values):>8.2f} "
              f"{p99 / base:>10.1f}  {'met' if p99 < GOAL_P99_MS else 'MISSED'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--no-metrics", action="store_true", help="run the daemon without --metrics-listen")
    parser.add_argument("--gateway", action="store_true",
                        help="the hostile client and the victim go through the daemon's gateway")
    parser.add_argument("--workdir", type=Path, help="keep the sandbox's and the daemon's logs here [a temp dir, removed]")
    parser.add_argument("--hostile", nargs=2, metavar=("KIND", "HOST:PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hostile:
        kind, where = args.hostile
        host, _, port = where.rpartition(":")
        try:
            asyncio.run(hostile(kind, host, int(port)))
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            print(f"hostile {kind}: {exc!r}", flush=True)
        return 0
    from bench_env import Environment

    daemon_args = () if args.no_metrics else ("--metrics-listen", "127.0.0.1:0")
    if args.workdir is not None:  # kept, with the daemon's log
        args.workdir.mkdir(parents=True, exist_ok=True)
        run(Environment(args.workdir, topic="t", topic_partitions=1, daemon_args=daemon_args, gateway=args.gateway),
            args)
        print(f"logs in {args.workdir}")
        return 0
    with tempfile.TemporaryDirectory(prefix="zkcoord-bench-hostile-") as workdir:
        run(Environment(Path(workdir), topic="t", topic_partitions=1, daemon_args=daemon_args,
                        gateway=args.gateway), args)
    return 0


def run(env, args) -> None:
    try:
        env.start()
        measure(env, args.kinds.split(","), args.seconds, args.gateway)
    finally:
        env.stop()


if __name__ == "__main__":
    sys.exit(main())
