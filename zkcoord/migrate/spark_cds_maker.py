"""The background process that makes the local Spark driver's class archive
(``python -m zkcoord.migrate.spark_cds_maker``, started by
:meth:`zkcoord.migrate.spark_cds.ClassArchive.make_in_background` as a first
session ends; the Spark settings the archive is for in ``_ZKCOORD_CDS_CONF``).

A local session started with those settings records its classes (``record``
mode of :mod:`zkcoord.migrate.spark_cds`), writes a small report as a job
does and ends: :func:`~zkcoord.migrate.spark_session.spark_session` then saves
the archive (:meth:`~zkcoord.migrate.spark_cds.ClassArchive.finish`). It runs
at a lower CPU priority: what the user runs next comes first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys

from zkcoord.migrate import spark_cds
from zkcoord.migrate.spark_session import spark_session

__all__ = ["make", "main"]

log = logging.getLogger(__name__)

_NICE = 10


def make(conf: dict[str, str]) -> int:
    """0 when an archive is in place afterwards."""
    with contextlib.suppress(OSError):
        os.nice(_NICE)
    try:
        with spark_session(None, conf=conf):
            pass  # the session's end writes a report as a job does, then saves the archive
    except Exception:
        log.debug("the background session for the class archive failed", exc_info=True)
    finally:
        spark_cds.release()
    return 0 if spark_cds.archived() else 1


def main(argv: list[str]) -> int:
    if argv:
        print("usage: python -m zkcoord.migrate.spark_cds_maker", file=sys.stderr)
        return 2
    return make(json.loads(os.environ.get(spark_cds._MAKER_CONF) or "{}"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
