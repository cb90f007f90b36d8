"""One consumer of a fault run, as its own process (so it can be killed -9).

``python -X zkcoord-test-process=... -m tests.faults.worker --name c0 --log
FILE --coordinators ... --bootstrap ... --group G --topic T``

A :class:`zkcoord.client.Consumer` of group G polls T, and writes JSON lines
to FILE (flushed per line; the checker, ``tests/faults/checker.py``, reads
them): ``assigned`` (member id, generation, partitions), ``records``
((partition, offset) of each record returned by ``poll()``, logged before
anything is committed), ``commit`` (the offsets, whether the commit was
acknowledged, and the member's generation read just before and after the
call, which bound the generation the request carried). It commits the
positions of its partitions at most every ``--commit-interval-ms`` after
records arrived, and in ``on_revoked``. SIGTERM: commit, leave, exit 0. With ``--stop-after-revoke FILE``, while FILE
exists the worker SIGSTOPs itself right after committing in ``on_revoked``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from zkcoord.client import Consumer, ConsumerConfig, ConsumerError, RebalanceListener
from zkcoord.errors import ZkcoordError


class EventLog:
    def __init__(self, path: str, proc: str):
        self.file = open(path, "a", buffering=1)  # one write per line
        self.proc = proc

    def write(self, ev: str, **fields) -> None:
        self.file.write(json.dumps({"ev": ev, "proc": self.proc, "pid": os.getpid(), "t": time.time(), **fields})
                        + "\n")
        self.file.flush()


class Worker(RebalanceListener):
    def __init__(self, args):
        self.args = args
        self.log = EventLog(args.log, args.name)
        self.consumer: Consumer | None = None
        self.stopping = False
        self.last_commit = 0.0

    # -- listener ----------------------------------------------------------------
    def on_assigned(self, partitions):
        m = self.consumer.membership()
        positions = {}
        for tp in partitions:  # where consuming resumes: the committed offset, unless kept from before
            try:
                positions[str(tp.partition)] = self.consumer.position(tp, timeout_ms=5000)
            except (ConsumerError, ZkcoordError) as exc:
                positions[str(tp.partition)] = repr(exc)
        self.log.write("assigned", member=m.member_id, gen=m.generation_id,
                       partitions=sorted(tp.partition for tp in partitions), positions=positions)

    def on_revoked(self, partitions):
        m = self.consumer.membership()
        self.log.write("revoked", member=m.member_id, gen=m.generation_id,
                       partitions=sorted(tp.partition for tp in partitions))
        if partitions:
            self.commit(partitions)
            self.stop_if_armed()

    def stop_if_armed(self) -> None:
        """SIGSTOP this process if ``--stop-after-revoke FILE`` exists: a
        test can then stop a member exactly after it revoked and committed,
        before its JoinGroup (and so before any later assignment)."""
        arm = self.args.stop_after_revoke
        if arm and os.path.exists(arm):
            self.log.write("self-stop")
            os.kill(os.getpid(), signal.SIGSTOP)

    def on_lost(self, partitions):
        m = self.consumer.membership()
        self.log.write("lost", member=m.member_id, gen=m.generation_id,
                       partitions=sorted(tp.partition for tp in partitions))

    # -- work ----------------------------------------------------------------------
    def commit(self, partitions=None) -> bool:
        """Commit the positions of ``partitions`` (default: the assignment);
        whether that is done (nothing to commit counts as done), so that the
        caller tries again when it failed."""
        consumer = self.consumer
        try:
            partitions = consumer.assignment() if partitions is None else partitions
            positions = {tp: consumer.position(tp, timeout_ms=5000) for tp in partitions}
        except (ConsumerError, ZkcoordError) as exc:
            self.log.write("error", doing="position", error=repr(exc))
            return False
        positions = {tp: o for tp, o in positions.items() if o is not None}
        if not positions:
            return True
        before = consumer.membership()
        t_sent = time.time()
        ok, error = True, None
        try:
            consumer.commit(positions, timeout_ms=10_000)
        except (ConsumerError, ZkcoordError) as exc:
            ok, error = False, repr(exc)
        after = consumer.membership()
        self.log.write("commit", member=before.member_id, member_after=after.member_id,
                       gen_low=min(before.generation_id, after.generation_id),
                       gen_high=max(before.generation_id, after.generation_id),
                       offsets={str(tp.partition): o for tp, o in positions.items()}, ok=ok, error=error,
                       t_sent=t_sent, t_done=time.time())
        self.last_commit = time.monotonic()
        return ok

    def run(self) -> int:
        a = self.args
        config = ConsumerConfig(coordinators=a.coordinators, bootstrap_servers=a.bootstrap, group_id=a.group,
                                client_id=a.name, session_timeout_ms=a.session_timeout_ms,
                                heartbeat_interval_ms=1000, max_poll_interval_ms=60_000,
                                rebalance_timeout_ms=a.session_timeout_ms * 2, enable_auto_commit=False,
                                auto_offset_reset="earliest", metadata_max_age_ms=5_000,
                                request_timeout_ms=15_000, reconnect_backoff_max_ms=1_000, max_poll_records=200)
        self.log.write("start")
        self.consumer = Consumer(config).start()
        self.consumer.subscribe([a.topic], listener=self)
        pending = False
        while not self.stopping:
            try:
                records = self.consumer.poll(timeout_ms=300)
            except (ConsumerError, ZkcoordError) as exc:
                self.log.write("error", doing="poll", error=repr(exc))
                time.sleep(0.2)
                continue
            if records:
                m = self.consumer.membership()
                self.log.write("records", member=m.member_id, gen=m.generation_id,
                               recs=[[r.partition, r.offset] for r in records])
                pending = True
            if pending and time.monotonic() - self.last_commit >= a.commit_interval_ms / 1000:
                # A failed commit is tried again at the next interval, records or not: the last records'
                # commit can fail in the last fault, and the run drains only once it is done.
                pending = not self.commit()
        self.commit()
        try:
            self.consumer.close(autocommit=False)
        except (ConsumerError, ZkcoordError) as exc:
            self.log.write("error", doing="close", error=repr(exc))
        self.log.write("stop")
        return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    for name in ("name", "log", "coordinators", "bootstrap", "group", "topic"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--commit-interval-ms", type=int, default=500)
    parser.add_argument("--stop-after-revoke", default="")
    worker = Worker(parser.parse_args(argv))

    def stop(*_):
        worker.stopping = True

    signal.signal(signal.SIGTERM, stop)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
