"""docker-compose.yml is valid Compose and wires what the README promises:
ZooKeeper 3.8, Kafka 3.9 in ZooKeeper mode, two zkcoord daemons built from
the repository's Dockerfile."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ALLOWED_SERVICE_KEYS = {
    "image", "build", "environment", "ports", "depends_on", "command", "healthcheck",
    "stop_signal", "stop_grace_period", "volumes", "restart",
}


def load():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services_and_images():
    compose = load()
    services = compose["services"]
    assert set(services) == {"zookeeper", "kafka", "zkcoord-1", "zkcoord-2"}
    assert services["zookeeper"]["image"] == "zookeeper:3.8"
    # Confluent Platform 7.9.x ships Apache Kafka 3.9.x.
    assert re.fullmatch(r"confluentinc/cp-kafka:7\.9\.\d+", services["kafka"]["image"])
    for name, service in services.items():
        assert set(service) <= ALLOWED_SERVICE_KEYS, (name, set(service) - ALLOWED_SERVICE_KEYS)


def test_kafka_runs_in_zookeeper_mode():
    env = load()["services"]["kafka"]["environment"]
    assert env["KAFKA_ZOOKEEPER_CONNECT"] == "zookeeper:2181"
    assert "KAFKA_PROCESS_ROLES" not in env  # that would be KRaft
    listeners = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert set(listeners) == set(env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].replace(":PLAINTEXT", "").split(","))


def test_two_coordinators_built_from_the_dockerfile():
    services = load()["services"]
    daemons = [services["zkcoord-1"], services["zkcoord-2"]]
    assert (ROOT / "Dockerfile").is_file()
    assert all(d["build"] == "." for d in daemons)  # the YAML merge key copied it
    assert {d["environment"]["ZKCOORD_NODE_ID"] for d in daemons} == {"1", "2"}
    assert all(d["environment"]["ZKCOORD_ZOOKEEPER"] == "zookeeper:2181" for d in daemons)
    assert all(d["command"][0] == "run" for d in daemons)
    host_ports = [d["ports"][0].rsplit(":", 2)[1] for d in daemons]
    advertised = [d["environment"]["ZKCOORD_ADVERTISED"].rsplit(":", 1)[1] for d in daemons]
    assert host_ports == advertised  # clients on the host reach what is advertised
    assert all(d["depends_on"]["zookeeper"]["condition"] == "service_healthy" for d in daemons)


def test_dockerfile_installs_the_package_and_runs_the_cli():
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11" in text
    assert "pip install --no-cache-dir ." in text
    assert 'ENTRYPOINT ["zkcoord"]' in text
