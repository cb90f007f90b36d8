"""SCRAM-SHA-256 and SCRAM-SHA-512 as Kafka does them (RFC 5802, RFC 7677).

This module owns, without any I/O:

* :data:`MECHANISMS`: the two mechanisms, their hash and Kafka's iteration
  bounds (``ScramMechanism.java``: 4096 to 16384).
* :class:`ScramCredential` and Kafka's stored text of one
  (``ScramCredentialUtils.java``): ``salt=<b64>,stored_key=<b64>,
  server_key=<b64>,iterations=<n>``; :func:`make_credential` computes one
  from a password (``ScramFormatter.generateCredential``).
* The four messages (``ScramMessages.java``), parsed with Kafka's own
  grammar: :func:`parse_client_first`, :func:`parse_server_first`,
  :func:`parse_client_final`, :func:`parse_server_final`.
* :class:`ScramServer`: the server side of one login
  (``ScramSaslServer.java``).
* :class:`PassiveScramVerifier`: the gateway's check of a login it passes
  through to a broker, from the four messages and the user's credential.

Rules:

1. Nothing here draws random numbers or reads the clock: the server nonce
   and the key that makes an unknown user's salt are passed in.
2. Every refusal is a :class:`ScramError` whose text names what was wrong
   and is safe to log: no key material, no proof, no password, and never the
   raw message (a client may have typed its password into the user field).
   Which text the *client* gets is the caller's choice (Kafka sends a fixed
   one, see :mod:`zkcoord.core.sasl`).
3. An unknown user fails exactly as a wrong password does: the server
   answers a server-first message with a salt made from the user name and a
   key of the caller's (stable per user, so two tries look alike), then
   refuses the proof after the same computation. (Kafka itself refuses an
   unknown user at once, which tells a client which users exist.) Proofs and
   signatures are compared with :func:`hmac.compare_digest`.
4. Kafka's grammar is kept, with three differences that no Kafka client
   meets: the ``m=`` attribute is refused (RFC 5802 says it must be); the
   AuthMessage is built from the messages as sent (Kafka rebuilds it from the
   parsed fields, which differs only when a client sends several extensions
   or extensions in its final message); an ``a=`` authzid is compared
   after unescaping (``=2C``, ``=3D``), as the user name is.
5. Delegation-token logins (the ``tokenauth=true`` extension) are refused:
   zkcoord does not check Kafka's delegation tokens.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass, field
from types import MappingProxyType

from zkcoord.errors import AuthenticationError

__all__ = [
    "ScramMechanism", "MECHANISMS", "ScramCredential", "parse_credential", "format_credential",
    "make_credential", "ScramError", "ScramFormatError", "ScramAuthenticationError",
    "ScramCredentialMismatchError", "ClientFirst", "ServerFirst", "ClientFinal", "ServerFinal",
    "parse_client_first", "parse_server_first", "parse_client_final", "parse_server_final",
    "sasl_name", "unescape_sasl_name", "ScramServer", "PassiveScramVerifier", "TOKEN_AUTH",
    "UNKNOWN_USER_ITERATIONS", "mechanism_of", "unknown_user_credential",
]


@dataclass(frozen=True)
class ScramMechanism:
    """One SCRAM mechanism: its name, hash (a :mod:`hashlib` name) and
    Kafka's iteration bounds (a credential below ``min_iterations`` cannot
    log in; Kafka's tools refuse to make one above ``max_iterations``)."""

    name: str
    hash_name: str
    min_iterations: int
    max_iterations: int

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


MECHANISMS: MappingProxyType[str, ScramMechanism] = MappingProxyType({
    "SCRAM-SHA-256": ScramMechanism("SCRAM-SHA-256", "sha256", 4096, 16384),
    "SCRAM-SHA-512": ScramMechanism("SCRAM-SHA-512", "sha512", 4096, 16384),
})

TOKEN_AUTH = "tokenauth"  # ScramLoginModule.TOKEN_AUTH_CONFIG
# ConfigCommand's default: what an unknown user's made-up credential claims.
UNKNOWN_USER_ITERATIONS = 4096


