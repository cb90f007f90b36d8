"""``make demo``'s summary of a daemon's /health and /metrics
(zkcoord.local.demo_metrics), fed a real daemon registry's exposition text."""

from __future__ import annotations

from kafka.protocol.consumer.group import HeartbeatResponse, JoinGroupResponse

from zkcoord.local.demo_metrics import summary
from zkcoord.server.metrics import DaemonMetrics
from zkcoord.wire.messages import build_message

URL = "http://127.0.0.1:29501"


class Connected:
    connected = True


def test_summary_of_health_groups_session_and_requests_per_api_with_errors():
    metrics = DaemonMetrics(conn=Connected())
    for error_code in (0, 0, 0, 27, 27, 25):
        metrics.observe_request("Heartbeat", build_message(HeartbeatResponse, 3, error_code=error_code))
    metrics.observe_request("JoinGroup", build_message(JoinGroupResponse, 5, error_code=79, generation_id=-1,
                                                       protocol_name="", leader="", member_id="m", members=[]))
    metrics.rebalances.inc(2)
    metrics.rebalance_duration.observe(0.5)
    metrics.rebalance_duration.observe(1.5)

    lines = summary(URL, (200, b'{"status": "ready", "groups_owned": 0}\n'), metrics.render().decode())

    assert lines == [
        f"{URL}  /health: 200 ready",
        "  groups owned 0, members 0, rebalances 2 (mean 1.00 s from PreparingRebalance to Stable)",
        "  ZooKeeper session connected, 0 expiries",
        "  requests answered, by API:",
        "    Heartbeat       6  errors: REBALANCE_IN_PROGRESS 2, UNKNOWN_MEMBER_ID 1",
        "    JoinGroup       1  errors: MEMBER_ID_REQUIRED 1",
    ]


def test_summary_says_what_did_not_answer():
    assert summary(URL, None, None) == [f"{URL}: no answer (is the daemon up? `zkcoord local status`)"]
    unready = summary(URL, (503, b'{"status": "unavailable", "reason": "ZooKeeper not connected"}'),
                      DaemonMetrics().render().decode())
    assert unready[:3] == [f"{URL}  /health: 503 unavailable: ZooKeeper not connected",
                           "  groups owned 0, members 0, rebalances 0",
                           "  ZooKeeper session NOT connected, 0 expiries"]
    assert unready[-1] == "    (none yet)"
