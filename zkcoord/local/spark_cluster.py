"""The sandbox's Spark standalone cluster (``zkcoord local up --spark-workers N``):
a master and N workers of the installed pyspark's own distribution, as local
processes, for running ``migrate run-job --spark-master`` on a real cluster.

Owns, in the sandbox's state directory::

    spark-worker-<i>/work/   a worker's work directory (each application's
                             executors log there: app-*/<executor id>/stderr)
    spark-worker-<i>/local/  its scratch (``SPARK_LOCAL_DIRS``: its executors'
                             blocks and shuffle files; Spark's default is
                             /tmp, where a killed worker's would stay), and
                             in local/tmp/ the worker's and its executors'
                             temporary files (``java.io.tmpdir`` through
                             ``JAVA_TOOL_OPTIONS``: the native libraries
                             lz4 and snappy unpack)
    logs/spark-master.log, logs/spark-worker-<i>.log

and how they start: the command Spark's own ``bin/spark-class`` would run
(its launcher, ``org.apache.spark.launcher.Main``, prints the java command
with Spark's JVM options; we run that command ourselves, so the pid we record
is the JVM's from the start and its command line carries the sandbox's
marker, passed in ``SPARK_DAEMON_JAVA_OPTS``), with ``SPARK_HOME`` the
pyspark package (pip's pyspark ships Spark's ``jars/`` and ``bin/``).

* the master: ``org.apache.spark.deploy.master.Master --host 127.0.0.1
  --port <port> --webui-port <ui>``; its URL ``spark://127.0.0.1:<port>``
  (``ZKCOORD_SPARK_MASTER``), its web UI ``http://127.0.0.1:<ui>``
  (``ZKCOORD_SPARK_MASTER_UI``; ``/json/`` lists workers and applications);
* each worker: ``org.apache.spark.deploy.worker.Worker`` on loopback with
  ``--cores`` (the machine's cores shared out, at least 1 each) and
  ``--memory`` :data:`WORKER_MEMORY` for its executors, registered with the
  master; ``up`` waits until the master's ``/json/`` lists every worker
  ALIVE.

Workers start in a session of their own, with their executors (and those
executors' Python workers) in the same process group: :func:`kill_worker`
kills the group, as a machine that dies takes its executors with it.
Ports are picked when a server is first added and kept, as for the others.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from zkcoord.errors import MissingToolError, SandboxError, UsageError
from zkcoord.local import jars, procs

if TYPE_CHECKING:  # the sandbox imports this module
    from zkcoord.local.sandbox import Sandbox, SandboxState, Server

MASTER = "spark-master"
WORKER_PREFIX = "spark-worker-"
MAX_WORKERS = 4
MASTER_ENV, UI_ENV = "ZKCOORD_SPARK_MASTER", "ZKCOORD_SPARK_MASTER_UI"
DAEMON_MEMORY = "256m"  # the master's and each worker's own JVM heap
WORKER_MEMORY = "1g"  # what a worker offers its executors (Spark's default executor memory is 1g)
LAUNCHER_TIMEOUT_S = 60.0


def worker_name(index: int) -> str:
    return f"{WORKER_PREFIX}{index}"


def servers(state: SandboxState) -> list[Server]:
    """The cluster's servers, master first."""
    return [*([state.spark_master] if state.spark_master else []), *state.spark_workers]


def master_url(state: SandboxState) -> str:
    return f"spark://127.0.0.1:{state.spark_master.port}" if state.spark_master else ""


def ui_url(state: SandboxState) -> str:
    return f"http://127.0.0.1:{state.spark_master.ui_port}" if state.spark_master else ""


def environment(state: SandboxState) -> dict[str, str]:
    """``zkcoord local env``'s exports for the cluster ({} without one)."""
    if state.spark_master is None:
        return {}
    return {MASTER_ENV: master_url(state), UI_ENV: ui_url(state)}


