"""The answers a gateway client is owed, written in the order it asked.

Kafka clients pair answers with requests by order on a connection, so a
gateway connection must answer in request order whoever made each answer:
the daemon's handler (a group request), the gateway itself (ApiVersions, a
login), or the broker (everything forwarded). Owns :class:`AnswerOrder`
(Kroxylicious's ``ResponseOrderer``): a slot per request that expects an
answer, taken when the request is read, filled when its answer is made,
written once every earlier slot is.

A broker answer whose slot is next can instead be streamed: its slot leaves
the queue and its bytes go out as they arrive, ahead of every slot, until
the stream ends; meanwhile no slot is written. Writes are gathered and go
out in one call per :meth:`AnswerOrder.flush`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

__all__ = ["AnswerOrder", "Slot"]


class Slot:
    """One request's place in the answer order; ``data`` is its answer frame once made."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: bytes | None = None


class AnswerOrder:
    """The client connection's answers in request order; ``write(chunks)``
    sends bytes to the client (one call per flush)."""

    __slots__ = ("_slots", "_out", "streaming", "_write", "_closed")

    def __init__(self, write: Callable[[list], None]) -> None:
        self._slots: deque[Slot] = deque()  # answers not written yet, in request order
        self._out: list = []  # what goes out at the next flush: streamed bytes, then ready answers
        self.streaming = False  # a broker answer is being written through
        self._write = write
        self._closed = False

    @property
    def waiting(self) -> int:
        """Requests whose answers are not written yet (a streamed one not counted)."""
        return len(self._slots)

    @property
    def owed(self) -> bool:
        """An answer is owed to the client, or is being streamed to it."""
        return bool(self._slots) or self.streaming

    def reserve(self) -> Slot:
        """A place for the answer of the request just read."""
        slot = Slot()
        self._slots.append(slot)
        return slot

    def answer_now(self, data: bytes) -> None:
        """An answer made as its request is read: out at the next flush when
        nothing is ahead of it, else in its turn."""
        if not self._slots and not self.streaming:
            self._out.append(data)
        else:
            self.reserve().data = data

    def stream_if_next(self, slot: Slot) -> bool:
        """Start streaming ``slot``'s answer when it is next; False: it must
        be buffered and filled in."""
        slots = self._slots
        if slots and slots[0] is slot:
            slots.popleft()
            self.streaming = True
            return True
        return False

    def stream(self, data) -> None:
        """Bytes of the answer being streamed (ahead of every slot)."""
        self._out.append(data)

    def stream_ended(self) -> None:
        self.streaming = False

    def flush(self) -> None:
        """Write what may go out now: streamed bytes, then the answers whose
        turn it is, unless an answer is still streaming."""
        if self._closed:
            self._out.clear()
            return
        out = self._out
        if not self.streaming:
            slots = self._slots
            while slots and slots[0].data is not None:
                out.append(slots.popleft().data)
        if out:
            self._out = []
            self._write(out)

    def close(self) -> None:
        """The client connection closed: nothing more is written."""
        self._closed = True
        self._out.clear()
