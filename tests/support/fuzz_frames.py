"""Structure-aware fuzzing of zkcoord's Kafka listeners (the daemon's and the gateway's).

Owns three things, shared by ``bench/fuzz_daemon.py`` (100,000+ frames, run
by hand) and ``tests/integration/test_daemon_fuzz.py`` (a few thousand, fixed
seed):

* :func:`frames` - a hypothesis strategy of request frames. Each starts as a
  valid request built with kafka-python's generated classes (every API the
  daemon serves, at every version it serves, plus out-of-range versions and
  unknown api keys), with field values drawn from the schema, and then is
  mutated: truncated, extended, a length or array count overwritten (huge,
  negative, -1 = null), invalid UTF-8 spliced in, bytes flipped, a tagged
  field section appended to flexible versions, a wrong client id or size
  prefix. Strings are mostly ``fuzz-*`` group names so that fuzzed requests
  never touch the canary's group by chance.
* :class:`Sender` - sends one frame on a blocking socket and classifies what
  came back: an answer (with the top-level error code when the response
  decodes), the connection closed by the server, or nothing within the
  timeout (a hang, unless the request may legitimately be parked: JoinGroup,
  SyncGroup, or a frame whose size prefix promises more bytes than sent).
* :class:`Canary` - a real group member on its own connection, heartbeating
  every ``interval_s`` on a thread; it counts failures and keeps latencies.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
import warnings
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import HypothesisDeprecationWarning
from hypothesis import seed as seed_of
from hypothesis import strategies as st
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest, MetadataResponse
from kafka.protocol.parser import KafkaProtocol

from zkcoord.wire.messages import build_message
from zkcoord.wire.registry import COORDINATOR_APIS, ApiSpec

GROUPS = tuple(f"fuzz-{i}" for i in range(8))
UNKNOWN_KEYS = (0, 1, 2, 4, 17, 19, 36, 60, 68, 999, 32767, -1, -32768)
PARKED_KEYS = frozenset({11, 14})  # JoinGroup, SyncGroup: an answer may wait for a rebalance
EDGE_INT32 = (-1, -2, 0, 1, 0x7FFFFFFF, -0x80000000, 0x10000, 0x7FFFFFF0)
EDGE_INT16 = (-1, -2, 0, 0x7FFF, -0x8000)
INVALID_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80")
HUGE_VARINTS = (b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x80\x01", b"\xff\xff\x7f")


def target_specs(gateway: bool) -> tuple[ApiSpec, ...]:
    """The APIs to fuzz: the daemon's; for the gateway also Metadata (forwarded, its answer rewritten)."""
    specs = tuple(COORDINATOR_APIS)
    if gateway:
        specs += (ApiSpec(MetadataRequest, MetadataResponse, 0, min(12, MetadataRequest.max_version)),)
    return specs


def run_fuzz(sender: "Sender", count: int, seed: int, specs: tuple[ApiSpec, ...]) -> "Outcomes":
    """Send ``count`` frames drawn by hypothesis from ``seed`` (same seed, same frames)."""

    @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seed_of(seed)
    @given(frames(specs))
    def one(frame: Frame) -> None:
        sender.send(frame)

    with warnings.catch_warnings():
        # The daemon and gateway under test run threads of this process (kafka-python's network
        # manager draws reconnect jitter from the global `random`) while hypothesis draws a frame;
        # hypothesis takes that for a strategy using `random`. Frames come from the seed alone.
        warnings.filterwarnings("ignore", message="Do not use the `random` module inside strategies",
                                category=HypothesisDeprecationWarning)
        one()
    return sender.outcomes


# -- values from the schema ------------------------------------------------------------------

_STRINGS = st.one_of(st.sampled_from(GROUPS), st.sampled_from(GROUPS), st.text(max_size=12),
                     st.just(""), st.sampled_from(("consumer", "range", "roundrobin", "cooperative-sticky")))
_INTS = {
    "int8": st.integers(-128, 127),
    "int16": st.one_of(st.sampled_from(EDGE_INT16), st.integers(-0x8000, 0x7FFF)),
    "int32": st.one_of(st.sampled_from(EDGE_INT32 + (6000, 10000, 30000)), st.integers(-0x80000000, 0x7FFFFFFF)),
    "int64": st.one_of(st.sampled_from((-1, 0, 10, 2**63 - 1, -(2**63))), st.integers(-(2**63), 2**63 - 1)),
}


