"""A gateway client's SASL login, passed through to its broker and checked
on the way.

When the brokers behind a gateway speak SASL, the gateway does not log in
to them with an identity of its own: it passes each client's SaslHandshake
and SaslAuthenticate to the broker of that client's connection, so the
broker authenticates the client itself and its ACLs and quotas apply to the
client's own user. The gateway answers the group APIs itself, so it must
know that user too: :class:`PassthroughLogin` checks the login as it goes
by, with the same credentials the brokers use (SCRAM from ZooKeeper's
``/config/users``, PLAIN from the users file), and the connection's
principal is the user both the broker and the gateway accepted.

Rules:

1. A mechanism the gateway does not enable is refused by the gateway
   (UNSUPPORTED_SASL_MECHANISM listing the gateway's mechanisms) without a
   word to the broker: a login the gateway cannot check would leave it
   without a principal for the group APIs.
2. PLAIN: the password is checked before the message goes to the broker; a
   wrong one is refused here (SASL_AUTHENTICATION_FAILED, as the broker
   would).
3. SCRAM: the client-first message starts the credential lookup; the
   client's proof is checked when its client-final message arrives, before
   the broker sees it (a wrong password never reaches the broker); the
   broker's server-final signature is checked against the same credential.
   Delegation-token logins (``tokenauth``) are refused: the gateway cannot
   check them.
4. Any error the broker answers goes to the client unchanged and ends the
   connection, as it ends the broker's. A broker that accepts a login the
   gateway refuses (different credentials) gets the client a
   SASL_AUTHENTICATION_FAILED instead of the broker's answer, and an error
   in the log: the gateway and the brokers disagree about the user.
5. Re-authentication (KIP-368: a broker with ``connections.max.reauth.ms``
   asks clients to log in again) goes the same way; the user may not change.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from zkcoord.core import sasl, scram
from zkcoord.core.api_keys import BEFORE_LOGIN_APIS, SASL_HANDSHAKE
from zkcoord.core.errors import ErrorCode
from zkcoord.errors import ZkcoordError
from zkcoord.wire.responses import decode_response_frame, encode_response_frame, response_for

if TYPE_CHECKING:
    from zkcoord.wire.authentication import Credentials
    from zkcoord.wire.connections import ConnectionInfo
    from zkcoord.wire.requests import DecodedRequest

__all__ = ["PassthroughLogin"]

log = logging.getLogger(__name__)


class PassthroughLogin:
    """One gateway connection's SASL login, answered by its broker, checked here."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: Credentials, connection: ConnectionInfo) -> None:
        self.mechanisms = mechanisms
        self._credentials = credentials
        self._connection = connection
        self.done = False
        self.principal = ""
        self._mechanism: str | None = None
        self._verifier: scram.PassiveScramVerifier | None = None
        self._lookup: asyncio.Task | None = None
        self._plain_user: str | None = None

    def admits(self, api_key: int) -> bool:
        return self.done or api_key in BEFORE_LOGIN_APIS

    def versions_answered(self, error_code: int) -> None:
        """The broker checks the order of the login's requests itself."""

    # -- the client's requests --------------------------------------------------------
    async def answer(self, decoded: DecodedRequest):
        """(response, close after it) when the gateway answers itself, or
        (None, False): pass the request to the broker (then :meth:`answered`)."""
        request = decoded.request
        if decoded.api_key == SASL_HANDSHAKE:
            mechanism = request.mechanism
            if mechanism not in self.mechanisms:
                log.info("%s: SASL mechanism %r is not enabled on this gateway", self._connection, mechanism)
                return response_for(decoded, error_code=int(ErrorCode.UNSUPPORTED_SASL_MECHANISM),
                                    mechanisms=list(self.mechanisms)), True
            self._mechanism, self._verifier, self._plain_user = mechanism, None, None
            return None, False
        if self._mechanism is None:  # the broker answers ILLEGAL_SASL_STATE and closes
            return None, False
        data = bytes(request.auth_bytes)
        if self._mechanism != sasl.PLAIN and self._verifier is not None:
            return await self._scram_final(decoded, data)
        try:
            self._client_message(data)
        except (scram.ScramError, sasl.PlainFormatError) as exc:
            return self._refuse(decoded, str(exc)), True
        except _Refused as refused:
            return self._refuse(decoded, refused.reason), True
        return None, False

    def _client_message(self, data: bytes) -> None:
        if self._mechanism == sasl.PLAIN:
            message = sasl.parse_plain(data)
            if not self._credentials.plain(message.username, message.password):
                raise _Refused(f"wrong PLAIN password or unknown user {message.username!r}")
            self._plain_user = message.username
            return
        self._verifier = scram.PassiveScramVerifier(self._mechanism, data)  # client-first
        self._lookup = asyncio.get_running_loop().create_task(
            self._credentials.scram(self._verifier.username, self._mechanism))

    async def _scram_final(self, decoded: DecodedRequest, data: bytes):
        try:
            credential = await self._lookup
        except ZkcoordError as exc:
            return self._refuse(decoded, f"the credentials of {self._verifier.username!r} could not be "
                                         f"looked up: {exc}"), True
        try:
            self._verifier.observe_client_final(data, credential)
        except scram.ScramError as exc:
            return self._refuse(decoded, str(exc)), True
        return None, False

    def _refuse(self, decoded: DecodedRequest, reason: str):
        log.info("%s: SASL login refused by the gateway: %s", self._connection, reason)
        self._credentials.logged_in(self._mechanism, False)
        message = (sasl.PLAIN_INVALID if self._mechanism == sasl.PLAIN
                   else sasl.scram_failure_message(str(self._mechanism)))
        return response_for(decoded, error_code=int(ErrorCode.SASL_AUTHENTICATION_FAILED), error_message=message,
                            auth_bytes=b"", session_lifetime_ms=0)

    # -- the broker's answers ---------------------------------------------------------
    def answered(self, decoded: DecodedRequest, frame: bytes) -> tuple[bytes, bool]:
        """What the client gets of the broker's answer to ``decoded`` (a whole
        frame), and whether the connection closes after it."""
        version = decoded.api_version
        response_class = SaslHandshakeResponse if decoded.api_key == SASL_HANDSHAKE else SaslAuthenticateResponse
        correlation_id, message = decode_response_frame(frame, response_class, version)
        if message.error_code:
            log.info("%s: the broker refused the SASL login (error %d%s)", self._connection, message.error_code,
                     f": {message.error_message}" if getattr(message, "error_message", None) else "")
            self._credentials.logged_in(self._mechanism, False)
            return frame, True
        if decoded.api_key == SASL_HANDSHAKE:
            return frame, False
        try:
            user = self._broker_message(bytes(message.auth_bytes))
        except scram.ScramError as exc:
            log.error("%s: the broker accepted a SASL login the gateway refuses (%s); do the brokers and zkcoord "
                      "read the same credentials?", self._connection, exc)
            refused = self._refuse(decoded, str(exc))
            return encode_response_frame(refused, version, correlation_id), True
        if user is not None:
            principal = f"User:{user}"
            if self.done and principal != self.principal:
                log.warning("%s: re-authenticated as %s, not %s; closing", self._connection, principal,
                            self.principal)
                return frame, True
            self.done, self.principal = True, principal
            self._credentials.logged_in(self._mechanism, True)
        return frame, False

    def _broker_message(self, data: bytes) -> str | None:
        """The user, once the broker's message completes the login; else None."""
        if self._mechanism == sasl.PLAIN:
            return self._plain_user
        verifier = self._verifier
        if verifier is None:
            raise scram.ScramFormatError("a SCRAM answer before the client's first message")
        if not verifier.verified_client:
            verifier.observe_server_first(data)
            return None
        return verifier.observe_server_final(data)


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
