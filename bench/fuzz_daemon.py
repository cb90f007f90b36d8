"""Fuzz a `zkcoord run` daemon and its gateway with generated Kafka frames.

Run by hand (from the repository root)::

    python bench/fuzz_daemon.py --frames 100000 --gateway-frames 20000 --seed 16

It starts a ``zkcoord local`` sandbox (ZooKeeper + one Kafka broker) in a
temporary directory unless ``--zookeeper`` and ``--bootstrap-servers`` name
running ones, then one daemon (``zkcoord run`` with ``--gateway-listen``) in
a fresh chroot. A canary member joins a real group on its own connection and
heartbeats every 100 ms while the frames (``tests/support/fuzz_frames.py``:
kafka-python's request classes for every API and version the daemon serves,
unknown keys and versions, then mutated) go to the daemon's port and then to
the gateway's. It prints the frames sent, the outcomes (answered with error
0 / an error code, closed by the daemon, ...), the hangs, whether the daemon
is still up, the tracebacks in its log, and the canary's failures and
heartbeat latency p99. Exit status 1 when anything went wrong.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kazoo.client import KazooClient  # noqa: E402

from tests.support.daemons import DaemonFleet  # noqa: E402
from tests.support.fuzz_frames import Canary, Sender, canary_group, run_fuzz, target_specs  # noqa: E402
from zkcoord.local.sandbox import Sandbox  # noqa: E402


def report(name: str, outcomes, seconds: float) -> None:
    print(f"\n{name}: {outcomes.sent} frames in {seconds:.0f} s ({outcomes.sent / max(seconds, 1e-9):.0f}/s)")
    for outcome, count in outcomes.by_outcome.most_common():
        print(f"  {count:8d}  {outcome}")
    if outcomes.refused_connects:
        print(f"  refused connection attempts: {outcomes.refused_connects}")
    for label in outcomes.hangs[:20]:
        print(f"  HANG: {label}")


def fuzz(args, zookeeper: str, bootstrap: str, workdir: Path) -> int:
    chroot = f"/fuzz-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=zookeeper, timeout=10)
    root.start(timeout=30)
    root.ensure_path(chroot)
    root.stop()
    root.close()
    zk = KazooClient(hosts=zookeeper + chroot, timeout=10)
    zk.start(timeout=30)
    problems = 0
    try:
        with DaemonFleet(zookeeper + chroot, zk, workdir / "daemons", options=dict(
                group_initial_rebalance_delay_ms=0, bootstrap_servers=bootstrap,
                gateway_listen="127.0.0.1:0")) as fleet:
            daemon = fleet.start(1)
            canary = Canary(daemon.host, daemon.port, canary_group())
            canary.start_member()
            try:
                for name, (host, port), count, seed, gateway in (
                        ("daemon", daemon.address, args.frames, args.seed, False),
                        ("gateway", daemon.gateway, args.gateway_frames, args.seed + 1, True)):
                    if not count:
                        continue
                    sender = Sender(host, port)
                    started = time.monotonic()
                    try:
                        outcomes = run_fuzz(sender, count, seed, target_specs(gateway))
                    except ConnectionError as exc:
                        print(f"{name}: CRASH: {exc}")
                        problems += 1
                        outcomes = sender.outcomes
                    sender.close()
                    report(name, outcomes, time.monotonic() - started)
                    problems += len(outcomes.hangs)
            finally:
                canary.stop()
            alive = daemon.alive()
            tracebacks = daemon.log_path.read_text().count("Traceback")
            p99 = canary.p99_ms()
            print(f"\ndaemon still running: {alive}; tracebacks in its log: {tracebacks} ({daemon.log_path})")
            print(f"canary: {len(canary.latencies_s)} heartbeats, {len(canary.failures)} failures, "
                  f"latency p99 {p99:.1f} ms" if p99 is not None else "canary: no heartbeat answered")
            for failure in canary.failures[:10]:
                print(f"  canary failure: {failure}")
            problems += (not alive) + tracebacks + len(canary.failures)
    finally:
        zk.stop()
        zk.close()
    print("\nRESULT:", "no crash, no hang, canary served" if not problems else f"{problems} problem(s)")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=100_000, help="frames sent to the daemon's port")
    parser.add_argument("--gateway-frames", type=int, default=20_000, help="frames sent to the gateway's port")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--zookeeper", default="", help="HOST:PORT of a running ZooKeeper (else a sandbox)")
    parser.add_argument("--bootstrap-servers", default="", help="a running Kafka broker (with --zookeeper)")
    parser.add_argument("--workdir", default="", help="where logs go (default: a temporary directory)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="zkcoord-fuzz-"))
    print(f"logs in {workdir}")
    if args.zookeeper and args.bootstrap_servers:
        return fuzz(args, args.zookeeper, args.bootstrap_servers, workdir)
    sandbox = Sandbox(workdir / "sandbox", log=print)
    try:
        state, _ = sandbox.up(brokers=1)
        return fuzz(args, sandbox.zookeeper_address(state), sandbox.bootstrap_servers(state), workdir)
    finally:
        sandbox.down()


if __name__ == "__main__":
    sys.exit(main())