def mechanism_of(name: str) -> ScramMechanism:
    try:
        return MECHANISMS[name]
    except (KeyError, TypeError):
        raise ValueError(f"{name!r} is not a SCRAM mechanism; expected one of {', '.join(MECHANISMS)}") from None


# ------------------------------------------------------------ errors
class ScramError(AuthenticationError):
    """A SCRAM login refused; the text says why and is safe to log."""


class ScramFormatError(ScramError):
    """A message that is not what SCRAM (Kafka's grammar) allows at this step."""


class ScramAuthenticationError(ScramError):
    """Well-formed, but the credentials are wrong: unknown user, wrong proof,
    a server signature that does not match."""


class ScramCredentialMismatchError(ScramAuthenticationError):
    """The broker's salt or iteration count differs from the credential the
    verifier was given: one of the two is out of date (read it again)."""


# ------------------------------------------------------------ credentials
@dataclass(frozen=True)
class ScramCredential:
    """What a server keeps of a SCRAM password. Its repr shows only the
    iteration count: the keys allow an offline guess of the password."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def fits(self, mechanism: ScramMechanism) -> bool:
        """Whether the keys have the mechanism's digest size."""
        size = mechanism.digest_size
        return len(self.stored_key) == size and len(self.server_key) == size


_CREDENTIAL_FIELDS = ("salt", "stored_key", "server_key", "iterations")


def parse_credential(text: str, mechanism: str | None = None) -> ScramCredential:
    """Kafka's stored text of a credential -> :class:`ScramCredential`.

    ValueError naming what is wrong (never the text itself). With
    ``mechanism``, the keys must also have its digest size.
    """
    if not isinstance(text, str):
        raise ValueError(f"a SCRAM credential is text, got {type(text).__name__}")
    fields: dict[str, str] = {}
    for token in text.split(","):
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise ValueError("a SCRAM credential must be comma-separated name=value fields "
                             f"({', '.join(_CREDENTIAL_FIELDS)}); a field has no name")
        fields[key] = value
    if sorted(fields) != sorted(_CREDENTIAL_FIELDS):
        missing = [f for f in _CREDENTIAL_FIELDS if f not in fields]
        raise ValueError(f"a SCRAM credential has exactly the fields {', '.join(_CREDENTIAL_FIELDS)}; "
                         + (f"missing {', '.join(missing)}" if missing else f"it has {len(fields)} fields"))
    salt, stored_key, server_key = (_b64_field(fields, name) for name in _CREDENTIAL_FIELDS[:3])
    iterations_text = fields["iterations"]
    if not iterations_text.isascii() or not iterations_text.isdigit() or len(iterations_text) > 10:
        raise ValueError("the iterations of a SCRAM credential must be a positive whole number")
    iterations = int(iterations_text)
    if not 0 < iterations < 2 ** 31:
        raise ValueError(f"the iterations of a SCRAM credential must be between 1 and {2 ** 31 - 1}, "
                         f"not {iterations}")
    credential = ScramCredential(salt, stored_key, server_key, iterations)
    if mechanism is not None and not credential.fits(mechanism_of(mechanism)):
        raise ValueError(f"the keys of this SCRAM credential are not {mechanism} keys "
                         f"({mechanism_of(mechanism).digest_size} bytes each)")
    return credential