def _value(fld, version: int, depth: int):
    """A strategy of plain values for one schema field at ``version``."""
    nullable = fld.nullable_for_version_q(version)
    if fld.is_struct_array():
        strategy = st.lists(_struct(fld.fields, version, depth + 1), max_size=3 if depth < 2 else 1)
    elif fld.is_struct():
        strategy = _struct(fld.fields, version, depth + 1)
    elif fld.is_array():
        inner = fld.type_str[2:]
        item = _INTS.get(inner, _STRINGS)
        strategy = st.lists(item, max_size=4)
    elif fld.type_str in _INTS:
        strategy = _INTS[fld.type_str]
    elif fld.type_str == "string":
        strategy = _STRINGS
    elif fld.type_str in ("bytes", "records"):
        strategy = st.binary(max_size=48)
    elif fld.type_str == "bool":
        strategy = st.booleans()
    elif fld.type_str == "uuid":
        strategy = st.uuids()
    else:
        return st.nothing()
    return st.one_of(st.none(), strategy) if nullable else strategy


_STRUCTS: dict[tuple[int, int, int], tuple[object, st.SearchStrategy]] = {}


def _struct(schema, version: int, depth: int = 0):
    """A strategy of field-value mappings for ``schema`` at ``version`` (built once, cached)."""
    key = (id(schema), version, depth)
    found = _STRUCTS.get(key)
    if found is None or found[0] is not schema:
        fields = {name: _value(f, version, depth) for name, f in schema.items()
                  if f.for_version_q(version) and not f.tagged_field_q(version)}
        found = _STRUCTS[key] = (schema, st.fixed_dictionaries(fields))  # the schema kept: its id stays its own
    return found[1]


# -- frames ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Frame:
    """One generated frame and what it claims to be."""

    data: bytes
    api_key: int
    api_version: int
    correlation_id: int
    mutations: tuple[str, ...]
    short_prefix: bool = False  # the size prefix promises more bytes than were sent

    @property
    def label(self) -> str:
        return f"key {self.api_key} v{self.api_version} [{', '.join(self.mutations) or 'valid'}]"


def _mutate(draw, body: bytes, flexible: bool) -> tuple[bytes, list[str]]:
    data = bytearray(body)
    done = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(("truncate", "extend", "int32", "int16", "varint", "utf8", "flip",
                                     "tagged", "zero")))
        pos = draw(st.integers(0, len(data)))
        if kind == "truncate":
            del data[pos:]
        elif kind == "extend":
            data += draw(st.binary(min_size=1, max_size=16))
        elif kind == "int32":
            data[pos:pos + 4] = struct.pack(">i", draw(st.sampled_from(EDGE_INT32)))
        elif kind == "int16":
            data[pos:pos + 2] = struct.pack(">h", draw(st.sampled_from(EDGE_INT16)))
        elif kind == "varint":
            data[pos:pos + 1] = draw(st.sampled_from(HUGE_VARINTS))
        elif kind == "utf8":
            data[pos:pos] = draw(st.sampled_from(INVALID_UTF8))
        elif kind == "flip" and data:
            at = min(pos, len(data) - 1)
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "tagged" and flexible and data:
            # Replace the top-level (empty) tag buffer with tagged fields whose sizes may lie.
            count = draw(st.integers(1, 3))
            tagged = bytearray([count])
            for _ in range(count):
                tag = draw(st.integers(0, 120))
                payload = draw(st.binary(max_size=8))
                size = draw(st.one_of(st.just(len(payload)), st.integers(0, 120)))
                tagged += bytes([tag, size]) + payload
            data[-1:] = tagged
        elif kind == "zero":
            data[pos:pos + 8] = bytes(8)
        else:
            continue
        done.append(kind)
    return bytes(data), done


