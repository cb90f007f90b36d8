"""A librdkafka consumer (confluent-kafka) printing what Kafka's VerifiableConsumer prints.

Run as a script (its own process, so a test can kill it with SIGKILL):
``python rdkafka_verifiable.py --bootstrap-server B --topic T --group-id G
[--group-protocol classic|consumer] [--group-instance-id I]
[--session-timeout MS] [--assignment-strategy range|roundrobin|cooperative-sticky]
[--group-remote-assignor uniform|range] [--reset-policy earliest|latest]
[--property key=value ...]``.

One JSON object a line on stdout, in the shape of
``org.apache.kafka.tools.VerifiableConsumer`` (``name`` and ``timestamp``,
wall-clock milliseconds, in every event): ``startup_complete``,
``partitions_assigned`` / ``partitions_revoked`` (``partitions: [{topic,
partition}]``: what the callback was given; ``partitions_lost`` for
librdkafka's ``on_lost``, which the Java tool shows as a revocation),
``records_consumed`` (``count`` and one ``{topic, partition, count,
minOffset, maxOffset}`` a partition of the batch), ``offsets_committed``
(``offsets: [{topic, partition, offset[, error]}]``, ``success``,
``error``), ``shutdown_complete``. As the Java tool it consumes a batch,
prints it, then commits its offsets synchronously. SIGTERM or SIGINT: it
stops after the batch in hand, closes (leaving the group; the revocation
callback runs) and exits 0. librdkafka errors go to stderr.

Only confluent-kafka and the standard library: it runs under any Python
with confluent-kafka installed.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

BATCH = 500
POLL_S = 0.2


def emit(name: str, **fields) -> None:
    sys.stdout.write(json.dumps({"name": name, "timestamp": int(time.time() * 1000), **fields}) + "\n")
    sys.stdout.flush()


def _parts(partitions) -> list[dict]:
    return [{"topic": p.topic, "partition": p.partition} for p in partitions]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group-id", required=True)
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    parser.add_argument("--group-instance-id")
    parser.add_argument("--session-timeout", type=int, help="session.timeout.ms (classic only)")
    parser.add_argument("--assignment-strategy", help="partition.assignment.strategy (classic only)")
    parser.add_argument("--group-remote-assignor", help="group.remote.assignor (consumer only)")
    parser.add_argument("--reset-policy", choices=("earliest", "latest"), default="earliest")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="another librdkafka setting (repeatable)")
    return parser.parse_args(argv)


def settings(args: argparse.Namespace) -> dict:
    config = {"bootstrap.servers": args.bootstrap_server, "group.id": args.group_id,
              "group.protocol": args.group_protocol, "enable.auto.commit": False,
              "auto.offset.reset": args.reset_policy, "client.id": f"rdkafka-{args.group_instance_id or 'dynamic'}"}
    if args.group_instance_id:
        config["group.instance.id"] = args.group_instance_id
    if args.group_protocol == "classic":
        if args.session_timeout:
            config["session.timeout.ms"] = args.session_timeout
        if args.assignment_strategy:
            config["partition.assignment.strategy"] = args.assignment_strategy
    elif args.group_remote_assignor:
        config["group.remote.assignor"] = args.group_remote_assignor
    for item in args.property:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--property {item!r}: expected KEY=VALUE")
        config[key] = value
    return config


def main(argv=None) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    args = parse_args(argv)
    stopping = threading.Event()

    def stop(signum, frame) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    try:
        consumer = Consumer(settings(args))
    except KafkaException as exc:  # a setting librdkafka refuses: say which, no traceback
        print(f"rdkafka_verifiable: {exc.args[0].str() if exc.args else exc}", file=sys.stderr)
        return 2
    consumer.subscribe([args.topic],
                       on_assign=lambda c, parts: emit("partitions_assigned", partitions=_parts(parts)),
                       on_revoke=lambda c, parts: emit("partitions_revoked", partitions=_parts(parts)),
                       on_lost=lambda c, parts: emit("partitions_lost", partitions=_parts(parts)))
    emit("startup_complete")
    try:
        while not stopping.is_set():
            messages = consumer.consume(num_messages=BATCH, timeout=POLL_S)
            batch: dict[tuple[str, int], list[int]] = {}
            for m in messages:
                if m.error():
                    print(f"consume error: {m.error()}", file=sys.stderr, flush=True)
                    continue
                batch.setdefault((m.topic(), m.partition()), []).append(m.offset())
            if not batch:
                continue
            emit("records_consumed", count=sum(map(len, batch.values())), partitions=[
                {"topic": t, "partition": p, "count": len(o), "minOffset": min(o), "maxOffset": max(o)}
                for (t, p), o in batch.items()])
            offsets = [TopicPartition(t, p, max(o) + 1) for (t, p), o in batch.items()]
            try:
                answer = consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                emit("offsets_committed", success=False, error=str(exc.args[0] if exc.args else exc),
                     offsets=[{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset} for tp in offsets])
                continue
            results = [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset,
                        **({"error": str(tp.error)} if tp.error is not None else {})} for tp in answer]
            failed = [r for r in results if "error" in r]
            emit("offsets_committed", success=not failed, offsets=results,
                 **({"error": failed[0]["error"]} if failed else {}))
    finally:
        consumer.close()
        emit("shutdown_complete")
    return 0


if __name__ == "__main__":
    sys.exit(main())
