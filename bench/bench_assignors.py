"""How long one assignment takes: zkcoord's ``uniform`` and ``range``
(:mod:`zkcoord.core.assignors`) against Kafka 4.4.0's own classes, in one run.

For each assignor, group shape and size (members x partitions over
``--topics`` topics), the same group goes to both sides:

* Python: the assignor called ``--repeat`` times after one warm-up call,
  in this process; ``record ms`` is computing every member's record order
  on top (what the coordinator needs to write Kafka's records);
* Java: Kafka's ``UniformAssignor`` / ``RangeAssignor`` in one JVM
  (``tests/support/java/AssignorHarness.java``), timed inside the JVM with
  ``System.nanoTime`` around ``assign`` only, ``--java-iterations`` times
  after ``--java-warmup`` untimed calls (JIT warm-up).

Both sides' results are compared (``equal`` column). Each side is
reported in thread CPU time (less disturbed by other work on the machine)
and wall time; medians; the ratios are Python over Java (above 1: Python
slower). Run by hand, never by the tests::

    .venv/bin/python bench/bench_assignors.py
    .venv/bin/python bench/bench_assignors.py --members 1000 --partitions 10000 --shapes join
    .venv/bin/python bench/bench_assignors.py --help
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support.kafka_assignors

from tests.support import kafka_assignors as kafka  # noqa: E402
from zkcoord.core.assignors import ASSIGNORS, GroupSpec, MemberSpec, TopicSpec  # noqa: E402

SHAPES = {
    "fresh": "every member subscribes to every topic; nobody holds anything (a new group)",
    "join": "the same group after its assignment, plus one member (the usual rebalance; uniform is sticky)",
    "hetero": "every member subscribes to half the topics, chosen at random; nobody holds anything",
}


def _id(rng: random.Random) -> str:
    return base64.urlsafe_b64encode(rng.getrandbits(128).to_bytes(16, "big")).decode().rstrip("=")


def build_group(assignor: str, shape: str, members: int, partitions: int, topics: int, seed: int) -> GroupSpec:
    rng = random.Random(f"{seed}/{shape}/{members}/{partitions}")
    per_topic, extra = divmod(partitions, topics)
    specs = {f"topic-{i}": TopicSpec(_id(rng), per_topic + (1 if i < extra else 0)) for i in range(topics)}
    names = list(specs)
    member_ids = [_id(rng) for _ in range(members)]
    if shape == "hetero":
        subscriptions = {m: tuple(rng.sample(names, max(1, topics // 2))) for m in member_ids}
    else:
        subscriptions = {m: tuple(names) for m in member_ids}
    group = GroupSpec({m: MemberSpec(subscriptions[m]) for m in member_ids}, specs)
    if shape != "join":
        return group
    result = ASSIGNORS[assignor](group)
    current = {m: MemberSpec(subscriptions[m], dict(result.record_order(m))) for m in member_ids}
    current[_id(rng)] = MemberSpec(tuple(names))
    return GroupSpec(current, specs)


def time_python(assignor: str, group: GroupSpec, repeat: int) -> dict[str, list[float]]:
    """Wall and thread CPU milliseconds of each run, of the assignment and
    of its record orders; and the last result."""
    fn = ASSIGNORS[assignor]
    fn(group)  # warm-up: caches of hashes
    out: dict = {"python_ms": [], "python_cpu_ms": [], "record_ms": [], "record_cpu_ms": []}
    for _ in range(repeat):
        cpu, start = time.thread_time(), time.perf_counter()
        result = fn(group)
        cpu_middle, middle = time.thread_time(), time.perf_counter()
        for member_id in result:
            result.record_order(member_id)
        out["python_ms"].append((middle - start) * 1000)
        out["python_cpu_ms"].append((cpu_middle - cpu) * 1000)
        out["record_ms"].append((time.perf_counter() - middle) * 1000)
        out["record_cpu_ms"].append((time.thread_time() - cpu_middle) * 1000)
        out["result"] = result
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", default="100,1000", help="member counts (default 100,1000)")
    parser.add_argument("--partitions", default="1000,10000", help="partition counts (default 1000,10000)")
    parser.add_argument("--topics", type=int, default=10, help="topics the partitions are spread over (10)")
    parser.add_argument("--assignors", default="uniform,range")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--repeat", type=int, default=7, help="timed Python runs per case (7)")
    parser.add_argument("--java-warmup", type=int, default=30, help="untimed JVM runs per case first (30)")
    parser.add_argument("--java-iterations", type=int, default=15, help="timed JVM runs per case (15)")
    parser.add_argument("--jdk", type=int, default=17, choices=(17, 25), help="the JVM for Kafka's side (17)")
    parser.add_argument("--seed", type=int, default=848)
    parser.add_argument("--json", help="write every measurement to this file")
    args = parser.parse_args(argv)

    reason = kafka.unavailable()
    java = kafka.java_for(args.jdk)
    if reason or java is None:
        print(f"Kafka's side cannot run: {reason or f'no JDK {args.jdk}'}", file=sys.stderr)
        return 2
    cases = [(a, s, m, p) for a in args.assignors.split(",") for s in args.shapes.split(",")
             for m in map(int, args.members.split(",")) for p in map(int, args.partitions.split(","))]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; JDK {args.jdk}; "
          f"Python {sys.version.split()[0]}")
    for shape in args.shapes.split(","):
        print(f"  {shape}: {SHAPES[shape]}")
    rows, java_cases, groups = [], [], []
    for i, (assignor, shape, members, partitions) in enumerate(cases):
        group = build_group(assignor, shape, members, partitions, args.topics, args.seed)
        group = GroupSpec(group.members, group.topics, group.subscription_type, args.jdk)
        groups.append(group)
        timed = time_python(assignor, group, args.repeat)
        timed["ours"] = kafka.python_result(timed.pop("result"))
        rows.append({"assignor": assignor, "shape": shape, "members": members, "partitions": partitions, **timed})
        java_cases.append(kafka.case_json(str(i), assignor, group,
                                          bench={"warmup": args.java_warmup, "iterations": args.java_iterations}))
    answers = kafka.KafkaAssignors(java, jvm_args=("-Xms512m", "-Xmx2g")).run(java_cases, timeout_s=3600)
    print(f"\n{'':36} {'---- CPU ms (median) ----':>34}   {'---- wall ms (median) ----':>34}")
    print(f"{'assignor':8} {'shape':6} {'members':>7} {'partitions':>10} {'python':>8} {'+record':>8} {'java':>8} "
          f"{'py/java':>7}   {'python':>8} {'+record':>8} {'java':>8} {'py/java':>7} {'equal':>5}")
    for row, answer in zip(rows, answers):
        row["java_ms"] = [n / 1e6 for n in answer.get("nanos", [])]
        row["java_cpu_ms"] = [n / 1e6 for n in answer.get("cpu_nanos", [])]
        row["equal"] = "error" not in answer and kafka.java_result(answer) == row.pop("ours")
        m = {k: statistics.median(v) for k, v in row.items() if k.endswith("_ms") and v}
        print(f"{row['assignor']:8} {row['shape']:6} {row['members']:>7,} {row['partitions']:>10,} "
              f"{m['python_cpu_ms']:>8.2f} {m['record_cpu_ms']:>8.2f} {m['java_cpu_ms']:>8.3f} "
              f"{m['python_cpu_ms'] / m['java_cpu_ms']:>7.1f}   {m['python_ms']:>8.2f} {m['record_ms']:>8.2f} "
              f"{m['java_ms']:>8.3f} {m['python_ms'] / m['java_ms']:>7.1f} {'yes' if row['equal'] else 'NO':>5}")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
