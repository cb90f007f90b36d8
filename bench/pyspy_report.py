"""Where a running daemon's CPU goes, from py-spy's samples (``--profile py-spy``).

``record(pid, seconds, path)`` starts ``py-spy record`` on a running daemon
(no restart, no profiler inside it: ``--nonblocking`` samples without
pausing it), writing py-spy's raw format (one line per distinct stack:
``thread (tid): name;frame;frame... count``). ``summary(path)`` reads it
back and prints:

- the share of samples per thread (the event loop, kazoo's connection
  thread, its completion worker); py-spy leaves out idle threads, so a
  thread's samples are the time it ran (or held the GIL waiting on a
  system call);
- the event loop's samples by *step*: each stack is put in the first
  bucket of :data:`STEPS` that one of its frames matches, walking from the
  leaf to the root, so a frame of kafka-python's decoder under
  ``decode_request`` counts as ``decode``;
- the event loop's hottest leaf functions (self time).

The buckets name a request's steps as issue 27 asks for commits: decode,
validation (the group's decision and the early checks), the ZooKeeper
multi (built, sent, its answer taken), the wait (asyncio's own work between
steps), encode. It needs py-spy in the venv (``.venv/bin/pip install
py-spy``) and permission to read another process's memory (root, or
``ptrace_scope`` 0).
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["record", "summary", "STEPS"]

# (step, pattern matched against "function (file)"), first match from the leaf wins.
STEPS: tuple[tuple[str, re.Pattern], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("decode", r"decode_request|_decode_body|decode_request_header|_has_flexible_header|_first_null"),
    ("encode", r"encode_response|cached_response|constant_response|_frame_of|_encode_frame|response_for"),
    ("zk: multi built", r"\((zkcoord/zk/offsets\.py|zkcoord/zk/batch\.py)\)|Transaction|TransactionRequest"),
    ("zk: kazoo (loop side)", r"\(kazoo/"),
    ("zk: result hop", r"\(zkcoord/zk/aio\.py\)"),
    ("validation + decision", r"\(zkcoord/core/|decide_commit|_sort_commit|_missing_partitions|commit_authorized|"
                              r"\(zkcoord/server/authorization\.py\)"),
    ("group runtime (lock, apply)", r"\(zkcoord/server/group_runtime\.py\)"),
    ("offset handlers", r"\(zkcoord/server/(apis|group_offsets|offset_storage|dual_commit|manager)\.py\)"),
    ("transport (read, write)", r"\(zkcoord/server/transport\.py\)|\(zkcoord/wire/"),
    ("metrics", r"\(zkcoord/server/metrics\.py\)|prometheus_client"),
    ("asyncio (tasks, futures, timeouts)", r"\(asyncio/|\(uvloop"),
))


def record(pid: int, seconds: float, path: Path, rate: int = 200) -> subprocess.Popen | None:
    """Start sampling ``pid`` for ``seconds`` into ``path``; None (said) without py-spy."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("py-spy not installed (.venv/bin/pip install py-spy): no profile", flush=True)
        return None
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
                             "--rate", str(rate), "--format", "raw", "--threads", "--nolineno", "--nonblocking",
                             "--output", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stacks(path: Path):
    """(thread, [frames root first], count) per line of py-spy's raw output."""
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        thread, _, frames = stack.partition(";")
        yield thread, frames.split(";"), int(count)


def _thread_name(thread: str, frames: list[str]) -> str:
    name = thread.split(":", 1)[-1].strip() or thread
    if name.startswith("Thread-") or name.startswith("Dummy"):
        # kazoo's threads are named by their target: the connection loop, the completion worker
        for frame in frames:
            if "_connect_loop" in frame or "zk_loop" in frame:
                return "kazoo connection thread"
            if "_thread_worker" in frame or "handler/threading" in frame:
                return "kazoo completion worker"
        return name
    return name


def step_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, pattern in STEPS:
            if pattern.search(frame):
                return name
    return "other"


def summary(path: Path, top: int = 25, out=print) -> dict:
    """Print the breakdown (see the module docstring); return it as numbers."""
    if not path.exists():
        out(f"no py-spy samples at {path}")
        return {}
    threads: collections.Counter = collections.Counter()
    steps: collections.Counter = collections.Counter()
    leaves: collections.Counter = collections.Counter()
    kazoo_leaves: collections.Counter = collections.Counter()
    for thread, frames, count in _stacks(path):
        name = _thread_name(thread, frames)
        threads[name] += count
        if name == "MainThread":
            steps[step_of(frames)] += count
            leaves[frames[-1]] += count
        else:
            kazoo_leaves[f"{name}: {frames[-1]}"] += count
    total = sum(threads.values()) or 1
    main = threads.get("MainThread", 0) or 1
    out(f"\n== py-spy: {path} ({total} samples of running threads) ==")
    for name, count in threads.most_common():
        out(f"  {name:<40} {count:>7}  {100 * count / total:5.1f}%")
    out("  event loop by step (first match from the leaf):")
    for name, count in steps.most_common():
        out(f"    {name:<38} {count:>7}  {100 * count / main:5.1f}%")
    out(f"  event loop, top {top} leaf functions (self time):")
    for name, count in leaves.most_common(top):
        out(f"    {100 * count / main:5.1f}%  {name}")
    out(f"  other threads, top {top // 2} leaf functions:")
    for name, count in kazoo_leaves.most_common(top // 2):
        out(f"    {100 * count / total:5.1f}%  {name}")
    return {"threads": dict(threads), "steps": dict(steps)}


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        summary(Path(arg))