def _b64_field(fields: dict[str, str], name: str) -> bytes:
    try:
        return base64.b64decode(fields[name].encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError(f"the {name} of a SCRAM credential is not base64") from None


def format_credential(credential: ScramCredential) -> str:
    """The text Kafka stores (``ScramCredentialUtils.credentialToString``)."""
    b64 = lambda data: base64.b64encode(data).decode("ascii")  # noqa: E731
    return (f"salt={b64(credential.salt)},stored_key={b64(credential.stored_key)},"
            f"server_key={b64(credential.server_key)},iterations={credential.iterations}")


def make_credential(mechanism: str, password: object, salt: bytes, iterations: int) -> ScramCredential:
    """The credential of ``password`` (text or a Password) with ``salt``.

    Kafka normalises a password by encoding it as UTF-8 (no SASLprep).
    """
    mech = mechanism_of(mechanism)
    if not isinstance(iterations, int) or iterations <= 0:
        raise ValueError(f"SCRAM iterations must be a positive whole number, not {iterations!r}")
    text = getattr(password, "value", password)
    if not isinstance(text, str):
        raise ValueError("a SCRAM password is text")
    salted = hashlib.pbkdf2_hmac(mech.hash_name, text.encode("utf-8"), salt, iterations)
    client_key = mech.hmac(salted, b"Client Key")
    return ScramCredential(bytes(salt), mech.hash(client_key), mech.hmac(salted, b"Server Key"), iterations)


# ------------------------------------------------------------ messages
# ScramMessages.AbstractScramMessage's character classes, as Python regexes.
_ALPHA = r"[A-Za-z]+"
_VALUE_SAFE = r"[\x01-\x2B\x2D-\x3C\x3E-\x7F]+"  # \x01-\x7F but not ',' '='
_VALUE = r"[\x01-\x2B\x2D-\x7F]+"  # \x01-\x7F but not ','
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"  # \x21-\x7E but not ','
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_B64 = r"(?:[A-Za-z0-9/+]{4})*(?:[A-Za-z0-9/+]{3}=|[A-Za-z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,{_ALPHA}={_VALUE})*"

_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)(?P<reserved>m={_VALUE},)?"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
_SERVER_FIRST = re.compile(
    rf"(?P<reserved>m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_B64}),i=(?P<iterations>[0-9]+)"
    rf"(?P<extensions>{_EXTENSIONS})")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_B64}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS})),"
    rf"p=(?P<proof>{_B64})")
_SERVER_FINAL = re.compile(rf"e=(?P<error>{_VALUE_SAFE})|v=(?P<signature>{_B64})(?P<extensions>{_EXTENSIONS})")
_NONCE = re.compile(_PRINTABLE)


def _text(data: bytes, what: str) -> str:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ScramFormatError(f"the SCRAM {what} message must be bytes")
    try:
        return bytes(data).decode("ascii")
    except UnicodeDecodeError:
        raise ScramFormatError(f"the SCRAM {what} message is not ASCII (Kafka's SCRAM grammar allows "
                               "only ASCII names, nonces and values)") from None


def _extensions(text: str) -> tuple[tuple[str, str], ...]:
    """``",a=1,b=2"`` -> ``(("a", "1"), ("b", "2"))``; later duplicates win (Kafka's map)."""
    found: dict[str, str] = {}
    for item in text.split(",")[1:]:
        key, _, value = item.partition("=")
        found[key] = value
    return tuple(found.items())


def sasl_name(username: str) -> str:
    """A user name as a SCRAM ``saslname``: ``=`` -> ``=3D``, ``,`` -> ``=2C``."""
    return username.replace("=", "=3D").replace(",", "=2C")


def unescape_sasl_name(name: str) -> str:
    """A ``saslname`` back to the user name; ScramFormatError if an ``=`` is
    not followed by ``2C`` or ``3D``."""
    if re.fullmatch(_SASLNAME, name) is None:
        raise ScramFormatError("a SCRAM user name has '=' only as =2C (',') or =3D ('=')")
    return re.sub(r"=2C|=3D", lambda m: "," if m.group() == "=2C" else "=", name)


@dataclass(frozen=True)
class ClientFirst:
    """A parsed client-first message. ``bare`` is the client-first-message-
    bare as sent (it goes into the AuthMessage)."""

    gs2_header: str
    authzid: str
    username: str
    nonce: str
    extensions: tuple[tuple[str, str], ...]
    bare: str

    @property
    def token_auth(self) -> bool:
        """Whether this is a delegation-token login (Boolean.parseBoolean)."""
        return dict(self.extensions).get(TOKEN_AUTH, "").lower() == "true"


