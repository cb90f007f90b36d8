"""Shared helpers for the group state-machine tests (no tests here).

``Harness`` is a fake runtime: it applies each Outcome the way the real
runtime must (persist first, then timers in order, then replies), keeps the
armed timers as data, and fires them when the fake clock is advanced.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zkcoord.core.group import (
    Cancel,
    Group,
    GroupConfig,
    HeartbeatRequest,
    JoinRequest,
    LeaveRequest,
    Outcome,
    Reply,
    Schedule,
    SyncRequest,
    handle_heartbeat,
    handle_join,
    handle_leave,
    handle_sync,
    handle_timer,
    new_group,
    to_record,
)

GROUP_ID = "g"
SESSION_MS = 10_000
REBALANCE_MS = 30_000


def join_req(
    token: object,
    member_id: str = "",
    *,
    new_member_id: str | None = None,
    instance_id: str | None = None,
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),),
    protocol_type: str = "consumer",
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    require_known: bool = False,
    skip: bool = False,
    client_id: str = "client",
) -> JoinRequest:
    return JoinRequest(
        token=token, group_id=GROUP_ID, member_id=member_id, group_instance_id=instance_id,
        client_id=client_id, client_host="/10.0.0.1", session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms, protocol_type=protocol_type, protocols=protocols,
        require_known_member_id=require_known,
        new_member_id=new_member_id if new_member_id is not None else f"new-{token}",
        reason=None, support_skipping_assignment=skip,
    )


@dataclass
class Harness:
    group: Group = field(default_factory=lambda: new_group(GROUP_ID))
    config: GroupConfig = field(default_factory=GroupConfig)
    now: int = 0
    timers: dict[str, int] = field(default_factory=dict)
    replies: dict[object, Reply] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)

    def apply(self, outcome: Outcome) -> Outcome:
        if outcome.persist:
            self.records.append(to_record(outcome.group))
        self.group = outcome.group
        for op in outcome.timers:
            if isinstance(op, Schedule):
                self.timers[op.key] = op.deadline_ms
            else:
                assert isinstance(op, Cancel)
                self.timers.pop(op.key, None)
        for reply in outcome.replies:
            assert reply.token not in self.replies, f"token {reply.token!r} answered twice"
            self.replies[reply.token] = reply
        self.outcomes.append(outcome)
        return outcome

    # -- requests ----------------------------------------------------------
    def join(self, token: object, member_id: str = "", **kw: object) -> Outcome:
        return self.apply(handle_join(self.group, join_req(token, member_id, **kw), self.now, self.config))

    def sync(self, token: object, member_id: str, generation: int | None = None,
             assignments: dict[str, bytes] | None = None, instance_id: str | None = None,
             **kw: object) -> Outcome:
        gen = self.group.generation_id if generation is None else generation
        req = SyncRequest(token, member_id, gen, instance_id, assignments=assignments or {}, **kw)
        return self.apply(handle_sync(self.group, req, self.now, self.config))

    def heartbeat(self, token: object, member_id: str, generation: int | None = None,
                  instance_id: str | None = None) -> Outcome:
        gen = self.group.generation_id if generation is None else generation
        req = HeartbeatRequest(token, member_id, gen, instance_id)
        return self.apply(handle_heartbeat(self.group, req, self.now, self.config))

    def leave(self, token: object, *members: tuple[str, str | None]) -> Outcome:
        return self.apply(handle_leave(self.group, LeaveRequest(token, members), self.now, self.config))

    def fire(self, key: str) -> Outcome:
        return self.apply(handle_timer(self.group, key, self.now, self.config))

    # -- clock -------------------------------------------------------------
    def advance(self, to_ms: int) -> None:
        """Move the clock to ``to_ms``, firing due timers in deadline order."""
        while True:
            due = sorted((d, k) for k, d in self.timers.items() if d <= to_ms)
            if not due:
                break
            deadline, key = due[0]
            del self.timers[key]
            self.now = max(self.now, deadline)
            self.fire(key)
        self.now = to_ms

    def payload(self, token: object):  # noqa: ANN201 - any payload type
        return self.replies[token].payload

    def answered(self, token: object) -> bool:
        return token in self.replies


def stable_harness(n: int = 2, *, instance_ids: bool = False, config: GroupConfig | None = None,
                   protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),)) -> Harness:
    """A Stable generation-1 group with members m1..mn (m1 leads), assignment
    ``b"a-<id>"`` each; the clock stands just after the leader's SyncGroup."""
    h = Harness(config=config or GroupConfig())
    for i in range(1, n + 1):
        h.join(f"j{i}", new_member_id=f"m{i}", instance_id=f"i{i}" if instance_ids else None,
               protocols=protocols)
    h.advance(h.timers["join"])
    while h.group.state.value == "PreparingRebalance":
        h.advance(h.timers["join"])
    assert h.group.generation_id == 1 and h.group.leader_id == "m1"
    for i in range(2, n + 1):
        h.sync(f"s{i}", f"m{i}")
    h.sync("s1", "m1", assignments={f"m{i}": f"a-m{i}".encode() for i in range(1, n + 1)})
    assert h.group.state.value == "Stable"
    return h


def keep_alive(h: Harness, member_ids: list[str], until: int, step: int = 5000) -> None:
    """Advance to ``until`` while ``member_ids`` heartbeat every ``step`` ms
    (first heartbeat right away, so a session is never left to lapse)."""
    while True:
        for mid in member_ids:
            if mid in h.group.members:
                member = h.group.members[mid]
                h.heartbeat(f"ka-{mid}-{h.now}-{len(h.outcomes)}", mid, instance_id=member.group_instance_id)
        if h.now >= until:
            return
        h.advance(min(h.now + step, until))
