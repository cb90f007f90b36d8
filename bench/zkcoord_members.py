"""N zkcoord consumers (``zkcoord.client.Consumer``) of one group in one
process, for ``bench_legacy.py``: the zkcoord side of the legacy comparison.

Prints what each member sees as JSON lines, in the format of the legacy
driver (``zkcoord/local/legacy_consumer/LegacyGroup.java``), plus the
generation:

    {"ts": ms, "member": "m1", "event": "joining"}
    {"ts": ms, "member": "m1", "event": "claim", "partitions": [0, 3], "generation": 4}
    {"ts": ms, "member": "m1", "event": "release", "partitions": [0, 3]}
    {"ts": ms, "member": "m1", "event": "error", "error": "..."}

SIGTERM or SIGINT closes every consumer (LeaveGroup) and exits.

``--trace`` also logs, on stderr with millisecond wall-clock times, the steps
of each join (connections, FindCoordinator, JoinGroup, SyncGroup, the
heartbeat that learns of a rebalance): what ``bench_legacy.py
--zkcoord-trace`` uses to show where a join's settle time goes.

``--baseline-client`` runs the members without the thin consumer's two
join-latency changes (the rejoin wake-up of ``zkcoord/client/coordinator.py``,
fix 4, and the first coordinator lookup overlapping the bootstrap in
``zkcoord/client/network.py``), i.e. as kafka-python 3.0.12 behaves there: for
comparing the client before and after them on one machine and daemon
(``bench_legacy.py --zkcoord-baseline-client``).

``--rebalance-notice off`` runs them without the rebalance notice
(``zkcoord/client/notice.py``): old members then hear of a rebalance from
their next heartbeat, as Kafka's consumers do (``bench_legacy.py
--zkcoord-notice off``).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time

from zkcoord.client import Consumer, ConsumerConfig, RebalanceListener

_print_lock = threading.Lock()
trace = logging.getLogger("bench.members")


def emit(member: str, event: str, **data) -> None:
    line = json.dumps({"ts": int(time.time() * 1000), "member": member, "event": event, **data})
    with _print_lock:
        print(line, flush=True)
    trace.debug("%s", line)


class Logger(RebalanceListener):
    def __init__(self, member: str):
        self.member = member
        self.consumer: Consumer | None = None

    def on_revoked(self, partitions) -> None:
        emit(self.member, "release", partitions=sorted(tp.partition for tp in partitions))

    def on_assigned(self, partitions) -> None:
        emit(self.member, "claim", partitions=sorted(tp.partition for tp in partitions),
             generation=self.consumer.membership().generation_id)


def start_tracing() -> None:
    """kafka-python's and the thin consumer's join steps on stderr, with
    wall-clock milliseconds (comparable with the JSON lines' ``ts``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(created).3f %(threadName)s %(name)s %(message)s"))
    logging.getLogger().addHandler(handler)
    for name in ("kafka.coordinator.consumer", "kafka.coordinator.heartbeat", "kafka.net", "zkcoord.client"):
        logging.getLogger(name).setLevel(logging.INFO)
    logging.getLogger("kafka.coordinator").setLevel(logging.DEBUG)  # JoinGroup/SyncGroup sent and answered
    trace.setLevel(logging.DEBUG)


def use_baseline_client() -> None:
    """kafka-python's own fetch wait and bootstrap (no rejoin wake-up, no
    overlapped first lookup), in this process only."""
    from kafka.consumer.fetcher import Fetcher
    from kafka.net.manager import KafkaConnectionManager

    from zkcoord.client import coordinator, network

    coordinator.ZkcoordFetcher.fetch_records = Fetcher.fetch_records
    network.ZkcoordConnectionManager.bootstrap_async = KafkaConnectionManager.bootstrap_async


def run_member(member: str, config: ConsumerConfig, topic: str, stop: threading.Event) -> None:
    try:
        emit(member, "joining")
        listener = Logger(member)
        with Consumer(config) as consumer:
            trace.debug("%s: consumer started", member)
            listener.consumer = consumer
            consumer.subscribe([topic], listener=listener)
            trace.debug("%s: subscribed", member)
            while not stop.is_set():
                consumer.poll(timeout_ms=100)
    except Exception as exc:  # reported, as the legacy driver does
        emit(member, "error", error=repr(exc))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coordinators", required=True)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--members", type=int, default=1)
    parser.add_argument("--prefix", default="m")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=2000)
    parser.add_argument("--trace", action="store_true", help="log each join's steps on stderr")
    parser.add_argument("--baseline-client", action="store_true",
                        help="without the client's rejoin wake-up and overlapped first lookup (A/B)")
    parser.add_argument("--rebalance-notice", choices=["on", "off"], default="on",
                        help="hear of rebalances through the daemon's held heartbeats (default on)")
    args = parser.parse_args()
    if args.trace:
        start_tracing()
    if args.baseline_client:
        use_baseline_client()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threads = []
    for i in range(1, args.members + 1):
        config = ConsumerConfig(coordinators=args.coordinators, bootstrap_servers=args.bootstrap_servers,
                                group_id=args.group, client_id=f"{args.prefix}{i}", enable_auto_commit=False,
                                session_timeout_ms=args.session_timeout_ms,
                                heartbeat_interval_ms=args.heartbeat_interval_ms,
                                rebalance_notice=args.rebalance_notice == "on")
        thread = threading.Thread(target=run_member, args=(f"{args.prefix}{i}", config, args.topic, stop),
                                  daemon=True)
        thread.start()
        threads.append(thread)
    while not stop.is_set():
        stop.wait(0.2)
    for thread in threads:
        thread.join(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
