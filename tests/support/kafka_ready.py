"""Waiting for a sandbox broker's group coordinator.

A fresh broker creates ``__consumer_offsets`` on the first group request
and answers COORDINATOR_NOT_AVAILABLE until it is loaded. The session
fixtures call :func:`wait_group_coordinator` once, so no test depends on
running after another.
"""

from __future__ import annotations

import time

from kafka import KafkaAdminClient
from kafka.errors import KafkaError


def wait_group_coordinator(bootstrap_servers: str, timeout_s: float = 120.0) -> None:
    """Return once the broker answers a group's offset fetch; raise the last
    Kafka error after ``timeout_s``."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=10000)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                admin.list_group_offsets("zkcoord-test-warm-up")
                return
            except KafkaError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        admin.close()
