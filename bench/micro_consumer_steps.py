"""Where a KIP-848 heartbeat's CPU goes in the daemon, piece by piece, in one process (no sandbox).

    .venv/bin/python bench/micro_consumer_steps.py 100 1000      # members, partitions
    .venv/bin/python bench/micro_consumer_steps.py 1000 10000    # ~1.5 minutes to build the group

A group of N members over one topic of P partitions is built with the core's own handler
(joins, then heartbeats until every member is at its target). Then one member's steady
heartbeat (every optional field null) is decoded, decided, answered and encoded, as
zkcoord/server/consumer_apis.py ``heartbeat_now`` and the transport do; then a join (the
target computed) and one old member's epoch-only step (what the daemon persists). Each
piece is timed with ``time.process_time`` (CPU, best of 5), so other work on the machine
matters less. Used by bench_consumer_protocol.py's analysis in RESULTS.md.
"""
import sys
import time
import timeit
import uuid
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]
from dataclasses import replace
from zkcoord.schemas import ConsumerGroupHeartbeatRequest
from zkcoord.wire.messages import build_message
from zkcoord.wire.requests import decode_request
from zkcoord.wire.responses import encode_response, response_for, cached_response
from zkcoord.core.consumer.messages import ConsumerHeartbeatRequest
from zkcoord.core.membership import GroupConfig
from zkcoord.core.topics_image import TopicsImage, TopicInfo
from zkcoord.core import groups
from zkcoord.core.consumer.model import new_consumer_group
from zkcoord.topic_ids import topic_id_text, topic_id_uuid
from zkcoord.server.consumer_apis import ConsumerGroupApis

N, P = int(sys.argv[1]), int(sys.argv[2])
tid = topic_id_text(uuid.uuid4())
config = GroupConfig(image=TopicsImage.of([TopicInfo("t", tid, P)]))
group = new_consumer_group("g")
ids = [f"member-{i:04d}-xxxxxxxxxxx" for i in range(N)]
epochs, owned = {m: 0 for m in ids}, {m: () for m in ids}
now = 1_000_000

def beat(m, join=False):
    global group
    req = ConsumerHeartbeatRequest(token=1, group_id="g", member_id=m, member_epoch=epochs[m],
                                   rebalance_timeout_ms=300000 if join else -1,
                                   subscribed_topic_names=("t",) if join else None,
                                   owned=((tid, tuple(sorted(owned[m]))),) if not join else ())
    out = groups.decide(group, req, now, config)
    group = out.group
    res = out.replies[-1].payload
    assert int(res.error) == 0, res
    epochs[m] = res.member_epoch
    if res.assignment is not None:
        owned[m] = tuple(p for t, ps in res.assignment.items() for p in ps)
for m in ids:
    beat(m, join=True)
for _ in range(6):
    now += 2000
    for m in ids:
        beat(m)
assert len({epochs[m] for m in ids}) == 1 and sum(len(owned[m]) for m in ids) == P, (set(epochs.values()))

m = ids[N // 2]
wire = build_message(ConsumerGroupHeartbeatRequest, 1, group_id="g", member_id=m, member_epoch=epochs[m],
                     instance_id=None, rack_id=None, rebalance_timeout_ms=-1, subscribed_topic_names=None,
                     subscribed_topic_regex=None, server_assignor=None, topic_partitions=None)
wire.with_header(correlation_id=7, client_id=f"bench-{m}")
frame = bytes(wire.encode(framed=False, header=True))
decoded = decode_request(frame)

class Conn:
    client_host = "/127.0.0.1"
def core_request():
    return ConsumerGroupApis._core_request(None, decoded, Conn, 1)
req = core_request()
group = groups.decide(group, req, now, config).group  # the member's client id and host as the daemon sees them
assert groups.decide(group, req, now, config).group is group or True
def decide():
    return groups.decide(group, req, now, config)
result = decide().replies[-1].payload
def answer():
    return ConsumerGroupApis._answer(decoded, result)
response = answer()
def encode():
    return encode_response(decoded, answer())
def cached():
    return encode_response(decoded, cached_response(decoded, (int(result.error), result.member_id, result.member_epoch,
                                                              result.heartbeat_interval_ms), lambda: dict(
        throttle_time_ms=0, error_code=0, error_message=None, member_id=result.member_id,
        member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=None)))
assert cached() == encode()
out = decide()
print(f"steady: persist={out.persist}, same group={out.group is group}, timers={[type(t).__name__ for t in out.timers]}")
for name, fn in [("decode_request", lambda: decode_request(frame)), ("core request (_core_request)", core_request),
                 ("decide (groups.decide -> handle_consumer_heartbeat)", decide),
                 ("answer (_answer: response_for)", answer), ("answer + encode", encode),
                 ("cached answer + encode (constant_response-like)", cached),
                 ("with_member (any step that changes a member: O(members + its partitions))",
                  lambda: group.with_member(replace(group.members[m], client_id="x")))]:
    n = 20000 if not name.startswith('with_member') else 200
    best = min(timeit.Timer(fn, timer=time.process_time).repeat(number=n, repeat=5)) / n * 1e6
    print(f"{name:<55} {best:7.1f} us")

# -- a persisting step: one old member told its new epoch after a join ------------------------------
from zkcoord.core.consumer.kind import ConsumerKind
from zkcoord.zk.group_records import encode_record
newcomer = "member-new-xxxxxxxxxxxx"
epochs[newcomer], owned[newcomer] = 0, ()
now += 2000
before = group
join_req = ConsumerHeartbeatRequest(token=1, group_id="g", member_id=newcomer, member_epoch=0, rebalance_timeout_ms=300000,
                                    subscribed_topic_names=("t",), owned=(), client_id=f"bench-{newcomer}",
                                    client_host="/127.0.0.1")
def join():
    return groups.decide(before, join_req, now, config)
joined = join().group
old = [x for x in ids if joined.target(x) == before.target(x)][0]
step_req = replace(req, member_id=old, member_epoch=epochs[old])
def step():
    return groups.decide(joined, step_req, now, config)
stepped = step()
assert stepped.persist
kind = ConsumerKind()
def writes():
    return [encode_record("g", r) for k, r, e in kind.writes(joined, stepped.group) if r is not None]
for name, fn, n in [("join: decide (computes the target, uniform)", join, 20),
                    ("epoch-only step: decide", step, 200),
                    ("epoch-only step: ConsumerKind.writes + JSON of its records", writes, 200),
                    ("summary log line of a write (server/manager.py _on_persisted)",
                     lambda: kind.summary(stepped.group) if hasattr(kind, "summary") else "", 200)]:
    best = min(timeit.Timer(fn, timer=time.process_time).repeat(number=n, repeat=5)) / n * 1e6
    print(f"{name:<70} {best:9.1f} us")
