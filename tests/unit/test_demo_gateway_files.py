"""``make demo``'s gateway part keeps its files in the sandbox's state
directory, so ``zkcoord local down`` (``make down``) removes them and the
temporary folder is left as it was (no sandbox needed: a state file of
servers that never ran)."""

from __future__ import annotations

import json
import tempfile

import pytest

from zkcoord.local import demo_gateway
from zkcoord.local.sandbox import Sandbox


def _state(state_dir) -> None:
    state_dir.mkdir(parents=True)
    (state_dir / "sandbox.json").write_text(json.dumps({
        "zookeeper": {"name": "zookeeper", "port": 24101, "pid": None},
        "brokers": [{"name": "kafka-0", "port": 28433, "pid": None}], "started_at": 0.0, "daemons": []}))


def test_the_demos_files_are_in_the_state_directory_and_go_with_it(tmp_path, monkeypatch):
    state_dir = tmp_path / "sandbox"
    _state(state_dir)
    monkeypatch.setenv("ZKCOORD_STATE_DIR", str(state_dir))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # where a mkdtemp would land

    log4j, log = demo_gateway.sandbox_files()

    assert (log4j, log) == (state_dir / "tools-log4j.properties", state_dir / "logs" / "demo-java-console-consumer.log")
    assert log4j.read_text().startswith("log4j.rootLogger=WARN, stderr\n")
    assert f"-Dlog4j.configuration=file:{log4j}" in demo_gateway.java("Main", log4j=log4j)
    Sandbox(state_dir).down()
    assert not state_dir.exists() and list(temporary.iterdir()) == []


def test_without_a_sandbox_it_says_what_to_run_and_makes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ZKCOORD_STATE_DIR", str(tmp_path / "none"))

    with pytest.raises(SystemExit, match=r"no sandbox in .*none: run `zkcoord local up --daemons 2`"):
        demo_gateway.sandbox_files()
    assert list(tmp_path.iterdir()) == []


def test_without_the_environment_it_says_what_to_run(monkeypatch):
    monkeypatch.delenv("ZKCOORD_GATEWAY_SERVERS", raising=False)

    with pytest.raises(SystemExit, match=r"ZKCOORD_GATEWAY_SERVERS is not set: run `zkcoord local up"):
        demo_gateway.main()
