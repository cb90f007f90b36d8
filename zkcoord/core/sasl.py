"""One connection's SASL login: Kafka's ``SaslServerAuthenticator`` without I/O.

This module owns, per connection, which requests may be handled in which
state of the login, what SaslHandshake (v1) and SaslAuthenticate answer, and
the PLAIN and SCRAM-SHA-256/512 exchanges (SCRAM itself is
:mod:`zkcoord.core.scram`). The daemon's listener and the gateway (for
logins it checks itself) feed it decoded requests and send what it returns.

Rules:

1. Before the login completes only ApiVersions (18), SaslHandshake (17) and
   SaslAuthenticate (36) are handled; :meth:`SaslSession.admit` says False
   for anything else, and the caller closes the connection without an
   answer (Kafka's IllegalSaslStateException during the handshake).
2. Credential lookups (ZooKeeper, a users file) are the caller's: a step
   that needs one returns a :class:`Lookup`; the caller resumes the session
   with what it found (:meth:`SaslSession.resume`) or says the lookup
   failed (:meth:`SaslSession.lookup_failed`). The caller also draws the
   SCRAM server nonce. The caller reads no further request of this
   connection while a lookup is out (Kafka mutes the channel likewise).
3. Every other step is a reply. A reply with ``close`` set is the last
   thing sent on the connection. The texts clients see are Kafka's: a SCRAM
   failure always says "Authentication failed during authentication due to
   invalid credentials with SASL mechanism <m>" (Kafka keeps the reason
   from unauthenticated clients), a PLAIN failure says what
   ``PlainSaslServer`` says. ``log_reason`` holds the reason for the
   operator's log: no password, no key, the user name as typed.
4. No re-authentication: sessions last as long as the connection
   (``session_lifetime_ms`` is 0). After the login SaslHandshake and
   SaslAuthenticate answer ILLEGAL_SASL_STATE and the connection stays
   open, as Kafka's KafkaApis does.

States and transitions (:data:`TRANSITIONS` is the table; anything not in
it is a bug of the caller and raises RuntimeError)::

    state                  admits                     event -> next state
    ---------------------  -------------------------  ----------------------------------------
    HANDSHAKE_OR_VERSIONS  ApiVersions, SaslHandshake  VERSIONS (answered, no error) -> HANDSHAKE
                           SaslAuthenticate (refused)  MECHANISM_CHOSEN -> AUTHENTICATE
                                                       REFUSED -> FAILED
    HANDSHAKE              SaslHandshake,              MECHANISM_CHOSEN -> AUTHENTICATE
                           SaslAuthenticate (refused)  REFUSED -> FAILED
    AUTHENTICATE           SaslAuthenticate,           LOOKUP -> LOOKUP
                           SaslHandshake (refused)     REFUSED -> FAILED
    LOOKUP                 nothing (resume first)      CHALLENGED (SCRAM) -> CHALLENGED
                                                       SUCCEEDED (PLAIN) -> COMPLETE
                                                       REFUSED -> FAILED
    CHALLENGED             SaslAuthenticate,           SUCCEEDED -> COMPLETE
                           SaslHandshake (refused)     REFUSED -> FAILED
    COMPLETE               every request               (none: the login is done)
    FAILED                 nothing: close             (none)

A request the state does not admit moves it to FAILED (REFUSED).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from zkcoord.core import scram
from zkcoord.core.api_keys import BEFORE_LOGIN_APIS, LOGIN_APIS
from zkcoord.core.errors import ErrorCode
from zkcoord.errors import ConfigError
from zkcoord.password import Password

__all__ = [
    "SaslState", "Event", "TRANSITIONS", "SUPPORTED_MECHANISMS", "PLAIN", "HandshakeReply", "AuthenticateReply", "Lookup", "SaslSession", "parse_plain",
    "PlainMessage", "PlainFormatError", "scram_failure_message",
]

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *scram.MECHANISMS)
SASL_HANDSHAKE_VERSION = 1  # v0 (raw tokens after the handshake) is not offered, as in Kafka 4

# Kafka's texts (PlainSaslServer, SaslServerAuthenticator, KafkaApis).
PLAIN_INVALID = "Authentication failed: Invalid username or password"
PLAIN_NO_USER = "Authentication failed: username not specified"
PLAIN_NO_PASSWORD = "Authentication failed: password not specified"
PLAIN_UNVERIFIED = "Authentication failed: credentials for user could not be verified"
AUTHZID_DIFFERS = "Authentication failed: Client requested an authorization id that is different from username"
AFTER_LOGIN = "SaslAuthenticate request received after successful authentication"
BEFORE_HANDSHAKE = "Unexpected Kafka request of type SASL_AUTHENTICATE during SASL handshake."


def scram_failure_message(mechanism: str) -> str:
    """What Kafka tells a client whose SCRAM login failed, whatever the reason."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake-or-versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    LOOKUP = "lookup"
    CHALLENGED = "challenged"
    COMPLETE = "complete"
    FAILED = "failed"