@st.composite
def frames(draw, specs: tuple[ApiSpec, ...] = tuple(COORDINATOR_APIS)) -> Frame:
    """A request frame: a valid request of a served (or unknown) api/version, then mutated."""
    mutations: list[str] = []
    choice = draw(st.integers(0, 19))
    if choice == 0:  # an api key nobody serves here, any version, random body
        key, version = draw(st.sampled_from(UNKNOWN_KEYS)), draw(st.integers(-1, 20))
        body, flexible = draw(st.binary(max_size=32)), False
        mutations.append("unknown-key")
    else:
        spec = draw(st.sampled_from(specs))
        key = spec.api_key
        if choice == 1:
            version = draw(st.sampled_from((-1, spec.min_version - 1, spec.max_version + 1, 32767, -32768)))
            mutations.append("bad-version")
        else:
            version = draw(st.integers(spec.min_version, spec.max_version))
        build_version = min(max(version, spec.request_class.valid_versions[0]), spec.request_class.max_version)
        flexible = spec.request_class.flexible_version_q(build_version)
        values = draw(_struct(spec.request_class.fields, build_version))
        try:
            body = bytes(build_message(spec.request_class, build_version, **values).encode(version=build_version))
        except Exception:  # a value the encoder refuses (nulls where not allowed, ...): send something else
            body = draw(st.binary(max_size=32))
            mutations.append("unencodable")
        body, more = _mutate(draw, body, flexible)
        mutations += more
    correlation_id = draw(st.integers(0, 0x7FFFFFFF))
    client_id = draw(st.one_of(st.just("fuzz"), st.none(), st.text(max_size=8)))
    header = bytearray(RequestHeader(request_api_key=key if -0x8000 <= key <= 0x7FFF else 0,
                                     request_api_version=version, correlation_id=correlation_id,
                                     client_id=client_id).encode(flexible=flexible))
    if draw(st.integers(0, 30)) == 0:  # a client id with a lying length or invalid UTF-8
        header[8:10] = struct.pack(">h", draw(st.sampled_from((-2, 0x7FFF, 3))))
        header[10:10] = draw(st.sampled_from(INVALID_UTF8))
        mutations.append("client-id")
    payload = bytes(header) + body
    size, short = len(payload), False
    prefix_kind = draw(st.integers(0, 60))
    if prefix_kind == 0:
        size = draw(st.sampled_from((-1, -0x80000000, 0x7FFFFFFF, 0x10000000)))
        mutations.append(f"size={size}")
        short = 0 < size
    elif prefix_kind == 1 and size > 0:
        size = draw(st.integers(0, size - 1))  # the rest of the payload becomes the next frame
        mutations.append("size-short")
    elif prefix_kind == 2:
        size += draw(st.integers(1, 64))
        mutations.append("size-long")
        short = True
    return Frame(struct.pack(">i", size) + payload, key, version, correlation_id, tuple(mutations), short)


# -- sending -------------------------------------------------------------------------------------

@dataclass
class Outcomes:
    """What the server did with the frames sent."""

    sent: int = 0
    by_outcome: Counter = field(default_factory=Counter)
    hangs: list[str] = field(default_factory=list)
    refused_connects: int = 0

    def add(self, outcome: str, frame: Frame) -> None:
        self.sent += 1
        self.by_outcome[outcome] += 1
        if outcome == "hang":
            self.hangs.append(frame.label)


class Sender:
    """Sends frames to ``host:port``, one at a time, on a connection reopened
    whenever the server closed it (or the frame left it in an unknown state)."""

    def __init__(self, host: str, port: int, *, answer_timeout_s: float = 10.0, parked_timeout_s: float = 2.0):
        self.address = (host, port)
        self.answer_timeout_s = answer_timeout_s
        self.parked_timeout_s = parked_timeout_s
        self.outcomes = Outcomes()
        self._sock: socket.socket | None = None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            for attempt in range(50):
                try:
                    self._sock = socket.create_connection(self.address, timeout=5)
                    break
                except OSError:
                    self.outcomes.refused_connects += 1
                    time.sleep(0.1)
            else:
                raise ConnectionError(f"{self.address} refuses connections: the server is down")
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._sock

    def send(self, frame: Frame) -> str:
        outcome = self._send(frame)
        self.outcomes.add(outcome, frame)
        return outcome

    def _send(self, frame: Frame) -> str:
        sock = self._connect()
        try:
            sock.sendall(frame.data)
        except OSError:
            self.close()
            return "closed by server (while sending)"
        if frame.short_prefix:  # the server must wait for bytes that never come: give up the connection
            outcome = self._read_answer(sock, 0.05, frame)
            self.close()
            return "incomplete frame, client closed" if outcome == "hang" else outcome
        parked = frame.api_key in PARKED_KEYS
        outcome = self._read_answer(sock, self.parked_timeout_s if parked else self.answer_timeout_s, frame)
        if outcome == "hang" and parked:
            self.close()
            return "parked join/sync, client closed"
        if outcome.startswith("answered") and "size-short" not in frame.mutations:
            return outcome
        self.close()  # after a hang, a close or a split frame the stream's state is unknown
        return outcome

    def _read_answer(self, sock: socket.socket, timeout_s: float, frame: Frame) -> str:
        deadline = time.monotonic() + timeout_s
        buffer = b""
        while True:
            if len(buffer) >= 4:
                size = struct.unpack(">i", buffer[:4])[0]
                if len(buffer) >= 4 + size:
                    return self._classify(buffer[4:4 + size], frame)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "hang"
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                return "hang"
            except OSError:
                return "closed by server (reset)"
            if not chunk:
                return "closed by server"
            buffer += chunk

    @staticmethod
    def _classify(payload: bytes, frame: Frame) -> str:
        correlation_id = struct.unpack(">i", payload[:4])[0] if len(payload) >= 4 else None
        if correlation_id != frame.correlation_id:
            return "answered (another correlation id)"
        code = _error_code(payload, frame)
        return "answered, error 0" if code == 0 else "answered, error code" if code is not None else "answered"


