"""The coordinator's settings for consumer groups (Kafka's ``group.consumer.*``).

Names and defaults are Kafka 4.4's broker settings; the daemon takes them
as flags, ``ZKCOORD_GROUP_CONSUMER_...`` variables and TOML keys under the
same names (:mod:`zkcoord.config`).
"""

from __future__ import annotations

from dataclasses import dataclass

from zkcoord.errors import ConfigError

__all__ = ["ConsumerGroupConfig", "MIGRATION_POLICIES", "ASSIGNOR_NAMES"]

MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")  # group.consumer.migration.policy
ASSIGNOR_NAMES = ("uniform", "range")  # the server-side assignors there are


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """``group.consumer.*``: session time-out and heartbeat interval given
    to members, the group's size limit, the server-side assignors (the first
    is the default), the online migration policy between the classic and the
    consumer protocol, how often regular expressions are resolved again,
    the shortest time between two target assignments, and whether a large
    group's target assignment is computed off the event loop
    (``assignor_offload``, Kafka's ``group.consumer.assignor.offload.enable``;
    ``offload_min_size``: subscribed partitions plus 8 per member from
    which a group counts as large, :mod:`.target`)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ASSIGNOR_NAMES
    migration_policy: str = "bidirectional"
    regex_refresh_interval_ms: int = 600_000
    assignment_interval_ms: int = 1_000
    assignor_offload: bool = True
    offload_min_size: int = 2_000

    def __post_init__(self) -> None:
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "regex_refresh_interval_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"group.consumer.{name.replace('_', '.')}={getattr(self, name)} must be positive")
        if self.assignment_interval_ms < 0:
            raise ConfigError(f"group.consumer.assignment.interval.ms={self.assignment_interval_ms} is negative; "
                              "use 0 to compute a new target assignment at every change")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(f"group.consumer.heartbeat.interval.ms={self.heartbeat_interval_ms} must be below "
                              f"group.consumer.session.timeout.ms={self.session_timeout_ms}")
        if self.max_size < 1:
            raise ConfigError(f"group.consumer.max.size={self.max_size} must be at least 1")
        unknown = [a for a in self.assignors if a not in ASSIGNOR_NAMES]
        if not self.assignors or unknown:
            raise ConfigError(f"group.consumer.assignors={','.join(self.assignors)!r}: name one or more of "
                              f"{', '.join(ASSIGNOR_NAMES)} (the first is the default)")
        if self.migration_policy not in MIGRATION_POLICIES:
            raise ConfigError(f"group.consumer.migration.policy={self.migration_policy!r} is not one of "
                              f"{', '.join(MIGRATION_POLICIES)}")

    @property
    def default_assignor(self) -> str:
        return self.assignors[0]

    @property
    def upgrade_enabled(self) -> bool:
        """May a classic group become a consumer group while it runs?"""
        return self.migration_policy in ("bidirectional", "upgrade")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("bidirectional", "downgrade")