def add_workers(state: SandboxState, workers: int) -> None:
    """The master (if none yet) and workers up to ``workers``, their ports picked now."""
    from zkcoord.local.sandbox import Server

    if not 0 <= workers <= MAX_WORKERS:
        raise UsageError(f"--spark-workers {workers}: the sandbox runs 0 to {MAX_WORKERS} Spark workers.")
    if workers == 0:
        return
    if state.spark_master is None:
        master = Server(MASTER, procs.free_port(avoid=state.ports()))
        master.ui_port = procs.free_port(avoid=state.ports() | {master.port})
        state.spark_master = master
    for index in range(len(state.spark_workers) + 1, workers + 1):
        worker = Server(worker_name(index), procs.free_port(avoid=state.ports()))
        worker.ui_port = procs.free_port(avoid=state.ports() | {worker.port})
        state.spark_workers.append(worker)


# -- starting ---------------------------------------------------------------------------------------
def spark_home() -> Path:
    """The installed pyspark's Spark distribution (its ``jars/`` and ``bin/``)."""
    try:
        from pyspark.find_spark_home import _find_spark_home

        home = Path(_find_spark_home())
    except Exception as exc:  # no pyspark, or one without its jars
        raise MissingToolError(f"no Spark distribution found for the Spark cluster ({exc}); "
                               "pip install pyspark (zkcoord's own dependency)") from None
    if not (home / "jars").is_dir():
        raise MissingToolError(f"{home} has no jars/ directory: not a Spark distribution")
    return home


def _scala_version(home: Path) -> str:
    """2.13 for Spark 4's jars (what bin/load-spark-env.sh exports as SPARK_SCALA_VERSION)."""
    for jar in (home / "jars").glob("scala-library-*.jar"):
        match = re.match(r"scala-library-(\d+\.\d+)\.", jar.name)
        if match:
            return match.group(1)
    return "2.13"


def _environment(sandbox: Sandbox, name: str) -> dict[str, str]:
    home = spark_home()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("SPARK_", "PYSPARK_", "HADOOP_CONF", "YARN_CONF"))}
    env.update(SPARK_HOME=str(home), SPARK_SCALA_VERSION=_scala_version(home), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_CONF_DIR=str(sandbox.state_dir / "spark-conf"),  # empty: Spark's defaults, none of the host's
               SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
               SPARK_DAEMON_JAVA_OPTS=f"{sandbox._marker(name)} -Dspark.master.rest.enabled=false")
    java = jars.find_java()
    env["JAVA_HOME"] = str(Path(java).resolve().parent.parent)
    return env


def launch_command(main_class: str, args: list[str], env: dict[str, str]) -> list[str]:
    """The java command ``bin/spark-class <main_class> <args>`` would exec (from Spark's launcher)."""
    home = Path(env["SPARK_HOME"])
    cmd = [jars.find_java(), "-Xmx128m", "-cp", str(home / "jars" / "*"), "org.apache.spark.launcher.Main",
           main_class, *args]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, timeout=LAUNCHER_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SandboxError(f"Spark's launcher did not answer within {LAUNCHER_TIMEOUT_S:.0f} s") from None
    # It prints its messages, a NUL, then the command's arguments each ended by a NUL.
    _, sep, command = out.stdout.partition(b"\0")
    argv = [arg.decode() for arg in command.lstrip(b"\r\n").split(b"\0") if arg]
    if out.returncode != 0 or not sep or not argv:
        text = (out.stdout + out.stderr).decode(errors="replace").strip().splitlines()[-15:]
        raise SandboxError(f"Spark's launcher failed (exit {out.returncode}) for {main_class}:\n" + "\n".join(text))
    return argv


