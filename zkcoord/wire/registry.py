"""Which APIs and versions a zkcoord listener serves.

This module owns :class:`ApiSpec` (one API: kafka-python's generated
request and response classes and the versions served), :class:`ApiRegistry`
(the APIs of a listener, by api key) and the registries zkcoord serves:
:data:`COORDINATOR_APIS` on the daemon's listener (and, for the group APIs,
on the gateway), :data:`SASL_COORDINATOR_APIS` on a SASL listener.

Rule: we advertise exactly what we decode. An :class:`ApiSpec` may only
claim versions that the kafka-python schema declares valid
(``validVersions``), so OffsetCommit starts at v2 and OffsetFetch at v1
although Kafka 3.9 still accepted OffsetCommit v0-1 and OffsetFetch v0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

from kafka.protocol.admin.groups import (
    DeleteGroupsRequest, DeleteGroupsResponse,
    DescribeGroupsRequest, DescribeGroupsResponse,
    ListGroupsRequest, ListGroupsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.group import (
    HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse,
    OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse,
    SyncGroupRequest, SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest, ApiVersionsResponse,
    FindCoordinatorRequest, FindCoordinatorResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
)

from zkcoord.core.api_keys import (
    API_VERSIONS, CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, OFFSET_COMMIT, OFFSET_FETCH,
)
from zkcoord.schemas import (
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
)
from zkcoord.wire.errors import api_name

__all__ = ["ApiSpec", "ApiRegistry", "COORDINATOR_APIS", "SASL_APIS", "SASL_COORDINATOR_APIS"]


@dataclass(frozen=True)
class ApiSpec:
    """One API the daemon serves: its generated classes and served versions."""

    request_class: type[ApiMessage]
    response_class: type[ApiMessage]
    min_version: int
    max_version: int

    def __post_init__(self) -> None:
        key = self.request_class.API_KEY
        if self.response_class.API_KEY != key:
            raise ValueError(
                f"{self.request_class.__name__} (key {key}) and "
                f"{self.response_class.__name__} (key {self.response_class.API_KEY}) "
                "belong to different APIs; pair a request with its own response")
        low = max(self.request_class.valid_versions[0], self.response_class.valid_versions[0])
        high = min(self.request_class.max_version, self.response_class.max_version)
        if not low <= self.min_version <= self.max_version <= high:
            raise ValueError(
                f"{self.name} versions {self.min_version}-{self.max_version} are not "
                f"within {low}-{high}, the versions kafka-python's schema declares; "
                "advertise only versions the generated classes can decode")

    @property
    def api_key(self) -> int:
        return self.request_class.API_KEY

    @cached_property
    def name(self) -> str:  # read for every request's metrics and log lines: looked up once
        return api_name(self.api_key)

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


class ApiRegistry:
    """The APIs a server serves, by api key. Immutable once built."""

    def __init__(self, specs: Iterable[ApiSpec]) -> None:
        by_key: dict[int, ApiSpec] = {}
        for spec in specs:
            if spec.api_key in by_key:
                raise ValueError(f"{spec.name} (key {spec.api_key}) is listed twice")
            by_key[spec.api_key] = spec
        if API_VERSIONS not in by_key:
            raise ValueError("every Kafka server must serve ApiVersions; add its ApiSpec")
        self._by_key = dict(sorted(by_key.items()))
        # The request decoder's cache: a frame's first 4 bytes (api key, version) -> how to decode it
        # (:func:`zkcoord.wire.requests.decode_request`); it never changes what the registry serves.
        self.plans: dict[bytes, object] = {}
        # Its memo of repeated requests (rule 4 there): a frame but for its correlation id -> what it decoded to.
        self.memo: dict[bytes, tuple] = {}

    def get(self, api_key: int) -> ApiSpec | None:
        return self._by_key.get(api_key)

    def __getitem__(self, api_key: int) -> ApiSpec:
        return self._by_key[api_key]

    def __contains__(self, api_key: object) -> bool:
        return api_key in self._by_key

    def __iter__(self) -> Iterator[ApiSpec]:
        return iter(self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)

    def extended(self, *specs: ApiSpec) -> ApiRegistry:
        """A new registry with `specs` added (replacing same-key entries)."""
        replaced = {spec.api_key for spec in specs}
        return ApiRegistry([s for s in self if s.api_key not in replaced] + list(specs))

    def without(self, *api_keys: int) -> ApiRegistry:
        """A new registry without ``api_keys``."""
        return ApiRegistry([s for s in self if s.api_key not in api_keys])

    def classic_only(self) -> ApiRegistry:
        """What a listener advertises while its daemon does not serve KIP-848's
        consumer protocol: no ConsumerGroupHeartbeat or ConsumerGroupDescribe,
        and OffsetCommit / OffsetFetch up to v9 (v10 names topics by id, which
        only the topics image the consumer protocol needs can resolve)."""
        specs = []
        for spec in self:
            if spec.api_key in (CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE):
                continue
            if spec.api_key in (OFFSET_COMMIT, OFFSET_FETCH) and spec.max_version > 9:
                spec = dataclasses.replace(spec, max_version=9)
            specs.append(spec)
        return ApiRegistry(specs)

    def version_table(self) -> dict[int, tuple[int, int]]:
        """{api_key: (min_version, max_version)}, as advertised."""
        return {s.api_key: (s.min_version, s.max_version) for s in self}


# Kafka 3.9 ranges intersected with the versions kafka-python 3.0.12 declares.
# FindCoordinator stops at v4 (v5+ add transaction/share-group semantics) and
# ApiVersions at v3: a v4 ApiVersions request gets the KIP-511 reply and the
# client retries at v3.
COORDINATOR_APIS = ApiRegistry([
    ApiSpec(OffsetCommitRequest, OffsetCommitResponse, 2, 10),
    ApiSpec(OffsetFetchRequest, OffsetFetchResponse, 1, 10),
    ApiSpec(FindCoordinatorRequest, FindCoordinatorResponse, 0, 4),
    ApiSpec(JoinGroupRequest, JoinGroupResponse, 0, 9),
    ApiSpec(HeartbeatRequest, HeartbeatResponse, 0, 4),
    ApiSpec(LeaveGroupRequest, LeaveGroupResponse, 0, 5),
    ApiSpec(SyncGroupRequest, SyncGroupResponse, 0, 5),
    ApiSpec(DescribeGroupsRequest, DescribeGroupsResponse, 0, 5),
    ApiSpec(ListGroupsRequest, ListGroupsResponse, 0, 5),
    ApiSpec(ApiVersionsRequest, ApiVersionsResponse, 0, 3),
    ApiSpec(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2),
    ApiSpec(ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, 0, 1),
    ApiSpec(ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, 0, 1),
])

# A SASL listener's login APIs (docs/security-design.md rule 3): SaslHandshake v1 only (v0's raw
# tokens are gone in Kafka 4 too), SaslAuthenticate as Kafka 3.9 serves it.
SASL_APIS = (ApiSpec(SaslHandshakeRequest, SaslHandshakeResponse, 1, 1),
             ApiSpec(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2))
SASL_COORDINATOR_APIS = COORDINATOR_APIS.extended(*SASL_APIS)
