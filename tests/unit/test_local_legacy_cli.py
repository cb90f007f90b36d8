"""``zkcoord local legacy``: what it refuses before starting a JVM."""

from __future__ import annotations

from click.testing import CliRunner

from zkcoord.cli.main import cli


def run(*args: str):
    return CliRunner().invoke(cli, ["local", "legacy", *args, "--zookeeper", "127.0.0.1:1"])


def test_topics_or_a_whitelist_is_needed():
    result = run("etl")
    assert result.exit_code == 2 and "give the TOPICS to consume, or --whitelist REGEX" in result.output


def test_not_both():
    result = run("etl", "orders", "--whitelist", "orders.*")
    assert result.exit_code == 2 and "topics orders and --whitelist 'orders.*': give one" in result.output


def test_a_property_must_be_key_value():
    result = run("etl", "orders", "--property", "rebalance.backoff.ms")
    assert result.exit_code == 2 and "'rebalance.backoff.ms' is not KEY=VALUE" in result.output


def test_a_bad_topic_name():
    result = run("etl", "orders", "a,b")
    assert result.exit_code == 2 and "topic 'a,b'" in result.output and "Traceback" not in result.output