@dataclass(frozen=True)
class ServerFirst:
    nonce: str
    salt: bytes = field(repr=False)
    iterations: int
    text: str = field(repr=False)

    def to_bytes(self) -> bytes:
        return self.text.encode("ascii")


@dataclass(frozen=True)
class ClientFinal:
    channel_binding: bytes
    nonce: str
    proof: bytes = field(repr=False)
    without_proof: str = field(repr=False)


@dataclass(frozen=True)
class ServerFinal:
    """``e=`` (the server's error) or ``v=`` (its signature)."""

    error: str | None
    signature: bytes | None = field(repr=False)


def parse_client_first(data: bytes) -> ClientFirst:
    text = _text(data, "client-first")
    if text.startswith(("y,", "p=")):
        raise ScramFormatError("the SCRAM client-first message asks for channel binding (gs2 flag "
                               f"{text[0]!r}); Kafka supports only 'n' (no channel binding)")
    match = _CLIENT_FIRST.fullmatch(text)
    if match is None:
        raise ScramFormatError("the SCRAM client-first message is not 'n,[a=<authzid>],n=<user>,r=<nonce>"
                               "[,<extensions>]' (Kafka's grammar: ASCII, '=' in names only as =2C or =3D)")
    if match["reserved"]:
        raise ScramFormatError("the SCRAM client-first message carries the reserved m= attribute, which "
                               "RFC 5802 says must fail the login")
    authzid = match["authzid"]
    return ClientFirst(match["gs2"], unescape_sasl_name(authzid) if authzid else "",
                       unescape_sasl_name(match["saslname"]), match["nonce"],
                       _extensions(match["extensions"]), match["bare"])


def parse_server_first(data: bytes) -> ServerFirst:
    text = _text(data, "server-first")
    match = _SERVER_FIRST.fullmatch(text)
    if match is None:
        raise ScramFormatError("the SCRAM server-first message is not 'r=<nonce>,s=<salt>,i=<iterations>'")
    if match["reserved"]:
        raise ScramFormatError("the SCRAM server-first message carries the reserved m= attribute")
    iterations = int(match["iterations"]) if len(match["iterations"]) <= 10 else 0
    if not 0 < iterations < 2 ** 31:
        raise ScramFormatError("the SCRAM server-first message's iteration count is not a positive 32-bit number")
    return ServerFirst(match["nonce"], base64.b64decode(match["salt"]), iterations, text)


def parse_client_final(data: bytes) -> ClientFinal:
    text = _text(data, "client-final")
    match = _CLIENT_FINAL.fullmatch(text)
    if match is None:
        raise ScramFormatError("the SCRAM client-final message is not 'c=<channel binding>,r=<nonce>,p=<proof>'")
    return ClientFinal(base64.b64decode(match["channel"]), match["nonce"], base64.b64decode(match["proof"]),
                       match["without_proof"])


def parse_server_final(data: bytes) -> ServerFinal:
    text = _text(data, "server-final")
    match = _SERVER_FINAL.fullmatch(text)
    if match is None:
        raise ScramFormatError("the SCRAM server-final message is neither 'e=<error>' nor 'v=<signature>'")
    if match["error"] is not None:
        return ServerFinal(match["error"], None)
    return ServerFinal(None, base64.b64decode(match["signature"]))


# ------------------------------------------------------------ the exchange
def _auth_message(client_first: ClientFirst, server_first_text: str, client_final: ClientFinal) -> bytes:
    return f"{client_first.bare},{server_first_text},{client_final.without_proof}".encode("ascii")


def _check_client_final(client_first: ClientFirst, server_nonce_full: str, client_final: ClientFinal) -> None:
    """What the client-final must say before its proof is worth checking."""
    if client_final.nonce != server_nonce_full:
        raise ScramFormatError("the SCRAM client-final message's nonce is not the one of the server-first message")
    if client_final.channel_binding != client_first.gs2_header.encode("ascii"):
        raise ScramFormatError("the SCRAM client-final message's channel binding (c=) is not the gs2 header of its "
                               "client-first message (no channel binding: c=biws)")


