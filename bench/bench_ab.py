"""Two checkouts' daemons, A and B, alternately on one sandbox: what a change costs or saves.

Run by hand (``bench/README.md``, "A/B: one change, alternating runs")::

    .venv/bin/python bench/bench_ab.py --a /tmp/base --b . --rounds 4
    .venv/bin/python bench/bench_ab.py --a /tmp/base --b . --only commit --commit-partitions 5

On a machine shared with other work, a figure of one run says little; two
checkouts measured one after the other, alternating, several times, on the
same sandbox, say what the change does. Each round starts each side's daemon
(``<checkout>/zkcoord`` first on ``PYTHONPATH``, the venv's interpreter) in a
fresh ZooKeeper chroot, forms ``--groups`` Stable groups of ``--members``
with ``bench_coordinator``'s client, runs its load scenarios (the same code
as ``bench_coordinator.py``: heartbeats back to back, commits back to back),
and stops the daemon. It prints per round and side: rate, p50, p99, the
daemon's CPU per request (the figure least disturbed by other work), the
commits per ZooKeeper multi; then the medians and B / A.

The daemon has no ``--bootstrap-servers`` (no topic checks, as
``bench_coordinator.py`` without its gateway target). ``--profile py-spy``
samples each load run of each side (``pyspy_report.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_coordinator as bc  # noqa: E402
from bench_env import DAEMON_NODE_ID, sandbox_up, zkcoord_cli  # noqa: E402
from group_client import KafkaConnection, common_versions, served_versions  # noqa: E402
from zkcoord.local.procs import free_port  # noqa: E402


@dataclass
class Side:
    """What ``bench_coordinator.load`` needs of an environment, for one side's daemon."""

    name: str
    checkout: Path
    root: Path
    zk_port: int
    namespace: str = ""
    workdir: Path = Path(".")
    pids: dict = field(default_factory=dict)
    daemon: subprocess.Popen | None = None
    make_chroot: object = None
    address: tuple[str, int] = ("127.0.0.1", 0)

    def start(self, zookeeper: str, round_no: int, extra: list[str]) -> None:
        self.workdir = self.root / f"{self.name}-{round_no}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.namespace = f"ab-{self.name}-{os.getpid()}-{round_no}"
        self.make_chroot("/" + self.namespace)
        port = free_port()
        self.address = ("127.0.0.1", port)
        env = dict(os.environ, PYTHONPATH=str(self.checkout))
        command = [sys.executable, "-m", "zkcoord", "run", "--zookeeper", f"{zookeeper}/{self.namespace}",
                   "--listen", f"127.0.0.1:{port}", "--node-id", str(DAEMON_NODE_ID),
                   "--group-initial-rebalance-delay-ms", "0", "--metrics-listen", f"127.0.0.1:{free_port()}",
                   *extra]  # with metrics, as deployed
        with open(self.workdir / f"zkcoord-{self.name}.log", "ab") as log:
            self.daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                           cwd=str(self.checkout), start_new_session=True)
        self.pids = {"zkcoord": self.daemon.pid}

    async def wait(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise bc.BenchError(f"daemon {self.name} exited; see {self.workdir}/zkcoord-{self.name}.log")
            try:
                conn = await KafkaConnection.open(*self.address, "zkcoord-ab")
                try:
                    await asyncio.wait_for(served_versions(conn), 10)
                    return
                finally:
                    conn.close()
            except (OSError, ConnectionError, asyncio.TimeoutError):
                await asyncio.sleep(0.2)
        raise bc.BenchError(f"daemon {self.name} did not answer within {timeout_s:g} s")

    def stop(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.terminate()
            try:
                self.daemon.wait(30)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        self.daemon = None


async def one_round(side: Side, zookeeper: str, round_no: int, settings: bc.Settings,
                    extra: list[str]) -> list[bc.LoadResult]:
    side.start(zookeeper, round_no, extra)
    try:
        await side.wait()
        target = bc.Target("zkcoord", side.address)  # the process bench_coordinator meters
        conn = await KafkaConnection.open(*side.address, "zkcoord-ab")
        try:
            versions = common_versions(await served_versions(conn))
        finally:
            conn.close()
        groups = [f"ab-{i}" for i in range(settings.groups)]
        per_group = settings.members // settings.groups
        members = await bc.open_members(target, groups, per_group, bc.COMMIT_TOPIC,
                                        per_group * settings.commit_partitions, versions, settings)
        results = []
        try:
            stop = asyncio.Event()
            tasks = bc.maintain(members, stop, settings)
            await bc.wait_stable(members, tasks, quiet_s=5 * settings.interval_s)
            stop.set()
            await asyncio.gather(*tasks)
            if "heartbeat" in settings.only:
                results.append(await bc.load("heartbeat max", target, members, side, settings))
            if "commit" in settings.only:
                results.append(await bc.load("commit max", target, members, side, settings))
        finally:
            await bc.close_members(members)
        return results
    finally:
        side.stop()


def _row(round_no: int, side: str, r: bc.LoadResult) -> str:
    per_multi = r.requests / r.zk_txns if r.zk_txns else float("nan")
    return (f"{round_no:>5}  {side:<4} {r.scenario:<14} {r.rate:>9,.0f} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} "
            f"{r.server_us_per_request:>8.1f} {per_multi:>8.1f} {r.cpu.get('zkcoord', 0):>6.2f} "
            f"{r.cpu.get('other', 0):>6.2f}")


async def main_async(args, settings: bc.Settings, workdir: Path) -> int:
    env = sandbox_up(workdir / "sandbox")
    zookeeper = env["ZKCOORD_ZOOKEEPER"]
    zk_port = int(zookeeper.rsplit(":", 1)[1])
    sides = [Side("A", Path(args.a).resolve(), workdir, zk_port), Side("B", Path(args.b).resolve(), workdir, zk_port)]
    extra = list(args.daemon_arg or [])
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=15)
    for side in sides:
        side.make_chroot = zk.ensure_path
    results: list[tuple[int, str, bc.LoadResult]] = []
    print(f"A = {sides[0].checkout}\nB = {sides[1].checkout}\n"
          f"round  side scenario           req/s   p50 ms   p99 ms  us/req  per multi  cores  other", flush=True)
    for round_no in range(1, args.rounds + 1):
        order = sides if round_no % 2 else sides[::-1]
        for side in order:
            for r in await one_round(side, zookeeper, round_no, settings, extra):
                results.append((round_no, side.name, r))
                print(_row(round_no, side.name, r), f"load {os.getloadavg()[0]:.1f}", flush=True)
    print("\nmedians (B / A: rate above 1 and us/req below 1 favour B)")
    for scenario in dict.fromkeys(r.scenario for _, _, r in results):
        of = {s.name: [r for _, n, r in results if n == s.name and r.scenario == scenario] for s in sides}
        med = {n: (statistics.median(x.rate for x in rs), statistics.median(x.server_us_per_request for x in rs),
                   statistics.median(x.p99_ms for x in rs)) for n, rs in of.items()}
        a, b = med["A"], med["B"]
        print(f"  {scenario:<14} rate {a[0]:>9,.0f} -> {b[0]:>9,.0f} ({b[0] / a[0]:.2f}x)   us/req {a[1]:.1f} -> "
              f"{b[1]:.1f} ({b[1] / a[1]:.2f}x)   p99 {a[2]:.1f} -> {b[2]:.1f} ms")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="checkout A (the one before)")
    parser.add_argument("--b", required=True, help="checkout B (the one after)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--only", default="heartbeat,commit")
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--commit-partitions", type=int, default=1)
    parser.add_argument("--duration-s", type=float, default=8.0)
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--profile", choices=["", "py-spy"], default="")
    parser.add_argument("--daemon-arg", action="append", help="one more `zkcoord run` argument (repeatable)")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args(argv)
    settings = replace(bc.Settings(), members=args.members, groups=args.groups, duration_s=args.duration_s,
                       warmup_s=args.warmup_s, commit_partitions=args.commit_partitions,
                       only=tuple(s for s in args.only.split(",") if s), targets=("zkcoord",), profile=args.profile)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="zkcoord-ab-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"workdir {workdir}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    try:
        return asyncio.run(main_async(args, settings, workdir))
    except bc.BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if (workdir / "sandbox" / "sandbox.json").exists():
            zkcoord_cli("local", "down", "--state-dir", str(workdir / "sandbox"), check=False)


if __name__ == "__main__":
    sys.exit(main())
