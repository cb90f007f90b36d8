"""A real Burrow (LinkedIn's consumer-lag monitor) process for integration tests.

This module owns finding the binary (Debian's package ``burrow`` installs
``/usr/bin/Burrow``, capital B), running it on a configuration
``zkcoord burrow-config`` wrote into a directory of the test's own, learning
its HTTP port, asking its HTTP API, and always stopping it (SIGTERM, then
SIGKILL) when the test ends, pass or fail.

The HTTP server listens on ``127.0.0.1:0``: the kernel picks a free port at
bind time (no pick-then-bind race) and Burrow logs it (``"msg":"started
listener"``), which is where the port is read from.

Stray processes: the configuration directory's path holds the marker the
daemons carry (``zkcoord-test-process=<state dir>``, see
``tests/support/daemons.py``), and Burrow's command line names that
directory, so ``.ci/run``'s ``pkill -f`` finds a Burrow left over too.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.support.daemons import process_marker, wait_for
from zkcoord.local.procs import tail

BINARY_NAMES = ("Burrow", "burrow")  # Debian's package name is burrow, its binary Burrow
INSTALL_HINT = "Burrow is not installed: apt-get install -y burrow (Debian's package installs /usr/bin/Burrow)"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


def burrow_binary() -> str | None:
    """The Burrow binary on PATH, None if there is none."""
    return next(filter(None, map(shutil.which, BINARY_NAMES)), None)


def config_dir(base: Path) -> Path:
    """A directory under ``base`` whose path carries the test-process marker."""
    path = Path(f"{base}/{process_marker()}/burrow")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class BurrowProcess:
    """One Burrow, started on ``<directory>/burrow.toml`` (written with
    ``--log-file <directory>/burrow.log`` and ``--http-listen 127.0.0.1:0``)."""

    binary: str
    directory: Path
    proc: subprocess.Popen | None = None
    port: int = 0

    @property
    def log_path(self) -> Path:
        return self.directory / "burrow.log"

    def log(self, lines: int = 80) -> str:
        return (f"{tail(self.log_path, lines)}\n-- stdout/stderr:\n"
                f"{tail(self.directory / 'burrow.out', 20)}")

    def __enter__(self) -> BurrowProcess:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if exc_info[0] is not None:
            print(f"---- Burrow log ({self.log_path}):\n{self.log()}")
        self.stop()

    def start(self) -> None:
        with open(self.directory / "burrow.out", "ab") as out:
            self.proc = subprocess.Popen([self.binary, "-config-dir", str(self.directory)], cwd=self.directory,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            self.port = wait_for(self._listening_port, START_TIMEOUT_S, "Burrow logged its HTTP listener")
            wait_for(self._consumers_started, START_TIMEOUT_S, "Burrow started its consumer modules")
        except BaseException:
            self.stop()
            raise

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"Burrow exited with {self.proc.returncode}; its log:\n{self.log()}")

    def _log_lines(self) -> list[dict]:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        found = []
        for line in text.splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
        return found

    def _listening_port(self) -> int | None:
        self._check_alive()
        for entry in self._log_lines():
            if entry.get("msg") == "started listener" and entry.get("name") == "httpserver":
                return int(entry["listener"].rpartition(":")[2])
        return None

    def _consumers_started(self) -> bool:
        """Both consumer modules logged their start and none reported a failure."""
        self._check_alive()
        entries = self._log_lines()
        started = {e.get("class") for e in entries if e.get("msg") == "starting" and e.get("type") == "module"
                   and e.get("coordinator") == "consumer"}
        return {"kafka_zk", "kafka"} <= started and any(
            e.get("msg") == "starting consumers" for e in entries)

    def errors(self) -> list[dict]:
        """Every entry Burrow logged at error level or above."""
        return [e for e in self._log_lines() if e.get("level") in ("error", "dpanic", "panic", "fatal")]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)

    # ------------------------------------------------------------------ HTTP
    def get(self, path: str) -> tuple[int, dict]:
        """(HTTP status, JSON body) of ``GET path``."""
        self._check_alive()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as answer:
            return answer.code, json.load(answer)

    def status(self, cluster: str, group: str) -> dict | None:
        """``/v3/kafka/<cluster>/consumer/<group>/lag`` (every partition): the
        group's ``status`` object, None while Burrow does not know the group."""
        code, body = self.get(f"/v3/kafka/{cluster}/consumer/{urllib.request.quote(group)}/lag")
        if code == 404:
            return None
        assert code == 200, body
        return body["status"]
