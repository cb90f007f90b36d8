"""How much ZooKeeper grows under FindCoordinator lookups of group ids nobody uses.

Issue 16: a lookup used to make the daemon contend, leaving
``/coordinators/<group>/owner`` behind for every id looked up. This starts a
sandbox and one daemon (bench_env.Environment), reads ZooKeeper's
``znode_count`` (``mntr``), sends N lookups of fresh group ids to the daemon
(a few connections, pipelined), waits until the daemon answered them all,
and reads ``znode_count`` again. With ``--reads`` each lookup is followed by
a DescribeGroups, OffsetFetch, Heartbeat and DeleteGroups of the id, which
are answered without contending for a group that exists nowhere. Prints both counts and the growth per 1,000
lookups; run by hand::

    python bench/bench_lookups.py --lookups 10000 [--reads]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_env import Environment  # noqa: E402  (after the path tweak)
from group_client import NONE, BenchError, KafkaConnection, build_message  # noqa: E402
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest  # noqa: E402
from kafka.protocol.consumer.group import HeartbeatRequest, OffsetFetchRequest  # noqa: E402
from kafka.protocol.metadata import FindCoordinatorRequest  # noqa: E402
from zkcoord.local.sandbox import zk_four_letter  # noqa: E402

UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND = 25, 69


def znode_count(port: int) -> int:
    found = re.search(r"zk_znode_count\s+(\d+)", zk_four_letter(port, "mntr"))
    if found is None:
        raise BenchError(f"ZooKeeper on port {port} did not answer mntr with zk_znode_count")
    return int(found.group(1))


def reads_of(group: str) -> list[tuple[object, int]]:
    """The requests ``--reads`` sends about a group that exists nowhere, with the
    error code Kafka answers each (DescribeGroups and OffsetFetch: none; Heartbeat:
    UNKNOWN_MEMBER_ID; DeleteGroups: GROUP_ID_NOT_FOUND)."""
    return [
        (build_message(DescribeGroupsRequest, 5, groups=[group], include_authorized_operations=False), NONE),
        (build_message(OffsetFetchRequest, 5, group_id=group, topics=None, require_stable=False), NONE),
        (build_message(HeartbeatRequest, 3, group_id=group, generation_id=1, member_id="m",
                       group_instance_id=None), UNKNOWN_MEMBER_ID),
        (build_message(DeleteGroupsRequest, 2, groups_names=[group]), GROUP_ID_NOT_FOUND),
    ]


def error_of(answer) -> int:
    for field in ("groups", "results"):  # DescribeGroups, DeleteGroups: one entry each
        if getattr(answer, field, None):
            return getattr(answer, field)[0].error_code
    return answer.error_code


async def lookups(address: tuple[str, int], count: int, connections: int, reads: bool) -> tuple[int, float]:
    """Send ``count`` FindCoordinator requests of fresh group ids (with ``reads``,
    each followed by :func:`reads_of` the id); (unexpected answers, seconds)."""
    run = uuid.uuid4().hex[:8]
    errors = 0

    async def one_connection(index: int) -> None:
        nonlocal errors
        conn = await KafkaConnection.open(*address, f"bench-lookups-{index}")
        try:
            for i in range(index, count, connections):
                group = f"unused-{run}-{i}"
                answer = await conn.call(build_message(FindCoordinatorRequest, 3, key=group, key_type=0))
                errors += answer.error_code != NONE
                for request, expected in reads_of(group) if reads else ():
                    errors += error_of(await conn.call(request)) != expected
        finally:
            conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_connection(i) for i in range(connections)))
    return errors, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--reads", action="store_true",
                        help="after each lookup, DescribeGroups, OffsetFetch, Heartbeat and DeleteGroups of the id")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="zkcoord-bench-lookups-"))
    workdir.mkdir(parents=True, exist_ok=True)
    env = Environment(workdir, topic="bench-lookups", topic_partitions=1)
    try:
        env.start()
        before = znode_count(env.zk_port)
        errors, seconds = asyncio.run(lookups(env.daemon_address, args.lookups, args.connections, args.reads))
        after = znode_count(env.zk_port)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        env.stop()
    what = " (each with a DescribeGroups, OffsetFetch, Heartbeat and DeleteGroups)" if args.reads else ""
    print(f"{args.lookups} FindCoordinator lookups of unused group ids{what} in {seconds:.1f} s "
          f"({args.lookups / seconds:.0f}/s), {errors} answered other than Kafka answers")
    print(f"ZooKeeper znode_count before: {before}")
    print(f"ZooKeeper znode_count after:  {after}")
    print(f"growth: {after - before} znodes ({(after - before) * 1000 / args.lookups:.1f} per 1,000 lookups)")
    print(f"logs in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
