"""Where the test suite's private sandboxes keep their state.

A suite with a sandbox of its own (the fault tests, the secure sandbox)
uses ``<base>-<suffix>`` when ``ZKCOORD_TEST_STATE_DIR`` gives a base
(``.ci/run`` owns those and brings them down), else a new temporary
directory, which :func:`state_directory` removes on the way out, whatever
was left in it: a sandbox's ``down()`` removes only its own state, and a
test run must leave nothing in the temporary folder.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def state_directory(base: str | None, suffix: str) -> Iterator[Path]:
    """``<base>-<suffix>`` (left to its owner), else a new temporary
    directory ``zkcoord-test-<suffix>-*``, removed when the block ends."""
    if base:
        yield Path(f"{base}-{suffix}")
        return
    made = Path(tempfile.mkdtemp(prefix=f"zkcoord-test-{suffix}-"))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)
