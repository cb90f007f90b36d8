"""SASL logins checked by zkcoord itself: the daemon's listener, and the
gateway when its brokers do not speak SASL.

Owns :class:`Credentials` (where a login is checked: SCRAM credentials from
ZooKeeper's ``/config/users``, PLAIN users from a file; both reached through
the small interfaces defined here, so the wire imports neither adapter) and
:class:`SaslLogin`, the :class:`~.listener_security.Login` of one
connection: it feeds :class:`zkcoord.core.sasl.SaslSession` the decoded
SaslHandshake / SaslAuthenticate requests, does the credential lookups the
session asks for, draws the SCRAM server nonces, and turns the session's
replies into Kafka responses.

A failed login is logged at INFO with the reason (the user name as typed,
never a password); the client gets Kafka's text only. A lookup that cannot
be done (ZooKeeper unavailable) fails that login, logged at WARNING.
"""

from __future__ import annotations

import logging
import os
import secrets
from typing import TYPE_CHECKING, Protocol

from zkcoord.core import sasl
from zkcoord.core.api_keys import SASL_HANDSHAKE
from zkcoord.core.errors import ErrorCode
from zkcoord.errors import ZkcoordError
from zkcoord.wire.responses import response_for

if TYPE_CHECKING:
    from zkcoord.core.scram import ScramCredential
    from zkcoord.password import Password
    from zkcoord.wire.connections import ConnectionInfo
    from zkcoord.wire.requests import DecodedRequest

__all__ = ["Credentials", "SaslLogin"]

log = logging.getLogger(__name__)

# Makes the made-up SCRAM salt of users that do not exist the same on every
# try within this process (core.scram: an unknown user looks like a wrong password).
_UNKNOWN_USER_KEY = os.urandom(32)


class ScramCredentials(Protocol):
    """Where SCRAM credentials are looked up (ZooKeeper's ``/config/users``:
    :class:`zkcoord.zk.scram_credentials.ScramCredentialStore`)."""

    async def credential(self, username: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for ``mechanism``; None: no such user. A ZkcoordError when it cannot be read."""


class PlainCredentials(Protocol):
    """Where PLAIN passwords are checked (a users file: :class:`zkcoord.security.plain_users.PlainUsers`)."""

    def check(self, username: str, password: Password) -> bool:
        """Is ``password`` the user's?"""


class Credentials:
    """What logins are checked against; either source may be absent."""

    def __init__(self, scram: ScramCredentials | None = None, plain: PlainCredentials | None = None) -> None:
        self.scram_store = scram
        self.plain_users = plain
        self.on_login = None  # (mechanism, ok) -> None: the daemon's metrics, once they exist

    def logged_in(self, mechanism: str | None, ok: bool) -> None:
        """A login ended: counted where the daemon counts them."""
        if self.on_login is not None:
            self.on_login(mechanism or "", ok)

    async def scram(self, username: str, mechanism: str) -> ScramCredential | None:
        if self.scram_store is None:
            return None
        return await self.scram_store.credential(username, mechanism)

    def plain(self, username: str, password: Password) -> bool:
        return self.plain_users is not None and self.plain_users.check(username, password)


class SaslLogin:
    """One connection's SASL login, checked here."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: Credentials, connection: ConnectionInfo) -> None:
        self._session = sasl.SaslSession(mechanisms, unknown_user_key=_UNKNOWN_USER_KEY)
        self._credentials = credentials
        self._connection = connection

    @property
    def done(self) -> bool:
        return self._session.complete

    @property
    def principal(self) -> str:
        return self._session.principal or ""

    def admits(self, api_key: int) -> bool:
        return self._session.admit(api_key)

    def versions_answered(self, error_code: int) -> None:
        self._session.api_versions_answered(error_code)

    async def answer(self, decoded: DecodedRequest):
        """(response, close after it) to a SaslHandshake or SaslAuthenticate."""
        request = decoded.request
        if decoded.api_key == SASL_HANDSHAKE:
            reply = self._session.handshake(request.mechanism, decoded.api_version)
            if reply.log_reason:
                log.info("%s: %s", self._connection, reply.log_reason)
            return response_for(decoded, error_code=int(reply.error_code),
                                mechanisms=list(reply.mechanisms)), reply.close
        step = self._session.authenticate(bytes(request.auth_bytes))
        if isinstance(step, sasl.Lookup):
            step = await self._look_up(step)
        if step.log_reason and step.error_code:
            log.info("%s: SASL login refused: %s", self._connection, step.log_reason)
        if step.principal is not None or step.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED:
            self._credentials.logged_in(self._session.mechanism, step.principal is not None)
        return response_for(decoded, error_code=int(step.error_code), error_message=step.error_message,
                            auth_bytes=step.auth_bytes, session_lifetime_ms=step.session_lifetime_ms), step.close

    async def _look_up(self, lookup: sasl.Lookup) -> sasl.AuthenticateReply:
        if lookup.mechanism == sasl.PLAIN:
            return self._session.resume(self._credentials.plain(lookup.username, lookup.password))
        try:
            credential = await self._credentials.scram(lookup.username, lookup.mechanism)
        except ZkcoordError as exc:
            log.warning("%s: cannot check the %s login of %r: %s", self._connection, lookup.mechanism,
                        lookup.username, exc)
            return self._session.lookup_failed(str(exc))
        return self._session.resume(credential, secrets.token_urlsafe(18))