class Event(enum.Enum):
    VERSIONS = "versions"
    MECHANISM_CHOSEN = "mechanism-chosen"
    LOOKUP = "lookup"
    CHALLENGED = "challenged"
    SUCCEEDED = "succeeded"
    REFUSED = "refused"


S, E = SaslState, Event
TRANSITIONS: dict[tuple[SaslState, Event], SaslState] = {
    (S.HANDSHAKE_OR_VERSIONS, E.VERSIONS): S.HANDSHAKE,
    (S.HANDSHAKE_OR_VERSIONS, E.MECHANISM_CHOSEN): S.AUTHENTICATE,
    (S.HANDSHAKE_OR_VERSIONS, E.REFUSED): S.FAILED,
    (S.HANDSHAKE, E.MECHANISM_CHOSEN): S.AUTHENTICATE,
    (S.HANDSHAKE, E.REFUSED): S.FAILED,
    (S.AUTHENTICATE, E.LOOKUP): S.LOOKUP,
    (S.AUTHENTICATE, E.REFUSED): S.FAILED,
    (S.LOOKUP, E.CHALLENGED): S.CHALLENGED,
    (S.LOOKUP, E.SUCCEEDED): S.COMPLETE,
    (S.LOOKUP, E.REFUSED): S.FAILED,
    (S.CHALLENGED, E.SUCCEEDED): S.COMPLETE,
    (S.CHALLENGED, E.REFUSED): S.FAILED,
}

_ADMITS: dict[SaslState, frozenset[int] | None] = {  # None: every api key
    S.HANDSHAKE_OR_VERSIONS: BEFORE_LOGIN_APIS,
    S.HANDSHAKE: LOGIN_APIS,
    S.AUTHENTICATE: LOGIN_APIS,
    S.CHALLENGED: LOGIN_APIS,
    S.COMPLETE: None,
    S.FAILED: frozenset(),
}


@dataclass(frozen=True)
class HandshakeReply:
    """A SaslHandshake response: error code and the enabled mechanisms."""

    error_code: ErrorCode
    mechanisms: tuple[str, ...]
    close: bool = False
    log_reason: str | None = None


@dataclass(frozen=True)
class AuthenticateReply:
    """A SaslAuthenticate response. ``principal`` (``User:<name>``) is set
    on the reply that completes the login."""

    error_code: ErrorCode
    error_message: str | None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0
    close: bool = False
    principal: str | None = None
    log_reason: str | None = None


@dataclass(frozen=True)
class Lookup:
    """The caller must look a credential up, then :meth:`SaslSession.resume`:
    for SCRAM the user's ScramCredential (or None), for PLAIN whether
    ``password`` is the user's (True / False)."""

    mechanism: str
    username: str
    password: Password | None = None


# ------------------------------------------------------------ PLAIN
class PlainFormatError(ValueError):
    """A PLAIN message Kafka would refuse; the text is Kafka's (sent to the client)."""


@dataclass(frozen=True)
class PlainMessage:
    authzid: str
    username: str
    password: Password


def parse_plain(data: bytes) -> PlainMessage:
    """``authzid NUL username NUL password`` (RFC 4616, ``PlainSaslServer``)."""
    text = bytes(data).decode("utf-8", "replace")  # Java's new String(bytes, UTF_8)
    tokens = text.split("\0", 3)
    if len(tokens) != 3:
        # Kafka counts up to 4 tokens: more than 3 NULs still says "got 4"
        raise PlainFormatError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
    authzid, username, password = tokens
    if not username:
        raise PlainFormatError(PLAIN_NO_USER)
    if not password:
        raise PlainFormatError(PLAIN_NO_PASSWORD)
    return PlainMessage(authzid, username, Password(password))


