"""The bridge between kazoo's threads and the asyncio event loop.

This module owns turning kazoo's ``IAsyncResult`` into asyncio futures, the
retry loop for idempotent ZooKeeper steps, and translating kazoo's
exceptions into zkcoord's.

Rules:

1. kazoo completes a result on its completion thread. We never touch an
   asyncio object there: the ``rawlink`` callback only reads the outcome and
   hops onto the loop with ``loop.call_soon_threadsafe``; the future is
   settled on the loop thread.
2. :func:`gather` settles many results with one hop, so a pipelined batch of
   reads costs one loop wake-up, not one per znode.
3. Issuing a request (``client.get_async(...)``) only queues it for kazoo's
   connection thread, so it is safe on the loop thread. Never call kazoo's
   blocking methods (``client.get``, ``DataWatch(...)``) on the loop.
4. :class:`AsyncRetry` is ``client.retry`` for coroutine functions: it
   re-runs an idempotent step after a connection loss, with backoff, until a
   deadline, then raises :class:`~zkcoord.errors.ServiceUnavailableError`.
   Requests issued while disconnected wait in kazoo's queue; the deadline
   bounds that wait as well.
5. A request that needs no kazoo result object (:func:`call_request`, the
   offset commits' multis) is settled from kazoo's connection thread
   straight onto the loop: one thread hop, not two (kazoo's own results
   run their callbacks on its completion thread first).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from kazoo.client import _prefix_root
from kazoo.exceptions import (
    AuthFailedError, ConnectionClosedError, ConnectionLoss, InvalidACLError, KazooException, NoAuthError,
    OperationTimeoutError, RolledBackError, RuntimeInconsistency, SessionClosedRequireSaslError, SessionExpiredError,
)
from kazoo.protocol.serialization import Create
from kazoo.retry import ForceRetryError
from kazoo.security import OPEN_ACL_UNSAFE

from zkcoord.errors import AuthenticationError, AuthorizationError, ConfigError, ServiceUnavailableError, ZkcoordError

__all__ = ["post", "future_of", "call", "create", "call_request", "gather", "transaction_failure", "AsyncRetry",
           "translate", "RETRYABLE"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# ForceRetryError: a step found the world changed under it and asks to run again.
RETRYABLE = (ConnectionLoss, OperationTimeoutError, ForceRetryError)


def post(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` on ``loop``'s thread; from any thread, never blocks.

    A loop that is already closed (the daemon is shutting down) is ignored.
    """
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        log.debug("event loop closed; dropped a ZooKeeper completion")


def _settle(fut: asyncio.Future, ok: bool, value: Any) -> None:
    if fut.done():  # cancelled or timed out meanwhile
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def future_of(loop: asyncio.AbstractEventLoop, result: Any) -> asyncio.Future:
    """An asyncio future settled with ``result``'s value or exception.

    Call on the loop thread (it creates the future there).
    """
    fut = loop.create_future()

    def done(r: Any) -> None:  # kazoo's completion thread
        ok = r.successful()
        post(loop, _settle, fut, ok, r.value if ok else r.exception)

    result.rawlink(done)
    return fut


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Issue one kazoo ``*_async`` call and await it (raising its exception)."""
    return await future_of(asyncio.get_running_loop(), fn(*args, **kwargs))


class _LoopResult:
    """The result object of :func:`call_request`: kazoo's connection thread
    settles it, and it posts the outcome straight onto the loop (rule 5)."""

    __slots__ = ("_loop", "_future")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future) -> None:
        self._loop, self._future = loop, future

    def set(self, value: Any = None) -> None:
        post(self._loop, _settle, self._future, True, value)

    def set_exception(self, exception: BaseException) -> None:
        post(self._loop, _settle, self._future, False, exception)


class _CreatedResult(_LoopResult):
    """:class:`_LoopResult` of a Create: the created path without the client's chroot."""

    __slots__ = ("_client",)

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future, client: Any) -> None:
        super().__init__(loop, future)
        self._client = client

    def set(self, value: Any = None) -> None:
        post(self._loop, _settle, self._future, True, self._client.unchroot(value))


def create(client: Any, path: str, data: bytes = b"", *, acl: Sequence[Any] | None = None, ephemeral: bool = False,
           sequence: bool = False) -> asyncio.Future:
    """kazoo's ``create_async`` (no ``makepath``: a missing parent raises
    NoNodeError), queued as :func:`call_request` queues a request: the future
    of the created path, settled straight onto the loop. kazoo's own method
    links half a dozen closures and two results into reference cycles, about
    fifty objects per call left to the cycle collector: with every new group's
    contender made that way, collector passes of 35-57 ms of CPU every few
    seconds while thousands of groups were created.
    Call on the loop thread."""
    flags = (1 if ephemeral else 0) | (2 if sequence else 0)
    request = Create(_prefix_root(client.chroot, path, trailing=sequence), data,
                     acl or client.default_acl or OPEN_ACL_UNSAFE, flags)
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    client._call(request, _CreatedResult(loop, future, client))  # as kazoo's _create_async_inner queues it
    return future


