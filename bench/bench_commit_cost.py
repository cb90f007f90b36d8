"""What one OffsetCommit costs in ZooKeeper (and Kafka) writes and bytes, per offset storage mode.

Run by hand (``bench/README.md``, "What a commit writes")::

    .venv/bin/python bench/bench_commit_cost.py                  # about 2 minutes
    .venv/bin/python bench/bench_commit_cost.py --commits 500 --concurrent-members 200

One sandbox (ZooKeeper 3.8, one Kafka 3.9 broker), the topic
``bench-commit-cost``, one ``zkcoord run`` daemon with ``--bootstrap-servers``
(which ``dual`` and ``kafka`` groups need) in a chroot of its own. Each
group is put in its mode before the daemon loads it
(:func:`zkcoord.zk.modes.set_offset_storage`, what ``migrate`` does). Then,
for each mode and each shape, commits go to the daemon's listener (OffsetCommit
v8, generation -1: a consumer outside any generation) and the counters are
read around them:

- ZooKeeper: transactions (``srvr`` Zxid: a multi is one), znode writes and
  the bytes of data they wrote under the chroot (``mntr``'s per-namespace
  ``zk_cnt_`` / ``zk_sum_<ns>_write_per_namespace``), fsyncs of its
  transaction log;
- Kafka: records appended to ``__consumer_offsets`` (its partitions' end
  offsets) and the bytes its ``.log`` segments grew by.

Shapes: ``one at a time`` (a commit, its answer, the next: nothing to share
a multi with), 1 partition and 10 partitions, empty metadata and 100 bytes
of metadata; ``together`` (``--concurrent-members`` connections over 10
groups committing back to back: commits share multis). Every figure is per
commit. Nothing here is timed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_env import Environment, zk_write_counters  # noqa: E402
from group_client import KafkaConnection  # noqa: E402
from kafka.protocol.consumer.group import OffsetCommitRequest  # noqa: E402

from zkcoord.wire.messages import build_message  # noqa: E402

TOPIC = "bench-commit-cost"
PARTITIONS = 10
MODES = ("zookeeper", "dual", "kafka")


@dataclass
class Cost:
    mode: str
    shape: str
    commits: int
    zk_txns: float
    zk_writes: float
    zk_bytes: float
    zk_fsyncs: float
    kafka_records: float
    kafka_bytes: float


def commit_request(group: str, offsets: dict[int, int], metadata: str):
    return build_message(OffsetCommitRequest, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                         group_instance_id=None, retention_time_ms=-1, topics=[{"name": TOPIC, "partitions": [
                             {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                              "committed_metadata": metadata} for p, o in sorted(offsets.items())]}])


class Meters:
    """ZooKeeper's and Kafka's counters, read around a shape."""

    def __init__(self, env: Environment) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.env = env
        host, port = env.kafka_address
        self.consumer = KafkaConsumer(bootstrap_servers=f"{host}:{port}", client_id="zkcoord-bench-cost",
                                      exclude_internal_topics=False)
        self.partition = lambda p: TopicPartition("__consumer_offsets", p)
        self.log_dir = Path(env.state_dir) / "kafka-0" / "data"

    def read(self) -> tuple:
        zk = zk_write_counters(self.env.zk_port, (self.env.namespace,))
        # Kafka creates __consumer_offsets on its first group request (the first forwarded commit): asked each time.
        partitions = sorted(self.consumer.partitions_for_topic("__consumer_offsets") or ())
        ends = self.consumer.end_offsets([self.partition(p) for p in partitions]) if partitions else {}
        log_bytes = sum(f.stat().st_size for f in self.log_dir.glob("__consumer_offsets-*/*.log"))
        return zk, sum(ends.values()), log_bytes

    def close(self) -> None:
        self.consumer.close()


async def one_at_a_time(address, group: str, commits: int, partitions: int, metadata: str) -> None:
    conn = await KafkaConnection.open(*address, "cost-single")
    try:
        for i in range(1, commits + 1):
            response = await conn.call(commit_request(group, {p: i for p in range(partitions)}, metadata))
            _check(response, group)
    finally:
        conn.close()


async def together(address, groups: list[str], members: int, commits: int) -> None:
    """``members`` connections over ``groups``, each committing its own partition until ``commits`` in all."""
    left = [commits]

    async def member(index: int) -> None:
        conn = await KafkaConnection.open(*address, f"cost-{index}")
        group, partition, offset = groups[index % len(groups)], index // len(groups) % PARTITIONS, 0
        try:
            while left[0] > 0:
                left[0] -= 1
                offset += 1
                _check(await conn.call(commit_request(group, {partition: offset}, "")), group)
        finally:
            conn.close()

    await asyncio.gather(*(member(i) for i in range(members)))


def _check(response, group: str) -> None:
    codes = {p.error_code for t in response.topics for p in t.partitions}
    if codes != {0}:
        raise SystemExit(f"group {group}: the daemon answered error codes {sorted(codes)}")


async def set_modes(env: Environment, groups: dict[str, str]) -> None:
    from zkcoord.zk.connection import ZkConnection
    from zkcoord.zk.modes import set_offset_storage

    conn = ZkConnection(f"127.0.0.1:{env.zk_port}{env.chroot}")
    await asyncio.to_thread(conn.start)
    try:
        for group, mode in groups.items():
            if mode != "zookeeper":
                await set_offset_storage(conn, group, mode)
    finally:
        conn.stop()


def measure(env: Environment, meters: Meters, mode: str, shape: str, commits: int, work) -> Cost:
    zk_a, records_a, bytes_a = meters.read()
    asyncio.run(work)
    zk_b, records_b, bytes_b = meters.read()
    zk = zk_b - zk_a
    return Cost(mode, shape, commits, zk.zxid / commits, zk.writes / commits, zk.bytes / commits,
                zk.fsyncs / commits, (records_b - records_a) / commits, (bytes_b - bytes_a) / commits)


def run(args, workdir: Path) -> list[Cost]:
    env = Environment(workdir, topic=TOPIC, topic_partitions=PARTITIONS, gateway=True)
    costs: list[Cost] = []
    try:
        env.start()
        address = env.daemon_address
        single = {mode: f"cost-{mode}" for mode in MODES}
        shared = {mode: [f"cost-{mode}-{i}" for i in range(10)] for mode in MODES}
        asyncio.run(set_modes(env, {**{g: m for m, g in single.items()},
                                    **{g: m for m, gs in shared.items() for g in gs}}))
        meters = Meters(env)
        try:
            for mode in MODES:
                asyncio.run(one_at_a_time(address, single[mode], 3, 1, ""))  # loaded, dirs made: not measured
                for partitions, metadata in ((1, ""), (10, ""), (1, "m" * 100)):
                    shape = f"one at a time, {partitions} partition{'s' if partitions > 1 else ''}" + \
                        (f", {len(metadata)} B metadata" if metadata else "")
                    costs.append(measure(env, meters, mode, shape, args.commits,
                                         one_at_a_time(address, single[mode], args.commits, partitions, metadata)))
                    print(_row(costs[-1]), flush=True)
                for group in shared[mode]:  # each group loaded, its partitions' znodes made: not measured
                    asyncio.run(one_at_a_time(address, group, 1, PARTITIONS, ""))
                costs.append(measure(env, meters, mode, f"together, {args.concurrent_members} connections",
                                     args.commits * 10,
                                     together(address, shared[mode], args.concurrent_members, args.commits * 10)))
                print(_row(costs[-1]), flush=True)
        finally:
            meters.close()
    finally:
        env.stop()
    return costs


HEADER = (f"{'mode':<10} {'shape':<40} {'zk txns':>8} {'znode writes':>12} {'zk bytes':>9} {'fsyncs':>7} "
          f"{'kafka records':>13} {'kafka bytes':>11}   (per commit)")


def _row(c: Cost) -> str:
    return (f"{c.mode:<10} {c.shape:<40} {c.zk_txns:>8.3f} {c.zk_writes:>12.2f} {c.zk_bytes:>9.1f} "
            f"{c.zk_fsyncs:>7.3f} {c.kafka_records:>13.2f} {c.kafka_bytes:>11.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=200, help="commits per one-at-a-time shape [200]; "
                        "ten times as many together")
    parser.add_argument("--concurrent-members", type=int, default=100, help="connections of the together shape")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="zkcoord-commit-cost-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"workdir {workdir}\n{HEADER}", flush=True)
    run(args, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