def _error_code(payload: bytes, frame: Frame) -> int | None:
    """The top-level error code of an answer, when the answer decodes as the request's response."""
    spec = COORDINATOR_APIS.get(frame.api_key)
    if spec is None or frame.api_key == 18:  # ApiVersions: the error is its first field, header v0
        return struct.unpack(">h", payload[4:6])[0] if frame.api_key == 18 and len(payload) >= 6 else None
    try:
        header_bytes = 5 if spec.response_class.flexible_version_q(frame.api_version) else 4
        message = spec.response_class.decode(payload[header_bytes:], version=frame.api_version)
    except Exception:
        return None
    code = getattr(message, "error_code", None)
    if code is None:
        for name in ("groups", "results", "topics"):
            items = getattr(message, name, None) or []
            codes = [getattr(i, "error_code", 0) for i in items]
            if codes:
                return max(codes, key=abs)
        return 0
    return code


# -- the canary -----------------------------------------------------------------------------------

class Canary(threading.Thread):
    """A real member of ``group`` heartbeating on a connection of its own."""

    def __init__(self, host: str, port: int, group: str, *, interval_s: float = 0.1, timeout_s: float = 30.0):
        super().__init__(name="fuzz-canary", daemon=True)
        self.address, self.group = (host, port), group
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.latencies_s: list[float] = []
        self.failures: list[str] = []
        self.stopping = threading.Event()
        self.joined = threading.Event()
        self.member_id = ""
        self.generation = -1
        self._protocol = KafkaProtocol(client_id="fuzz-canary")
        self._sock: socket.socket | None = None

    def _call(self, request):
        self._protocol.send_request(request)
        self._sock.sendall(self._protocol.send_bytes())
        self._sock.settimeout(self.timeout_s)
        while True:
            data = self._sock.recv(65536)
            if not data:
                raise ConnectionError("the daemon closed the canary's connection")
            responses = self._protocol.receive_bytes(data)
            if responses:
                return responses[0][1]

    def _find_coordinator(self) -> None:
        """Ask until this daemon owns the group (it contends on FindCoordinator)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            answer = self._call(FindCoordinatorRequest(version=2, key=self.group, key_type=0))
            if answer.error_code == 0:
                return
            if time.monotonic() > deadline:
                raise ConnectionError(f"canary FindCoordinator failed with error {answer.error_code}")
            time.sleep(0.1)

    def _join(self) -> None:
        self._find_coordinator()
        join = JoinGroupRequest(version=5, group_id=self.group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
                                member_id=self.member_id, group_instance_id=None, protocol_type="consumer",
                                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
        answer = self._call(join)
        if answer.error_code == 79:  # MEMBER_ID_REQUIRED
            self.member_id = answer.member_id
            join.member_id = answer.member_id
            answer = self._call(join)
        if answer.error_code:
            raise ConnectionError(f"canary JoinGroup failed with error {answer.error_code}")
        self.member_id, self.generation = answer.member_id, answer.generation_id
        sync = SyncGroupRequest(version=3, group_id=self.group, generation_id=self.generation,
                                member_id=self.member_id, group_instance_id=None,
                                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                                    member_id=self.member_id, assignment=b"")])
        answer = self._call(sync)
        if answer.error_code:
            raise ConnectionError(f"canary SyncGroup failed with error {answer.error_code}")

    def start_member(self) -> None:
        self._sock = socket.create_connection(self.address, timeout=self.timeout_s)
        self._join()
        self.joined.set()
        self.start()

    def run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            request = HeartbeatRequest(version=4, group_id=self.group, generation_id=self.generation,
                                       member_id=self.member_id, group_instance_id=None)
            started = time.monotonic()
            try:
                answer = self._call(request)
            except (OSError, ConnectionError) as exc:
                self.failures.append(f"heartbeat: {exc!r}")
                try:
                    self._sock.close()
                    self._sock = socket.create_connection(self.address, timeout=self.timeout_s)
                    self._protocol = KafkaProtocol(client_id="fuzz-canary")
                    self._join()
                except (OSError, ConnectionError) as again:
                    self.failures.append(f"rejoin: {again!r}")
                continue
            self.latencies_s.append(time.monotonic() - started)
            if answer.error_code:
                self.failures.append(f"heartbeat error {answer.error_code}")

    def stop(self) -> None:
        self.stopping.set()
        self.join(self.timeout_s + 5)
        if self._sock is not None:
            self._sock.close()

    def p99_ms(self) -> float | None:
        if not self.latencies_s:
            return None
        ordered = sorted(self.latencies_s)
        return 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def canary_group() -> str:
    return f"canary-{uuid.uuid4().hex[:8]}"
