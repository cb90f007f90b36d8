"""What a Spark master URL says about where the executors run.

* :func:`is_local`: ``local``, ``local[...]``, or None (the job's default,
  ``local[*]``): the executors are threads of the driver's JVM.
* :func:`runs_here`: a local master, or a standalone master on loopback
  (``spark://127.0.0.1:<port>``, ``localhost``, this host's name), such as
  the sandbox's ``zkcoord local up --spark-workers N``: the executors are
  processes on this machine, so they can run this interpreter and write a
  local report the driver can read.

Pure functions of the URL (and this host's name); no Spark import.
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse

__all__ = ["is_local", "runs_here"]

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def is_local(master: str | None) -> bool:
    """``local``, ``local[...]`` or None (the default, ``local[*]``).

    >>> is_local(None), is_local("local[2]"), is_local("spark://127.0.0.1:7077")
    (True, True, False)
    """
    return master is None or master == "local" or master.startswith("local[")


def runs_here(master: str | None) -> bool:
    """Whether the executors run on this machine: a local master, or a standalone master on loopback.

    >>> runs_here("spark://127.0.0.1:7077"), runs_here("spark://spark-1.example:7077"), runs_here("yarn")
    (True, False, False)
    """
    if is_local(master):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [urlparse(f"spark://{part}").hostname or "" for part in master[len("spark://"):].split(",")]
    return all(host in _LOOPBACK or host == socket.gethostname() for host in hosts)