# ------------------------------------------------------------ the session
class SaslSession:
    """The SASL login of one connection (see the module docstring).

    ``mechanisms``: the enabled ones (``sasl.enabled.mechanisms``), in the
    order the handshake lists them. ``unknown_user_key``: the caller's
    secret that makes the SCRAM salt of users that do not exist (random
    bytes drawn once per process; see :class:`zkcoord.core.scram.ScramServer`);
    required when a SCRAM mechanism is enabled, since a salt anyone can
    compute would tell which users exist.
    """

    def __init__(self, mechanisms: Iterable[str], *, unknown_user_key: bytes | None = None) -> None:
        enabled = tuple(dict.fromkeys(mechanisms))
        unknown = [m for m in enabled if m not in SUPPORTED_MECHANISMS]
        if not enabled or unknown:
            raise ConfigError(f"sasl.enabled.mechanisms must list some of {', '.join(SUPPORTED_MECHANISMS)}"
                              + (f"; {', '.join(map(repr, unknown))} is not supported" if unknown else
                                 "; it is empty"))
        if not unknown_user_key and any(m in scram.MECHANISMS for m in enabled):
            raise ValueError("a SaslSession with SCRAM needs unknown_user_key: random bytes drawn once per process")
        self.mechanisms = enabled
        self.state = SaslState.HANDSHAKE_OR_VERSIONS
        self.mechanism: str | None = None
        self.username: str | None = None
        self.principal: str | None = None
        self._unknown_user_key = unknown_user_key or b""
        self._plain: PlainMessage | None = None
        self._client_first: scram.ClientFirst | None = None
        self._scram: scram.ScramServer | None = None

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    def _move(self, event: Event) -> None:
        try:
            self.state = TRANSITIONS[(self.state, event)]
        except KeyError:
            raise RuntimeError(f"SASL session: {event.value} is not possible in state {self.state.value}") from None
        if self.state is SaslState.FAILED:
            self._plain = self._client_first = self._scram = None

    def admit(self, api_key: int) -> bool:
        """Whether a request with ``api_key`` may be handled now; False: close
        the connection without an answer (the session is then FAILED)."""
        if self.state is SaslState.LOOKUP:
            raise RuntimeError("SASL session: a credential lookup is out; resume() before reading another request")
        admitted = _ADMITS[self.state]
        if admitted is None or api_key in admitted:
            return True
        if self.state is not SaslState.FAILED:
            self._move(Event.REFUSED)
        return False

    def api_versions_answered(self, error_code: int = 0) -> None:
        """The caller answered an admitted ApiVersions request with
        ``error_code``. A client that asked for a version we lack (error 35)
        may ask again; after a good answer only SaslHandshake may follow."""
        if self.state is SaslState.HANDSHAKE_OR_VERSIONS and error_code == ErrorCode.NONE:
            self._move(Event.VERSIONS)

    # -- SaslHandshake
    def handshake(self, mechanism: str, version: int = SASL_HANDSHAKE_VERSION) -> HandshakeReply:
        """Answer a SaslHandshake request (admitted by :meth:`admit`)."""
        if self.state in (SaslState.LOOKUP, SaslState.FAILED):
            raise RuntimeError(f"SASL session: SaslHandshake is not possible in state {self.state.value}")
        if self.state is SaslState.COMPLETE:
            return HandshakeReply(ErrorCode.ILLEGAL_SASL_STATE, (), log_reason="SaslHandshake after the login")
        if self.state not in (SaslState.HANDSHAKE_OR_VERSIONS, SaslState.HANDSHAKE):
            self._move(Event.REFUSED)
            return HandshakeReply(ErrorCode.ILLEGAL_SASL_STATE, (), close=True,
                                  log_reason="a second SaslHandshake before the login completed")
        if version != SASL_HANDSHAKE_VERSION:
            self._move(Event.REFUSED)
            return HandshakeReply(ErrorCode.UNSUPPORTED_VERSION, self.mechanisms, close=True,
                                  log_reason=f"SaslHandshake v{version}: only v1 is served")
        if mechanism not in self.mechanisms:
            self._move(Event.REFUSED)
            return HandshakeReply(ErrorCode.UNSUPPORTED_SASL_MECHANISM, self.mechanisms, close=True,
                                  log_reason=f"the client asked for SASL mechanism {mechanism!r}, not enabled here")
        self.mechanism = mechanism
        self._move(Event.MECHANISM_CHOSEN)
        return HandshakeReply(ErrorCode.NONE, self.mechanisms)

    # -- SaslAuthenticate
    def authenticate(self, auth_bytes: bytes) -> AuthenticateReply | Lookup:
        """Take a SaslAuthenticate request's ``auth_bytes``: a reply, or a
        :class:`Lookup` the caller must answer with :meth:`resume`."""
        state = self.state
        if state is SaslState.COMPLETE:
            return AuthenticateReply(ErrorCode.ILLEGAL_SASL_STATE, AFTER_LOGIN, log_reason=AFTER_LOGIN)
        if state in (SaslState.HANDSHAKE_OR_VERSIONS, SaslState.HANDSHAKE):
            return self._refuse(ErrorCode.ILLEGAL_SASL_STATE, BEFORE_HANDSHAKE, "SaslAuthenticate before SaslHandshake")
        if state is SaslState.AUTHENTICATE:
            return self._first_token(bytes(auth_bytes))
        if state is SaslState.CHALLENGED:
            return self._scram_final(bytes(auth_bytes))
        raise RuntimeError(f"SASL session: SaslAuthenticate is not possible in state {state.value}")

    def _refuse(self, code: ErrorCode, message: str, reason: str) -> AuthenticateReply:
        self._move(Event.REFUSED)
        return AuthenticateReply(code, message, close=True, log_reason=reason)

    def _failed(self, reason: str, message: str | None = None) -> AuthenticateReply:
        """A failed login: SASL_AUTHENTICATION_FAILED, then close."""
        if message is None:
            message = PLAIN_INVALID if self.mechanism == PLAIN else scram_failure_message(str(self.mechanism))
        return self._refuse(ErrorCode.SASL_AUTHENTICATION_FAILED, message, reason)

    def _first_token(self, data: bytes) -> AuthenticateReply | Lookup:
        if self.mechanism == PLAIN:
            try:
                self._plain = parse_plain(data)
            except PlainFormatError as exc:
                return self._failed(f"a malformed PLAIN message: {exc}", str(exc))
            self.username = self._plain.username
            self._move(Event.LOOKUP)
            return Lookup(PLAIN, self._plain.username, self._plain.password)
        try:
            first = scram.parse_client_first(data)
        except scram.ScramError as exc:
            return self._failed(str(exc))
        self.username = first.username
        if first.token_auth:
            return self._failed(f"user {first.username!r}: a delegation-token login (tokenauth) is not "
                                "supported by zkcoord")
        if first.authzid and first.authzid != first.username:
            return self._failed(f"user {first.username!r} asked for another authorization id", AUTHZID_DIFFERS)
        self._client_first = first
        self._move(Event.LOOKUP)
        return Lookup(str(self.mechanism), first.username)

    # -- after the lookup
    def resume(self, found: scram.ScramCredential | bool | None, server_nonce: str | None = None
               ) -> AuthenticateReply:
        """Continue after a :class:`Lookup`. SCRAM: ``found`` is the user's
        credential or None (no such user), ``server_nonce`` the caller's
        random text (printable ASCII, no comma). PLAIN: ``found`` says
        whether the password is the user's."""
        if self.state is not SaslState.LOOKUP:
            raise RuntimeError(f"SASL session: resume() without a lookup (state {self.state.value})")
        if self.mechanism == PLAIN:
            return self._plain_result(found)
        if found is not None and not isinstance(found, scram.ScramCredential):
            raise TypeError("a SCRAM lookup resumes with a ScramCredential or None")
        if server_nonce is None:
            raise ValueError("a SCRAM lookup resumes with a server nonce")
        try:
            server = scram.ScramServer(str(self.mechanism), self._client_first, found, server_nonce,
                                       unknown_user_key=self._unknown_user_key)
        except scram.ScramError as exc:
            return self._failed(str(exc))
        self._scram, self._client_first = server, None
        self._move(Event.CHALLENGED)
        return AuthenticateReply(ErrorCode.NONE, None, server.server_first_bytes())

    def lookup_failed(self, reason: str) -> AuthenticateReply:
        """The lookup could not be done (ZooKeeper unavailable, the users
        file unreadable): the login fails; ``reason`` goes to the log."""
        if self.state is not SaslState.LOOKUP:
            raise RuntimeError(f"SASL session: lookup_failed() without a lookup (state {self.state.value})")
        message = PLAIN_UNVERIFIED if self.mechanism == PLAIN else None
        return self._failed(f"the credentials of user {self.username!r} could not be looked up: {reason}", message)

    def _plain_result(self, found: object) -> AuthenticateReply:
        if not isinstance(found, bool):
            raise TypeError("a PLAIN lookup resumes with True or False")
        plain, self._plain = self._plain, None
        assert plain is not None
        if not found:
            return self._failed(f"wrong PLAIN password or unknown user {plain.username!r}")
        if plain.authzid and plain.authzid != plain.username:
            return self._failed(f"user {plain.username!r} asked for another authorization id", AUTHZID_DIFFERS)
        return self._succeed(b"")

    def _scram_final(self, data: bytes) -> AuthenticateReply:
        assert self._scram is not None
        try:
            server_final = self._scram.client_final(data)
        except scram.ScramError as exc:
            return self._failed(str(exc))
        self._scram = None
        return self._succeed(server_final)

    def _succeed(self, auth_bytes: bytes) -> AuthenticateReply:
        self.principal = f"User:{self.username}"
        self._move(Event.SUCCEEDED)
        return AuthenticateReply(ErrorCode.NONE, None, auth_bytes, principal=self.principal)
