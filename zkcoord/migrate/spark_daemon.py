"""The Python worker daemon of the local Spark job (``spark.python.daemon.module``).

Spark starts one daemon (``python -m <this module> pyspark.worker``) on the
first Python task and forks every Python worker from it. Two things made
the first job of a session pay about a second of CPU more than the next
ones on the 2-core development machine, and this module removes both before
handing over to PySpark's own daemon (:func:`pyspark.daemon.manager`):

1. Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first
   on the workers' path, and Python compiles modules imported from a zip
   from source in every process. When the zips belong to the pyspark
   installed with this interpreter (a pip install: ``SPARK_HOME`` is that
   package), they are dropped from the path, so the installed package and
   its bytecode cache serve the imports instead: the same files.
2. The worker module and the job's task module are imported once here,
   before the forks, instead of once in every worker (they start no
   threads when imported; the daemon must not have any when it forks),
   and frozen (``gc.freeze``): the workers' full garbage collections do
   not walk every imported object again.

Only :func:`zkcoord.migrate.spark_session.spark_session` sets it, for the local
master and a standalone master on this machine whose executors run this
interpreter (where zkcoord is installed).
"""

from __future__ import annotations

import gc
import importlib.machinery
import sys
from pathlib import Path

__all__ = ["MODULE", "prefer_installed_pyspark", "main"]

MODULE = __name__ if __name__ != "__main__" else "zkcoord.migrate.spark_daemon"


def _is_spark_zip(entry: str) -> bool:
    name = Path(entry).name
    return name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith("-src.zip"))


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` without Spark's pyspark and py4j zips when they are the installed
    pyspark's own (``<pyspark>/python/lib/*.zip``) and both packages are importable
    without them; else ``path`` as it is."""
    zips = [entry for entry in path if _is_spark_zip(entry)]
    if not zips:
        return path
    rest = [entry for entry in path if entry not in zips]
    specs = {}
    for name in ("pyspark", "py4j"):
        spec = importlib.machinery.PathFinder.find_spec(name, rest)
        if spec is None or not spec.origin:
            return path
        specs[name] = Path(spec.origin).resolve().parent
    if any(Path(entry).resolve().parent.parent.parent != specs["pyspark"] for entry in zips):
        return path  # another Spark's zips (SPARK_HOME elsewhere): keep what Spark chose
    return rest


def main() -> None:
    sys.path[:] = prefer_installed_pyspark(sys.path)
    import pyspark.worker  # noqa: F401 (imported before the forks, see the module docstring)

    import zkcoord.migrate.spark_tasks  # noqa: F401
    from pyspark.daemon import manager

    gc.collect()
    gc.freeze()  # what is imported lives as long as the workers: their full collections skip it
    manager()


if __name__ == "__main__":
    main()
