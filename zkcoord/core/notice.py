"""The rebalance notice: held heartbeats on a connection that asks for them.

In Kafka's classic group protocol a member learns that its group is
rebalancing only from the answer to a request it sends, so a rebalance waits
up to one heartbeat interval for the member whose heartbeat comes last. A
zkcoord daemon can tell its own clients sooner without leaving the protocol:
on a connection whose ApiVersions request names :data:`CLIENT_SOFTWARE_NAME`
(KIP-511's ClientSoftwareName), a Heartbeat of a Stable member is answered
only when the group stops being Stable in that generation, or after
:func:`hold_ms`, whichever is first; the answer is then the one a heartbeat
arriving at that moment would get (REBALANCE_IN_PROGRESS, or NONE), while
the member's session restarted only when the held heartbeat arrived. A client
keeping one such heartbeat in flight on a connection of its own learns of a
rebalance in one network round trip.

Daemons that hold heartbeats say so in every ApiVersions answer of v3 and
later, as a supported feature (KIP-584's SupportedFeatures) named
:data:`FEATURE`. Kafka brokers, older daemons and daemons with the hold
turned off do not, and a client must then not rely on it. Other clients
never name the software, so nothing changes for them: a Kafka client's
heartbeat is answered at once, as by a broker.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from zkcoord.core.group_states import BEHAVIOUR
from zkcoord.core.membership import Group
from zkcoord.core.phases import GroupPhase

CLIENT_SOFTWARE_NAME = "zkcoord-notice"
FEATURE = "zkcoord.rebalance.notice"
FEATURE_VERSION = 1
DEFAULT_HOLD_MS = 5_000


def hold_ms(group: Group, member_id: str, generation_id: int, configured_ms: int) -> int:
    """How long a heartbeat of ``member_id`` in ``generation_id``, just
    answered NONE, may be held: 0 (answer now) unless the group is Stable in
    that generation and the member is in it; at most ``configured_ms`` and
    half the member's session timeout, so a held heartbeat alone keeps the
    member's session alive."""
    if (configured_ms <= 0 or not isinstance(group, Group) or BEHAVIOUR[group.state].phase is not GroupPhase.STABLE
            or group.generation_id != generation_id):
        return 0  # held only for classic members: other group types tell their members their own way
    member = group.members.get(member_id)
    if member is None:
        return 0
    return max(0, min(configured_ms, member.session_timeout_ms // 2))