def _proof_is_right(mech: ScramMechanism, credential: ScramCredential, auth_message: bytes,
                    proof: bytes) -> bool:
    """RFC 5802: ClientKey = proof XOR HMAC(StoredKey, AuthMessage); H(ClientKey) == StoredKey."""
    signature = mech.hmac(credential.stored_key, auth_message)
    if len(proof) != len(signature):
        proof = bytes(len(signature))  # still compute and compare: same work as a wrong proof
        right_size = False
    else:
        right_size = True
    client_key = bytes(a ^ b for a, b in zip(proof, signature))
    return hmac.compare_digest(mech.hash(client_key), credential.stored_key) and right_size


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while number:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
    return out or "0"


def unknown_user_credential(mechanism: str, username: str, key: bytes) -> ScramCredential:
    """A made-up credential for a user that has none: the salt looks like
    Kafka's (base36 text of 130 bits) and is stable per ``key`` and user, the
    keys match no password anyone can know (finding one means inverting the
    hash)."""
    mech = mechanism_of(mechanism)
    seed = hmac.new(key, f"{mechanism}\0{username}".encode("utf-8", "surrogatepass"), "sha256").digest()
    salt = _base36(int.from_bytes(seed[:17], "big") >> 6).encode("ascii")
    stored_key = mech.hmac(seed, b"stored key")
    return ScramCredential(salt, stored_key, mech.hmac(seed, b"server key"), UNKNOWN_USER_ITERATIONS)


class ScramServer:
    """The server side of one SCRAM login, after the client-first message.

    ``credential`` is the user's (None: no such user, rule 3);
    ``server_nonce`` is printable ASCII without ``,`` drawn by the caller;
    ``unknown_user_key`` makes the salt of users that do not exist (a secret
    of the caller's, stable for the process). Raises ScramError at once when
    the login cannot go on (a delegation token, an authzid that is not the
    user, a credential below the mechanism's iterations).
    """

    def __init__(self, mechanism: str, client_first: ClientFirst, credential: ScramCredential | None,
                 server_nonce: str, *, unknown_user_key: bytes = b"") -> None:
        self.mechanism = mechanism_of(mechanism)
        if not isinstance(server_nonce, str) or _NONCE.fullmatch(server_nonce) is None:
            raise ValueError("a SCRAM server nonce is printable ASCII without ','")
        self.client_first = client_first
        self.username = client_first.username
        if client_first.token_auth:
            raise ScramAuthenticationError("a delegation-token login (tokenauth) is not supported by zkcoord")
        if client_first.authzid and client_first.authzid != client_first.username:
            raise ScramAuthenticationError("the client asked for an authorization id that is not its user name")
        self.known = credential is not None
        if credential is not None and credential.iterations < self.mechanism.min_iterations:
            raise ScramAuthenticationError(
                f"the {self.mechanism.name} credential of user {self.username!r} has {credential.iterations} "
                f"iterations, fewer than the minimum {self.mechanism.min_iterations}; set it again")
        if credential is not None and not credential.fits(self.mechanism):
            raise ScramAuthenticationError(f"the {self.mechanism.name} credential of user {self.username!r} "
                                           f"does not have {self.mechanism.name} keys; set it again")
        self._credential = credential or unknown_user_credential(mechanism, self.username, unknown_user_key)
        nonce = client_first.nonce + server_nonce
        salt = base64.b64encode(self._credential.salt).decode("ascii")
        text = f"r={nonce},s={salt},i={self._credential.iterations}"
        self.server_first = ServerFirst(nonce, self._credential.salt, self._credential.iterations, text)
        self.complete = False

    def server_first_bytes(self) -> bytes:
        return self.server_first.to_bytes()

    def client_final(self, data: bytes) -> bytes:
        """Check the client-final message; the server-final bytes if the
        proof is right, else ScramAuthenticationError (ScramFormatError for
        a message that is not right at all)."""
        if self.complete:
            raise ScramFormatError("this SCRAM login is complete; no further message is expected")
        final = parse_client_final(data)
        _check_client_final(self.client_first, self.server_first.nonce, final)
        auth_message = _auth_message(self.client_first, self.server_first.text, final)
        right = _proof_is_right(self.mechanism, self._credential, auth_message, final.proof)
        if not self.known:
            raise ScramAuthenticationError(f"user {self.username!r} has no {self.mechanism.name} credential")
        if not right:
            raise ScramAuthenticationError(f"wrong {self.mechanism.name} proof for user {self.username!r} "
                                           "(wrong password)")
        self.complete = True
        signature = self.mechanism.hmac(self._credential.server_key, auth_message)
        return b"v=" + base64.b64encode(signature)


