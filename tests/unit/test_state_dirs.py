"""The private sandboxes' state directories leave nothing in the temporary
folder (no sandbox needed: ``down()`` of a sandbox that never started)."""

from __future__ import annotations

import tempfile

import pytest

from tests.support.state_dirs import state_directory
from zkcoord.local.sandbox import Sandbox


@pytest.mark.parametrize("suffix", ["secure", "faults"])
def test_a_temporary_state_directory_is_gone_after_the_block(tmp_path, monkeypatch, suffix):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes it
    with state_directory(None, suffix) as state_dir:
        assert state_dir.parent == tmp_path and state_dir.name.startswith(f"zkcoord-test-{suffix}-")
        (state_dir / "logs").mkdir(parents=True)  # as the sandbox's up() makes it
        (state_dir / "logs" / "zookeeper.log").write_text("...")
        Sandbox(state_dir).down()  # what the fixtures do at the end
    assert list(tmp_path.iterdir()) == []


def test_a_temporary_state_directory_is_gone_when_the_block_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError), state_directory(None, "secure") as state_dir:
        (state_dir / "left-by-a-crash").write_text("...")
        raise RuntimeError("the sandbox did not start")
    assert list(tmp_path.iterdir()) == []


def test_a_given_base_is_used_and_left_to_its_owner(tmp_path):
    with state_directory(str(tmp_path / "run"), "secure") as state_dir:
        assert state_dir == tmp_path / "run-secure"
        state_dir.mkdir()
    assert state_dir.is_dir()  # .ci/run owns it and cleans it
