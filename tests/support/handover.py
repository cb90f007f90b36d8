"""What the handover tests share: the legacy driver's classpath (or a skip
saying why), and the owner znodes of a legacy group as they are read."""

from __future__ import annotations

import pytest
from kazoo.exceptions import NoNodeError

from zkcoord.errors import MissingToolError
from zkcoord.local import jars
from zkcoord.local.legacy import driver_classpath


def legacy_classpath_or_skip() -> str:
    """The compiled legacy driver's classpath; a skip where java or javac is missing."""
    try:
        jars.find_java()
        return driver_classpath()
    except MissingToolError as exc:
        pytest.skip(f"the legacy consumer needs java and javac: {exc}")


def owners(zk, group: str, topic: str) -> dict[int, str]:
    """partition -> the thread its owner znode names (znodes come and go while read)."""
    path = f"/consumers/{group}/owners/{topic}"
    found = {}
    for p in (zk.get_children(path) if zk.exists(path) else []):
        try:
            found[int(p)] = zk.get(f"{path}/{p}")[0].decode()
        except NoNodeError:
            pass
    return found
