"""Kafka's messages that kafka-python does not have yet, generated from
Kafka's own JSON message definitions (copied here unchanged from Apache
Kafka 4.4.0's ``clients/src/main/resources/common/message/``, license
headers included) by kafka-python's schema machinery: the same codec as
every other message zkcoord speaks, nothing written by hand.

* ConsumerGroupHeartbeat (API 68, v0-1) and ConsumerGroupDescribe (API 69,
  v0-1): KIP-848's consumer group protocol.

When kafka-python ships one of these, its own class replaces ours here.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

__all__ = ["ConsumerGroupDescribeRequest", "ConsumerGroupDescribeResponse",
           "ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse"]


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=__name__): pass  # noqa: E701
class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=__name__): pass  # noqa: E701
class ConsumerGroupDescribeRequest(ApiMessage, load_json=__name__): pass  # noqa: E701
class ConsumerGroupDescribeResponse(ApiMessage, load_json=__name__): pass  # noqa: E701
