"""The fault sandbox's state directory leaves nothing behind (no sandbox needed)."""

from __future__ import annotations

import tempfile

from tests.faults.harness import state_directory
from zkcoord.local.sandbox import Sandbox


def test_a_temporary_state_directory_is_gone_after_the_sandbox_is_down(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes it
    with state_directory(None) as state_dir:
        assert tmp_path in state_dir.parents
        (state_dir / "logs").mkdir(parents=True)  # as the sandbox's up() makes it
        (state_dir / "logs" / "zookeeper.log").write_text("...")
        Sandbox(state_dir).down()  # what the fixture does at the end
    assert list(tmp_path.iterdir()) == []


def test_a_given_base_is_used_and_left_to_its_owner(tmp_path):
    with state_directory(str(tmp_path / "run")) as state_dir:
        assert state_dir == tmp_path / "run-faults"
        state_dir.mkdir()
    assert state_dir.is_dir()  # .ci/run owns it and cleans it
