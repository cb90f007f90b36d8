"""The gateway's own answer to ApiVersions.

A gateway client learns from ApiVersions what it may send: for the group
APIs what zkcoord serves, for everything else what the brokers support
(capped where the gateway must decode the answer), as
:func:`zkcoord.core.gateway.advertised_versions` computes it (Kroxylicious's
``ApiVersionsServiceImpl``: the intersection of what the proxy and the
broker support). This module owns turning that table into the answer frame:

1. A version the gateway does not serve (above ApiVersions v3, or negative)
   gets KIP-511's answer: v0, UNSUPPORTED_VERSION, listing the table, so the
   client retries with a version it finds there.
2. From v3 the answer carries the brokers' extras (supported and finalized
   features) and zkcoord's rebalance notice feature where the daemon's
   handler offers it, as on the daemon's own listener. Extras that do not
   fit are left out (logged with the traceback): the table still goes out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kafka.protocol.metadata import ApiVersionsResponse

from zkcoord.core.api_keys import API_VERSIONS
from zkcoord.core.errors import ErrorCode
from zkcoord.core.gateway import VersionTable
from zkcoord.wire.errors import MessageBuildError
from zkcoord.wire.framing import FRAME_SIZE_PREFIX_BYTES
from zkcoord.wire.messages import build_message
from zkcoord.wire.registry import COORDINATOR_APIS
from zkcoord.wire.requests import DecodedRequest, decode_request
from zkcoord.wire.responses import encode_response, encode_response_frame

__all__ = ["versions_answer", "API_VERSIONS_SERVED"]

log = logging.getLogger(__name__)

API_VERSIONS_SERVED = COORDINATOR_APIS[API_VERSIONS].max_version
_UNSUPPORTED_VERSION = int(ErrorCode.UNSUPPORTED_VERSION)

# A decoded ApiVersions request -> the features zkcoord adds (the rebalance notice), [] for none.
NoticeFeatures = Callable[[DecodedRequest], list[dict]]


def versions_answer(frame: bytes, version: int, correlation_id: int, table: VersionTable, extras: dict,
                    notice_features: NoticeFeatures | None) -> tuple[bytes, int]:
    """(the answer frame, its error code) to the ApiVersions request ``frame``
    (whole, its prefix read already) from ``table`` and the brokers' v3
    ``extras``; the wire's errors when the request does not decode."""
    entries = [{"api_key": k, "min_version": low, "max_version": high} for k, (low, high) in table.items()]
    if not 0 <= version <= API_VERSIONS_SERVED:  # rule 1 (negative too)
        response = build_message(ApiVersionsResponse, 0, error_code=_UNSUPPORTED_VERSION, api_keys=entries)
        return encode_response_frame(response, 0, correlation_id), _UNSUPPORTED_VERSION
    decoded = decode_request(frame[FRAME_SIZE_PREFIX_BYTES:], COORDINATOR_APIS)
    if version >= 3 and notice_features is not None:
        extras = _with_notice(extras, notice_features(decoded))
    try:
        response = build_message(ApiVersionsResponse, version, error_code=0, api_keys=entries,
                                 throttle_time_ms=0, **(extras if version >= 3 else {}))
    except MessageBuildError:
        log.exception("gateway: the brokers' ApiVersions extras do not fit v%d; left out", version)
        response = build_message(ApiVersionsResponse, version, error_code=0, api_keys=entries, throttle_time_ms=0)
    return encode_response(decoded, response), 0


def _with_notice(extras: dict, features: list[dict]) -> dict:
    """The brokers' ApiVersions extras plus zkcoord's rebalance notice
    feature, which the handler advertises (and arms for a zkcoord
    consumer's notice connection) as on the daemon's own listener."""
    if not features:
        return extras
    return {**extras, "supported_features": [*extras.get("supported_features", []), *features]}
