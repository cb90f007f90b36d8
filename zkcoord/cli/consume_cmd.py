"""``zkcoord consume``: a group member on the command line, printing the
records it consumes (topic, partition, offset, key, value) as text or JSON
lines, through :class:`zkcoord.client.Consumer`.

It commits what it printed after every batch, so ``--max-records N`` stops
having committed exactly the records it printed. Ctrl-C and SIGTERM stop the
loop at the next poll; then it commits and leaves the group (LeaveGroup, or
with ``--group-protocol consumer`` a heartbeat with epoch -1; -2 for a
static member, whose partitions wait for its return), so the group
rebalances at once instead of after the session timeout.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
from contextlib import contextmanager

import click

from zkcoord.cli.kafka_login import kafka_login_options
from zkcoord.cli.render import SCHEMAS
from zkcoord.config import build_config
from zkcoord.errors import UsageError

POLL_MS = 200


def _options(func):
    specs = [
        ("--coordinators", "coordinators", str, "zkcoord daemons HOST:PORT[,HOST:PORT...] (ZKCOORD_COORDINATORS)."),
        ("--bootstrap-servers", "bootstrap_servers", str, "Kafka brokers HOST:PORT[,...] (ZKCOORD_BOOTSTRAP_SERVERS)."),
        ("--group", "group_id", str, "Consumer group id (ZKCOORD_GROUP_ID). Required."),
        ("--client-id", "client_id", str, "Client id shown in the group [default: zkcoord-consumer]."),
        ("--group-instance-id", "group_instance_id", str, "Static member id: restarts within the session "
                                                          "timeout keep the partitions [default: dynamic]."),
        ("--assignment-strategy", "assignment_strategy", str, "range, roundrobin, sticky or cooperative-sticky "
                                                              "(comma-separated preference) [default: range]."),
        ("--session-timeout-ms", "session_timeout_ms", int, "Session timeout [default: 45000]."),
        ("--heartbeat-interval-ms", "heartbeat_interval_ms", int, "Heartbeat interval [default: 3000]."),
        ("--max-poll-interval-ms", "max_poll_interval_ms", int, "Most time between polls [default: 300000]."),
        ("--rebalance-timeout-ms", "rebalance_timeout_ms", int, "Rebalance timeout [default: max poll interval]."),
        ("--group-protocol", "group_protocol", str, "classic (JoinGroup/SyncGroup) or consumer (KIP-848's "
                                                    "consumer group protocol) [default: classic]."),
        ("--group-remote-assignor", "group_remote_assignor", str, "With --group-protocol consumer: the "
                                                                  "coordinator's assignor (uniform, range) "
                                                                  "[default: the daemons' first]."),
    ]
    for flag, name, kind, help_text in reversed(specs):
        func = click.option(flag, name, type=kind, default=None, help=help_text)(func)
    # the old name of --coordinators, kept working for scripts
    return click.option("--zkcoord", "coordinators_old_flag", type=str, default=None, hidden=True)(func)


@click.command()
@click.argument("topics", nargs=-1, required=True)
@_options
@kafka_login_options
@click.option("--from-beginning", is_flag=True, help="Without a committed offset, start at the oldest record "
                                                     "(else only new records).")
@click.option("--max-records", type=click.IntRange(min=1), default=None, help="Stop after this many records.")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: one line per record; json: one JSON object per line (with \"schema\").")
def consume(topics, from_beginning, max_records, output, **flags):
    """Consume TOPIC... as a member of --group, coordinated by zkcoord.

    Prints each record's topic, partition, offset, key and value. Keys and
    values are shown as UTF-8 text; in JSON, bytes that are not UTF-8 come
    as base64 under "key_base64" / "value_base64". --command-config logs in
    to the brokers and to the daemons.
    """
    from zkcoord.client import CommitFailedError, Consumer, ConsumerConfig

    old = flags.pop("coordinators_old_flag")
    if old is not None:
        if flags["coordinators"] is not None and flags["coordinators"] != old:
            raise UsageError("--zkcoord is the old name of --coordinators: give the daemons once")
        flags["coordinators"] = old
    flags["auto_offset_reset"] = "earliest" if from_beginning else "latest"
    flags["enable_auto_commit"] = False
    flags["security"] = flags.pop("kafka_security")
    environ = {k: v for k, v in os.environ.items() if k != "ZKCOORD_CONFIG"}  # that file is the daemon's
    config = build_config(flags, cls=ConsumerConfig, environ=environ)
    printed = 0
    with _stop_on_signals() as stopping:
        consumer = Consumer(config).start()
        try:
            consumer.subscribe(list(topics))
            while not stopping.is_set() and (max_records is None or printed < max_records):
                wanted = None if max_records is None else max_records - printed
                records = consumer.poll(timeout_ms=POLL_MS, max_records=wanted)
                for record in records:
                    click.echo(_render(record, output))
                printed += len(records)
                if records:
                    try:
                        consumer.commit()
                    except CommitFailedError as exc:  # the next owner gets these records again
                        click.echo(f"warning: {exc}", err=True)
        finally:
            consumer.close()


def _render(record, output: str) -> str:
    if output == "json":
        row = {"schema": SCHEMAS["consume"], "topic": record.topic, "partition": record.partition, "offset": record.offset,
               "timestamp": record.timestamp}
        for name, raw in (("key", record.key), ("value", record.value)):
            if raw is None:
                row[name] = None
                continue
            try:
                row[name] = raw.decode("utf-8")
            except UnicodeDecodeError:
                row[f"{name}_base64"] = base64.b64encode(raw).decode("ascii")
        return json.dumps(row, ensure_ascii=False)
    key = "-" if record.key is None else record.key.decode("utf-8", "backslashreplace")
    value = "" if record.value is None else record.value.decode("utf-8", "backslashreplace")
    return f"{record.topic} {record.partition} {record.offset} {key} {value}"


@contextmanager
def _stop_on_signals():
    """An event set by SIGINT or SIGTERM (main thread only; elsewhere, as
    under a test runner's thread, signals keep their handlers)."""
    stopping = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stopping
        return
    previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopping
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
