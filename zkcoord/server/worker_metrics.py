"""One ``/metrics`` and ``/health`` for all the workers of a ``zkcoord run``.

With several workers (:mod:`zkcoord.server.supervisor`) each worker serves
its own endpoint (the configured metrics port + k, :mod:`zkcoord.core.workers`)
and the supervisor serves the configured one, made of theirs:

* ``/metrics``: every worker's samples, each with a ``worker="<k>"`` label
  added (their families merged: one ``# HELP`` and ``# TYPE`` each), so
  ``sum(zkcoord_groups_owned)`` is the daemon's and ``by (worker)`` splits it.
  A worker that does not answer is left out and counted in
  ``zkcoord_workers_unreachable``; ``zkcoord_workers{state}`` says how many
  are ready, starting or down.
* ``/health``: 200 ``{"status": "ready", "groups_owned": N, "workers": [...]}``
  when every worker answers 200 (N their sum), else 503 naming each worker
  that is not ready and why.

The text is read and written as Prometheus' text format 0.0.4; nothing is
decoded beyond a sample's name and labels.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["WorkerEndpoint", "WorkersMetrics", "relabel"]

SCRAPE_TIMEOUT_S = 5.0


@dataclass
class WorkerEndpoint:
    """What the supervisor knows of one worker: its number, node id, and
    where its metrics are (None while it is not running or not ready)."""

    index: int
    node_id: int | None
    state: str  # "starting", "ready", "restarting", "stopped"
    host: str = "127.0.0.1"
    metrics_port: int | None = None


def relabel(text: str, worker: int, families: dict[str, tuple[dict, list]]) -> None:
    """Add ``worker="<worker>"`` to every sample of ``text`` and file it under
    its family in ``families`` (name -> ({"HELP": line, "TYPE": line}, samples))."""
    family = ""
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                family = parts[2]
                families.setdefault(family, ({}, []))[0].setdefault(parts[1], line)
            continue
        brace, space = line.find("{"), line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            rest = line[brace + 1:]
            labelled = f'{line[:brace + 1]}worker="{worker}"{"" if rest.startswith("}") else ","}{rest}'
        else:
            labelled = f'{line[:space]}{{worker="{worker}"}}{line[space:]}'
        families.setdefault(family, ({}, []))[1].append(labelled)


class WorkersMetrics:
    """The supervisor's metrics source for :class:`~zkcoord.server.metrics.MetricsServer`
    (coroutines: each scrape asks every worker)."""

    def __init__(self, workers: Callable[[], list[WorkerEndpoint]]) -> None:
        self._workers = workers

    async def render(self) -> bytes:
        workers = self._workers()
        answers = await asyncio.gather(*(self._get(w, "/metrics") for w in workers))
        families: dict[str, tuple[dict, list]] = {}
        unreachable = 0
        for worker, answer in zip(workers, answers):
            if answer is None or answer[0] != 200:
                unreachable += worker.metrics_port is not None
                continue
            relabel(answer[1].decode("utf-8", "replace"), worker.index, families)
        states = {"ready": 0, "starting": 0, "restarting": 0, "stopped": 0}
        for worker in workers:
            states[worker.state] = states.get(worker.state, 0) + 1
        out = ["# HELP zkcoord_workers Worker processes of this zkcoord run, by state.",
               "# TYPE zkcoord_workers gauge"]
        out += [f'zkcoord_workers{{state="{state}"}} {count}.0' for state, count in states.items()]
        out += ["# HELP zkcoord_workers_unreachable Running workers whose metrics did not answer this scrape.",
                "# TYPE zkcoord_workers_unreachable gauge", f"zkcoord_workers_unreachable {unreachable}.0"]
        for head, samples in families.values():
            out += [head[kind] for kind in ("HELP", "TYPE") if kind in head] + samples
        return ("\n".join(out) + "\n").encode()

    async def health(self) -> tuple[int, dict]:
        workers = self._workers()
        answers = await asyncio.gather(*(self._get(w, "/health") for w in workers))
        rows, problems, owned = [], [], 0
        for worker, answer in zip(workers, answers):
            row = {"worker": worker.index, "node_id": worker.node_id}
            if answer is None:
                row["status"] = worker.state if worker.metrics_port is None else "unresponsive"
            else:
                try:
                    body = json.loads(answer[1])
                except ValueError:
                    body = {"status": "unresponsive"}
                row.update(body)
                if answer[0] == 200:
                    owned += int(body.get("groups_owned", 0))
            if row.get("status") != "ready":
                problems.append(f"worker {worker.index}" + (f" (node {worker.node_id})" if worker.node_id else "")
                                + f": {row.get('reason') or row.get('status')}")
            rows.append(row)
        if problems:
            return 503, {"status": "unavailable", "reason": "; ".join(problems), "workers": rows}
        return 200, {"status": "ready", "groups_owned": owned, "workers": rows}

    @staticmethod
    async def _get(worker: WorkerEndpoint, path: str) -> tuple[int, bytes] | None:
        """(status, body) of a GET on the worker's endpoint; None when it does not answer."""
        if worker.metrics_port is None:
            return None
        try:
            async with asyncio.timeout(SCRAPE_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(worker.host, worker.metrics_port)
                try:
                    writer.write(f"GET {path} HTTP/1.0\r\nHost: {worker.host}\r\n\r\n".encode("latin-1"))
                    data = await reader.read()
                finally:
                    writer.close()
        except (OSError, TimeoutError):
            return None
        head, _, body = data.partition(b"\r\n\r\n")
        try:
            status = int(head.split(b" ", 2)[1])
        except (IndexError, ValueError):
            return None
        return status, body
