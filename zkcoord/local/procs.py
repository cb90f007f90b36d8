"""Process and port plumbing shared by the sandbox, the tests and the demo.

Owns: picking free loopback ports, probing them (a TCP connect, an HTTP
GET), starting a detached process with its
output in a log file, telling whether a recorded pid is still *our* process
(pids are reused), stopping by pid with a grace period, and reading a log's
last lines for error messages.
"""

from __future__ import annotations

import http.client
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path


# Listening ports are picked below Linux's ephemeral range (32768-60999), so
# an outgoing connection cannot take a port between our pick and the
# server's bind.
PORT_RANGE = (20000, 32000)


def free_port(host: str = "127.0.0.1", avoid: frozenset[int] = frozenset()) -> int:
    """A port nobody listens on, outside the ephemeral range and not in
    ``avoid`` (ports already promised to a server that is not up yet)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(*PORT_RANGE)
        if port in avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port on {host} in {PORT_RANGE[0]}-{PORT_RANGE[1]}")


def free_port_range(count: int, host: str = "127.0.0.1", avoid: frozenset[int] = frozenset()) -> int:
    """The first of ``count`` consecutive ports nobody listens on and none in
    ``avoid`` (a gateway's own port and its broker ports)."""
    rng = random.Random()
    for _ in range(200):
        first = rng.randint(PORT_RANGE[0], PORT_RANGE[1] - count)
        if avoid.intersection(range(first, first + count)):
            continue
        sockets = []
        try:
            for port in range(first, first + count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind((host, port))
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise OSError(f"no {count} consecutive free ports on {host} in {PORT_RANGE[0]}-{PORT_RANGE[1]}")


def port_open(port: int, host: str = "127.0.0.1", timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


# Loopback servers only: never through an http_proxy of the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, timeout_s: float = 2.0) -> tuple[int, bytes] | None:
    """(status, body) of ``GET url``; None when nothing answers HTTP."""
    try:
        with _DIRECT.open(url, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (OSError, ValueError, http.client.HTTPException):
        return None


def http_status(url: str, timeout_s: float = 2.0) -> int | None:
    answer = http_get(url, timeout_s)
    return answer[0] if answer else None


def spawn(cmd: list[str], log_file: Path, cwd: Path | None = None, env: dict | None = None) -> int:
    """Start ``cmd`` in its own session (it outlives the caller); return its pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=cwd, env=env, start_new_session=True,
        )
    return proc.pid


def _cmdline(pid: int) -> str | None:
    proc_file = Path(f"/proc/{pid}/cmdline")
    if proc_file.exists():
        try:
            return proc_file.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return None
    try:
        out = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() or None


def _is_zombie(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def alive(pid: int | None, marker: str | None = None) -> bool:
    """True when ``pid`` runs and, given a marker, its command line holds it."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _is_zombie(pid):
        _reap(pid)
        return False
    if marker is None:
        return True
    cmdline = _cmdline(pid)
    # Right after spawn() returns, the child may be inside execve: the kernel
    # has closed its close-on-exec fds (which is what Popen waits for) but not
    # yet published the new argv, so /proc/<pid>/cmdline reads empty for a
    # moment. That is our process starting, not a stranger: look again.
    for _ in range(50):
        if cmdline != "":
            break
        time.sleep(0.01)
        cmdline = _cmdline(pid)
    return cmdline is not None and marker in cmdline


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def stop(pid: int | None, marker: str | None = None, grace_s: float = 30.0, sig=signal.SIGTERM) -> bool:
    """Signal ``pid`` (if it is still ours), wait ``grace_s``, then SIGKILL.

    Returns True when a process was stopped, False when none was running.
    """
    if not alive(pid, marker):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    for _ in range(100):
        if not alive(pid):
            break
        time.sleep(0.05)
    return True


def tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines)).rstrip()
    except OSError:
        return f"(no log at {path})"
