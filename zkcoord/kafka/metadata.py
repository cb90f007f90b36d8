"""Topics from Kafka's Metadata API, for clusters whose topic metadata
zkcoord cannot read in ZooKeeper (a chroot of its own, KRaft): partition
counts of named topics, or every topic with its id.

Owns one kafka-python admin client, used from a worker thread so the
daemon's event loop never blocks; errors become ServiceUnavailableError.
"""

from __future__ import annotations

import asyncio
import threading

from uuid import UUID

from zkcoord.errors import ServiceUnavailableError
from zkcoord.kafka.offsets import security_options
from zkcoord.topic_ids import topic_id_text


def _uuid(value) -> UUID | None:
    """A topic id as kafka-python hands it over (a UUID, or its hex text in ``to_dict()``)."""
    if isinstance(value, UUID) or value is None:
        return value
    try:
        return UUID(str(value))
    except ValueError:
        return None


class KafkaTopicMetadata:
    def __init__(self, bootstrap_servers: str, request_timeout_ms: int = 10_000, security=None):
        self.bootstrap_servers = bootstrap_servers
        self.security = security  # KafkaClientSecurity; None: PLAINTEXT
        self.request_timeout_ms = request_timeout_ms
        self._admin = None
        self._lock = threading.Lock()

    def _describe(self, topics: list[str] | None) -> list[dict]:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        with self._lock:
            try:
                if self._admin is None:
                    self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers,
                                                   request_timeout_ms=self.request_timeout_ms,
                                                   client_id="zkcoord-metadata", **security_options(self.security))
                return self._admin.describe_topics(topics)
            except (KafkaError, OSError, ValueError) as exc:
                self._close_locked()
                raise ServiceUnavailableError(
                    f"Kafka at {self.bootstrap_servers} did not answer a metadata request: {exc}") from exc

    def _counts(self, topics: list[str]) -> dict[str, int | None]:
        described = self._describe(topics)
        counts: dict[str, int | None] = {topic: None for topic in topics}
        for entry in described:
            name = entry.get("topic") or entry.get("name")
            if name in counts and not entry.get("error_code"):
                counts[name] = len(entry.get("partitions") or []) or None
        return counts

    async def partition_counts(self, topics: list[str]) -> dict[str, int | None]:
        """Topic -> partition count (None: the topic does not exist)."""
        return await asyncio.to_thread(self._counts, sorted(topics))

    def _all(self) -> dict[str, tuple[str, int]]:
        topics = {}
        for entry in self._describe(None):
            name, topic_id = entry.get("name") or entry.get("topic"), _uuid(entry.get("topic_id"))
            if entry.get("error_code") or not name or topic_id is None or topic_id.int == 0:
                continue  # no id (a broker before 2.8 answers Metadata below v10): not nameable by id
            topics[name] = (topic_id_text(topic_id), len(entry.get("partitions") or []))
        return topics

    async def all_topics(self) -> dict[str, tuple[str, int]]:
        """Every topic of the cluster: name -> (topic id in Kafka's text form,
        partition count); internal topics included, as Kafka's image has them."""
        return await asyncio.to_thread(self._all)

    def _close_locked(self) -> None:
        if self._admin is not None:
            try:
                self._admin.close()
            finally:
                self._admin = None

    def close(self) -> None:
        with self._lock:
            self._close_locked()