class PassiveScramVerifier:
    """Checks a SCRAM login that passes by: client-first, then the broker's
    server-first, the client-final, the broker's server-final.

    Each ``observe_*`` raises ScramError when the login must not go on;
    :meth:`observe_client_final` checks the client's proof against the
    credential (so the gateway can refuse before the broker sees it) and
    :meth:`observe_server_final` the broker's signature, returning the user
    name the login proved.
    """

    def __init__(self, mechanism: str, client_first: bytes) -> None:
        self.mechanism = mechanism_of(mechanism)
        self.client_first = parse_client_first(client_first)
        self.username = self.client_first.username
        if self.client_first.token_auth:
            raise ScramAuthenticationError("a delegation-token login (tokenauth) cannot be verified by zkcoord: "
                                           "log in with a SCRAM user instead")
        if self.client_first.authzid and self.client_first.authzid != self.username:
            raise ScramAuthenticationError("the client asked for an authorization id that is not its user name")
        self._server_first: ServerFirst | None = None
        self._auth_message: bytes | None = None
        self._credential: ScramCredential | None = None
        self.verified_client = False

    def observe_server_first(self, data: bytes) -> None:
        if self._server_first is not None:
            raise ScramFormatError("a second SCRAM server-first message")
        server_first = parse_server_first(data)
        if not server_first.nonce.startswith(self.client_first.nonce) or \
                len(server_first.nonce) == len(self.client_first.nonce):
            raise ScramFormatError("the broker's server-first nonce does not extend the client's nonce")
        self._server_first = server_first

    def observe_client_final(self, data: bytes, credential: ScramCredential | None) -> None:
        server_first = self._server_first
        if server_first is None or self._auth_message is not None:
            raise ScramFormatError("a SCRAM client-final message out of turn")
        final = parse_client_final(data)
        _check_client_final(self.client_first, server_first.nonce, final)
        name = self.mechanism.name
        if credential is None:
            raise ScramAuthenticationError(f"user {self.username!r} has no {name} credential in ZooKeeper")
        if not credential.fits(self.mechanism):
            raise ScramAuthenticationError(f"the {name} credential of user {self.username!r} does not have "
                                           f"{name} keys")
        if not hmac.compare_digest(credential.salt, server_first.salt) or \
                credential.iterations != server_first.iterations:
            raise ScramCredentialMismatchError(
                f"the broker's salt or iteration count for user {self.username!r} ({name}) differs from the "
                "credential in ZooKeeper: it changed meanwhile")
        auth_message = _auth_message(self.client_first, server_first.text, final)
        if not _proof_is_right(self.mechanism, credential, auth_message, final.proof):
            raise ScramAuthenticationError(f"wrong {name} proof for user {self.username!r} (wrong password)")
        self._auth_message, self._credential, self.verified_client = auth_message, credential, True

    def observe_server_final(self, data: bytes) -> str:
        if self._auth_message is None or self._credential is None:
            raise ScramFormatError("a SCRAM server-final message out of turn")
        final = parse_server_final(data)
        if final.error is not None:
            raise ScramAuthenticationError(f"the broker refused the login of user {self.username!r} "
                                           f"(e={final.error})")
        expected = self.mechanism.hmac(self._credential.server_key, self._auth_message)
        if not hmac.compare_digest(expected, final.signature or b""):
            raise ScramAuthenticationError(
                f"the broker's {self.mechanism.name} server signature for user {self.username!r} does not match "
                "the credential in ZooKeeper")
        return self.username
