"""Partition counts from Kafka's Metadata API, for clusters whose topic
metadata zkcoord cannot read in ZooKeeper (a chroot of its own, KRaft).

Owns one kafka-python admin client, used from a worker thread so the
daemon's event loop never blocks; errors become ServiceUnavailableError.
"""

from __future__ import annotations

import asyncio
import threading

from zkcoord.errors import ServiceUnavailableError
from zkcoord.kafka.offsets import security_options


class KafkaTopicMetadata:
    def __init__(self, bootstrap_servers: str, request_timeout_ms: int = 10_000, security=None):
        self.bootstrap_servers = bootstrap_servers
        self.security = security  # KafkaClientSecurity; None: PLAINTEXT
        self.request_timeout_ms = request_timeout_ms
        self._admin = None
        self._lock = threading.Lock()

    def _counts(self, topics: list[str]) -> dict[str, int | None]:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        with self._lock:
            try:
                if self._admin is None:
                    self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers,
                                                   request_timeout_ms=self.request_timeout_ms,
                                                   client_id="zkcoord-metadata", **security_options(self.security))
                described = self._admin.describe_topics(topics)
            except (KafkaError, OSError, ValueError) as exc:
                self._close_locked()
                raise ServiceUnavailableError(
                    f"Kafka at {self.bootstrap_servers} did not answer a metadata request: {exc}") from exc
        counts: dict[str, int | None] = {topic: None for topic in topics}
        for entry in described:
            name = entry.get("topic") or entry.get("name")
            if name in counts and not entry.get("error_code"):
                counts[name] = len(entry.get("partitions") or []) or None
        return counts

    async def partition_counts(self, topics: list[str]) -> dict[str, int | None]:
        """Topic -> partition count (None: the topic does not exist)."""
        return await asyncio.to_thread(self._counts, sorted(topics))

    def _close_locked(self) -> None:
        if self._admin is not None:
            try:
                self._admin.close()
            finally:
                self._admin = None

    def close(self) -> None:
        with self._lock:
            self._close_locked()