def _spawn(sandbox: Sandbox, server: Server, main_class: str, args: list[str],
           scratch: Path | None = None) -> None:
    (sandbox.state_dir / "spark-conf").mkdir(parents=True, exist_ok=True)
    env = _environment(sandbox, server.name)
    if scratch is not None:
        (scratch / "tmp").mkdir(parents=True, exist_ok=True)
        env["SPARK_LOCAL_DIRS"] = str(scratch)
        # The executors' temporary files too (the native libraries lz4 and snappy unpack): executors get
        # the worker's environment, not its JVM options.
        env["JAVA_TOOL_OPTIONS"] = " ".join(
            filter(None, (env.get("JAVA_TOOL_OPTIONS", ""), f"-Djava.io.tmpdir={scratch / 'tmp'}")))
    argv = launch_command(main_class, args, env)
    server.pid = procs.spawn(argv, sandbox.log_file(server.name), cwd=sandbox.state_dir, env=env)


def _worker_cores(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def start_missing(sandbox: Sandbox, state: SandboxState) -> list[str]:
    """Start the master and the workers that are not running; their names."""
    started = []
    master = state.spark_master
    if master is None:
        return started
    if not procs.alive(master.pid, sandbox._match(MASTER)):
        sandbox.log(f"starting the Spark master on {master_url(state)}, web UI {ui_url(state)}")
        _spawn(sandbox, master, "org.apache.spark.deploy.master.Master",
               ["--host", "127.0.0.1", "--port", str(master.port), "--webui-port", str(master.ui_port)])
        started.append(MASTER)
    cores = _worker_cores(len(state.spark_workers))
    for worker in state.spark_workers:
        if procs.alive(worker.pid, sandbox._match(worker.name)):
            continue
        work = sandbox.state_dir / worker.name / "work"
        work.mkdir(parents=True, exist_ok=True)
        sandbox.log(f"starting Spark worker {worker.name} on 127.0.0.1:{worker.port} ({cores} core(s), "
                    f"{WORKER_MEMORY} for executors)")
        _spawn(sandbox, worker, "org.apache.spark.deploy.worker.Worker",
               ["--host", "127.0.0.1", "--port", str(worker.port), "--webui-port", str(worker.ui_port),
                "--cores", str(cores), "--memory", WORKER_MEMORY, "--work-dir", str(work), master_url(state)],
               scratch=sandbox.state_dir / worker.name / "local")
        started.append(worker.name)
    return started


# -- readiness --------------------------------------------------------------------------------------
def master_status(state: SandboxState) -> dict | None:
    """The master's ``/json/`` (workers, applications), or None when it does not answer."""
    answer = procs.http_get(f"{ui_url(state)}/json/")
    if answer is None or answer[0] != 200:
        return None
    try:
        return json.loads(answer[1])
    except ValueError:
        return None


def alive_workers(state: SandboxState) -> set[str]:
    """``host:port`` of the workers the master lists ALIVE."""
    status = master_status(state) or {}
    return {f"{w.get('host')}:{w.get('port')}" for w in status.get("workers", ()) if w.get("state") == "ALIVE"}


def wait_ready(sandbox: Sandbox, state: SandboxState) -> None:
    """Until the master's UI answers and lists every worker ALIVE."""
    master = state.spark_master
    if master is None:
        return
    sandbox._wait(master, lambda: master_status(state) is not None, "answer on its web UI (/json/)")
    for worker in state.spark_workers:
        address = f"127.0.0.1:{worker.port}"
        sandbox._wait(worker, lambda a=address: a in alive_workers(state), "register with the master (ALIVE)")


# -- stopping ---------------------------------------------------------------------------------------
def kill_worker(sandbox: Sandbox, name: str) -> None:
    """SIGKILL a worker with its executors and their Python workers (its process group), as a machine
    that dies; the sandbox records it as down (``up`` starts it again)."""
    with sandbox._locked():
        state = sandbox._require_state()
        worker = next((w for w in state.spark_workers if w.name == name), None)
        if worker is None:
            raise UsageError(f"No Spark worker {name!r} in the sandbox; it has "
                             f"{[w.name for w in state.spark_workers]}.")
        if procs.alive(worker.pid, sandbox._match(name)):
            try:
                os.killpg(os.getpgid(worker.pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
            procs.stop(worker.pid, sandbox._match(name), grace_s=10, sig=signal.SIGKILL)
        worker.pid = None
        sandbox._save(state)