def call_request(client: Any, request: Any) -> asyncio.Future:
    """Queue a request object shaped like kazoo's own (``type``,
    ``serialize``, ``deserialize``) and return the future of its answer.
    Call on the loop thread."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    client._call(request, _LoopResult(loop, future))  # how kazoo's own *_async methods queue a request
    return future


def gather(loop: asyncio.AbstractEventLoop, results: Sequence[Any]) -> asyncio.Future:
    """A future of every result's outcome, in order: the value, or the
    exception instance (returned, not raised). One loop hop for all."""
    fut = loop.create_future()
    if not results:
        fut.set_result([])
        return fut
    outcomes: list[Any] = [None] * len(results)
    left = [len(results)]
    lock = threading.Lock()

    def slot(i: int) -> Callable[[Any], None]:
        def done(r: Any) -> None:  # kazoo's completion thread
            outcomes[i] = r.value if r.successful() else r.exception
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                post(loop, _settle, fut, True, outcomes)
        return done

    for i, result in enumerate(results):
        result.rawlink(slot(i))
    return fut


def transaction_failure(results: Sequence[Any]) -> tuple[int, BaseException] | None:
    """Which op made a multi fail: ``(index, exception)``, or None if it succeeded.

    A failed multi reports the culprit's error; the ops before it say
    RolledBackError and those after it RuntimeInconsistency.
    """
    failed = None
    for index, outcome in enumerate(results):
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, (RolledBackError, RuntimeInconsistency)):
                return index, outcome
            failed = failed or (-1, outcome)
    return failed


def translate(exc: BaseException, what: str, hosts: str) -> ZkcoordError:
    """zkcoord's error for a kazoo exception raised while doing ``what``."""
    if isinstance(exc, ZkcoordError):
        return exc
    if isinstance(exc, ConnectionClosedError):
        return ServiceUnavailableError(f"cannot {what}: the ZooKeeper client for {hosts} is stopped")
    if isinstance(exc, (*RETRYABLE, SessionExpiredError)):
        return ServiceUnavailableError(f"cannot {what}: lost the connection to ZooKeeper at {hosts} ({exc!r})")
    if isinstance(exc, NoAuthError):
        return AuthorizationError(f"ZooKeeper at {hosts} refused to {what}: no permission (the znode's ACL does "
                                  "not let this login do it; check the ZooKeeper login, and the ACLs with "
                                  "`zkcoord zookeeper-acl show`)")
    if isinstance(exc, SessionClosedRequireSaslError):
        return AuthenticationError(f"cannot {what}: ZooKeeper at {hosts} requires a SASL login and closed the "
                                   "session; give one (zookeeper_sasl_jaas_file, --zookeeper-sasl-jaas-file)")
    if isinstance(exc, AuthFailedError):
        return AuthenticationError(f"cannot {what}: ZooKeeper at {hosts} refused our login; check the ZooKeeper "
                                   "login settings (zookeeper_sasl_jaas_file, zookeeper_digest)")
    if isinstance(exc, InvalidACLError):
        return ConfigError(f"ZooKeeper at {hosts} refused to {what}: invalid ACL (zookeeper_set_acl gives what "
                           "zkcoord creates to the identity it logged in as: this session has none)")
    if isinstance(exc, KazooException):
        return ZkcoordError(f"ZooKeeper at {hosts} failed to {what}: {type(exc).__name__} {exc}")
    return ZkcoordError(f"failed to {what}: {exc!r}")


class AsyncRetry:
    """Runs an idempotent coroutine function until it succeeds or a deadline.

    Retries on connection loss and operation time-out, and on session expiry
    unless ``retry_expired`` is false (kazoo reconnects with a new session by
    itself). Any other exception is translated and raised at once.
    """

    def __init__(self, hosts: str, deadline_s: float, *, first_delay_s: float = 0.02,
                 max_delay_s: float = 1.0, retry_expired: bool = True) -> None:
        self.hosts = hosts
        self.deadline_s = deadline_s
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.retry_expired = retry_expired

    def _retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, ConnectionClosedError):
            return False
        if isinstance(exc, SessionExpiredError):
            return self.retry_expired
        return isinstance(exc, RETRYABLE)

    async def __call__(self, what: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        end = loop.time() + self.deadline_s
        delay = self.first_delay_s
        last: BaseException | None = None
        while True:
            remaining = end - loop.time()
            try:
                if remaining <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining):
                    return await fn(*args)
            except TimeoutError:
                raise ServiceUnavailableError(
                    f"ZooKeeper at {self.hosts} did not let us {what} within {self.deadline_s:g} s"
                    + (f" (last error: {last!r})" if last else "")
                    + "; check that ZooKeeper is up and reachable") from last
            except (KazooException, ForceRetryError) as exc:
                if not self._retryable(exc):
                    raise translate(exc, what, self.hosts) from exc
                last = exc
            pause = min(delay, max(end - loop.time(), 0)) * random.uniform(0.5, 1.0)
            delay = min(delay * 2, self.max_delay_s)
            await asyncio.sleep(pause)
