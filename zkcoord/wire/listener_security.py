"""How one listener's connections are secured: TLS, and the SASL login a
connection must complete before anything else.

This module owns the contract between a listener's connection code (the
daemon's :mod:`zkcoord.server.transport`, the gateway's
:mod:`zkcoord.gateway.connection`) and the security adapters:

* :class:`ListenerSecurity` says what a listener speaks (Kafka's security
  protocol names), its server ``ssl.SSLContext``, how a client certificate
  becomes a principal, and how to start a connection's :class:`Login`.
* A :class:`Login` is one connection's SASL exchange. Until it is ``done``
  the connection hands it every SaslHandshake / SaslAuthenticate request and
  asks :meth:`Login.admits` before anything else is read (Kafka admits only
  ApiVersions and the login APIs; anything else closes the connection).
* :class:`LoginGate` is what both connection codes ask while a login is
  not done: which requests pass, how large a frame may be, and who the
  connection is once it is done.
* :data:`~.connections.ANONYMOUS` is the principal of a connection nobody
  logged in on, as Kafka names it.

Rules:

1. The principal of a connection is ``User:ANONYMOUS`` on PLAINTEXT, the
   client certificate's (mapped) name on SSL, and the SASL user on
   SASL_PLAINTEXT / SASL_SSL, set once the login is done.
2. Before the login is done a frame may be at most
   :data:`SASL_MAX_RECEIVE_BYTES` (Kafka's ``sasl.server.max.receive.size``
   default): an unauthenticated peer cannot make the listener buffer
   megabytes.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from zkcoord.wire.connections import ANONYMOUS, ConnectionInfo
from zkcoord.wire.registry import COORDINATOR_APIS, SASL_COORDINATOR_APIS, ApiRegistry

if TYPE_CHECKING:
    from kafka.protocol.api_message import ApiMessage

    from zkcoord.wire.requests import DecodedRequest

__all__ = ["ANONYMOUS", "Login", "LoginGate", "ListenerSecurity", "PLAINTEXT_LISTENER", "SASL_MAX_RECEIVE_BYTES",
           "TLS_HANDSHAKE_TIMEOUT_S"]

SASL_MAX_RECEIVE_BYTES = 524_288
# How a frame refused before the login is done names its limit (rule 2).
SASL_MAX_RECEIVE_SETTING = "sasl.server.max.receive.size (before the login)"
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class Login(Protocol):
    """One connection's SASL login."""

    done: bool
    principal: str

    def admits(self, api_key: int) -> bool:
        """May a request with this api key be read now? False: close the connection."""

    def versions_answered(self, error_code: int) -> None:
        """An ApiVersions request before the login was answered with ``error_code``."""

    def answer(self, decoded: DecodedRequest) -> Awaitable[tuple[ApiMessage, bool]]:
        """The answer to a SaslHandshake / SaslAuthenticate, and whether the
        connection closes once it is written."""


@dataclass(frozen=True)
class ListenerSecurity:
    """What a listener speaks and how it checks who is on the other end."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    # A client certificate (DER, None without one) -> principal; None: ANONYMOUS (no TLS)
    certificate_principal: Callable[[bytes | None], str] | None = None
    # A new connection -> its Login; None on PLAINTEXT and SSL listeners
    new_login: Callable[[ConnectionInfo], Login] | None = None

    def __post_init__(self) -> None:
        if self.tls != (self.ssl_context is not None):
            raise ValueError(f"a {self.protocol} listener {'needs' if self.tls else 'takes no'} SSL context")
        if self.sasl != (self.new_login is not None):
            raise ValueError(f"a {self.protocol} listener {'needs' if self.sasl else 'takes no'} SASL login")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def apis(self) -> ApiRegistry:
        """What the listener decodes and advertises: the login APIs too on SASL listeners."""
        return SASL_COORDINATOR_APIS if self.sasl else COORDINATOR_APIS

    def principal_of(self, transport) -> str:
        """The principal of a connection before any SASL login (rule 1)."""
        if self.certificate_principal is None:
            return ANONYMOUS
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        return self.certificate_principal(der)


PLAINTEXT_LISTENER = ListenerSecurity()


def login_gate(security: ListenerSecurity, info: ConnectionInfo) -> LoginGate | None:
    """The gate of a new connection on a listener with ``security``; None
    when the listener has no SASL login (nothing to gate)."""
    if security.new_login is None:
        return None
    return LoginGate(security.new_login(info))


class LoginGate:
    """One connection's SASL login, as its connection code sees it (rules 1 and 2).

    ``closed`` holds until the login is done: then only what the login
    ``admits`` is read (anything else closes the connection, as Kafka
    does), frames are at most :data:`SASL_MAX_RECEIVE_BYTES`, and an
    ApiVersions answer is shown to the login (``versions_answered``).
    :meth:`logged_in` gives the connection's info with the login's user
    once the login made it someone else.
    """

    __slots__ = ("login",)

    def __init__(self, login: Login) -> None:
        self.login = login

    @property
    def closed(self) -> bool:
        """The login is not done: only ApiVersions and the login's requests pass."""
        return not self.login.done

    def refuses(self, api_key: int) -> bool:
        """A request of ``api_key`` closes the connection now."""
        login = self.login
        return not login.done and not login.admits(api_key)

    def frame_limit(self) -> tuple[int, str] | None:
        """(the largest frame read now, the setting that says so); None once the login is done."""
        return None if self.login.done else (SASL_MAX_RECEIVE_BYTES, SASL_MAX_RECEIVE_SETTING)

    def versions_answered(self, error_code: int) -> None:
        """An ApiVersions request was answered with ``error_code``: the login
        hears of it while it is not done."""
        if not self.login.done:
            self.login.versions_answered(error_code)

    def logged_in(self, info: ConnectionInfo) -> ConnectionInfo | None:
        """``info`` with the login's user as its principal, once the login is
        done and that changes who the connection is; else None."""
        login = self.login
        if login.done and info.principal != login.principal:
            return replace(info, principal=login.principal)
        return None
