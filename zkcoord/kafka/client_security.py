"""How zkcoord's own clients log in to Kafka brokers (and to zkcoord's daemons).

Owns :class:`KafkaClientSecurity`: a Kafka client's security settings, read
with the Java client's property names (``security.protocol``,
``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.*``; librdkafka's
``sasl.mechanisms``, ``sasl.username``, ``sasl.password``,
``ssl.ca.location`` as synonyms), and written for each client zkcoord
drives: kafka-python keyword arguments, a librdkafka configuration, a Java
client's properties. And :func:`open_kafka_connection`: an asyncio
connection with TLS and, on SASL listeners, the login done (ApiVersions,
SaslHandshake v1, SaslAuthenticate v0-2, the client side run by
kafka-python's own mechanism classes, every frame built by its generated
protocol classes).

Rules:

* Secrets are :class:`Password` until a client library needs the text; the
  option dicts handed out hide them in their repr, and no message names one.
* Errors at the boundary: a refused, unreachable or silent server is a
  ServiceUnavailableError, an untrusted certificate or a refused login an
  AuthenticationError naming host:port, the mechanism and the user.
* Logging in with GSSAPI or OAUTHBEARER is not offered yet: ConfigError.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import kafka.errors
from kafka.net.sasl import get_sasl_mechanism
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.sasl import (SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
                                 SaslHandshakeResponse)
from kafka.protocol.schemas.fields.codecs import Int32

import zkcoord
from zkcoord.core.api_keys import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from zkcoord.errors import AuthenticationError, ConfigError, ServiceUnavailableError
from zkcoord.password import HIDDEN, Password
from zkcoord.security.properties import parse_jaas_config, read_properties
from zkcoord.security.tls import SslSettings
from zkcoord.wire.messages import build_message
from zkcoord.wire.responses import decode_response_frame

__all__ = ["KafkaClientSecurity", "KafkaConnection", "open_kafka_connection", "SecretOptions", "PROTOCOLS",
           "MECHANISMS", "format_java_properties"]

log = logging.getLogger(__name__)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
NOT_YET = ("GSSAPI", "OAUTHBEARER")
LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}
UNSUPPORTED_VERSION, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE = 35, 33, 34
SECRET_KEYS = frozenset({"sasl_plain_password", "sasl.password", "sasl.jaas.config", "ssl.key.password",
                         "ssl.keystore.password", "ssl.truststore.password", "ssl.keystore.key",
                         "ssl.keystore.certificate.chain", "ssl.truststore.certificates", "ssl.key.pem"})


class SecretOptions(dict):
    """Client options holding secrets in clear text (the libraries want text):
    the repr hides them, so a logged dict leaks nothing."""

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {HIDDEN if k in SECRET_KEYS else repr(v)}" for k, v in self.items()) + "}"

    __str__ = __repr__


def _scram_username(name: str) -> str:
    """RFC 5802's saslname: ',' and '=' escaped (kafka-python sends the name as it is)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class KafkaClientSecurity:
    """A Kafka client's security settings (Kafka's ``security.protocol`` and friends)."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Password | None = None
    ssl: SslSettings = field(default_factory=SslSettings)

    def __post_init__(self) -> None:
        protocol = (self.security_protocol or "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise ConfigError(f"security.protocol is {self.security_protocol!r}; use one of {', '.join(PROTOCOLS)}")
        object.__setattr__(self, "security_protocol", protocol)
        if isinstance(self.sasl_password, str):
            object.__setattr__(self, "sasl_password", Password(self.sasl_password))
        if self.ssl is None:
            object.__setattr__(self, "ssl", SslSettings())
        if not self.uses_sasl:
            return
        mechanism = (self.sasl_mechanism or "").strip().upper()
        if not mechanism:
            raise ConfigError(f"security.protocol {protocol} needs sasl.mechanism (Kafka's default, GSSAPI, is not "
                              f"offered by zkcoord's clients); use one of {', '.join(MECHANISMS)}")
        if mechanism in NOT_YET:
            raise ConfigError(f"sasl.mechanism {mechanism}: zkcoord's clients do not log in with it yet; use one of "
                              f"{', '.join(MECHANISMS)}")
        if mechanism not in MECHANISMS:
            raise ConfigError(f"sasl.mechanism is {self.sasl_mechanism!r}; use one of {', '.join(MECHANISMS)}")
        object.__setattr__(self, "sasl_mechanism", mechanism)
        if not self.sasl_username or self.sasl_password is None:
            raise ConfigError(f"security.protocol {protocol} with {mechanism} needs a user and a password: set "
                              f"sasl.jaas.config ({LOGIN_MODULES[mechanism]} required username=\"...\" "
                              f"password=\"...\";) or sasl.username and sasl.password")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol.endswith("SSL")

    # -- reading --------------------------------------------------------------------------

    @classmethod
    def from_properties(cls, props: Mapping[str, str], where: str = "client properties", *,
                        load_stores: bool = True) -> KafkaClientSecurity:
        """Settings from a Java client's (or librdkafka's) property names; other keys are ignored.
        With TLS the stores are loaded once here (``load_stores``), so a wrong path or
        password is a ConfigError at start rather than at the first connection."""
        protocol = props.get("security.protocol", "PLAINTEXT")
        mechanism = props.get("sasl.mechanism") or props.get("sasl.mechanisms")
        username, password = props.get("sasl.username"), props.get("sasl.password")
        jaas = props.get("sasl.jaas.config")
        if jaas:
            if username or password:
                raise ConfigError(f"{where}: both sasl.jaas.config and sasl.username/sasl.password are set; "
                                  f"keep one")
            username, password = _jaas_credentials(jaas, where)
        ssl_props = dict(props)
        if "ssl.ca.location" in props and "ssl.truststore.location" not in props:
            ssl_props["ssl.truststore.location"] = props["ssl.ca.location"]  # librdkafka's name: a PEM file
        if ssl_props.get("ssl.endpoint.identification.algorithm", "").strip().lower() == "none":
            ssl_props["ssl.endpoint.identification.algorithm"] = ""  # librdkafka's way of saying it
        librdkafka_only = sorted(k for k in ("ssl.certificate.location", "ssl.key.location") if k in props)
        if librdkafka_only:
            raise ConfigError(f"{where}: {', '.join(librdkafka_only)} are librdkafka's; zkcoord reads Kafka's names: "
                              f"ssl.keystore.location with a PEM file holding the key and its certificate chain "
                              f"(and ssl.key.password), or a PKCS12 store")
        try:
            settings = SslSettings.from_properties(ssl_props, where)
            sasl = str(protocol).strip().upper().startswith("SASL_")
            if not sasl and (mechanism or username):
                log.warning("%s: SASL settings ignored: security.protocol is %s", where, protocol)
                mechanism = username = password = None
            security = cls(protocol, mechanism, username, Password(password) if password is not None else None,
                           settings)
            if load_stores and security.uses_tls:
                security.ssl.client_context()
            return security
        except ConfigError as exc:
            text = str(exc)
            raise ConfigError(text if text.startswith(where) else f"{where}: {text}") from None

    @classmethod
    def from_file(cls, path: str | Path, *, load_stores: bool = True) -> KafkaClientSecurity:
        """From a client properties file (what Kafka's tools take as ``--command-config``)."""
        return cls.from_properties(read_properties(path), where=f"client properties file {path}",
                                   load_stores=load_stores)

    # -- writing for each client library ----------------------------------------------------

    def _wire_username(self) -> str:
        if self.sasl_mechanism.startswith("SCRAM-"):
            return _scram_username(self.sasl_username)
        return self.sasl_username

    def kafka_python_options(self) -> SecretOptions:
        """Keyword arguments for kafka-python's KafkaAdminClient / KafkaConsumer /
        KafkaProducer. The TLS side is a ready ``ssl_context`` (so PKCS12 and
        inline stores work); ``ssl_check_hostname`` says the same as the context."""
        options = SecretOptions(security_protocol=self.security_protocol)
        if self.uses_sasl:
            options.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self._wire_username(),
                           sasl_plain_password=self.sasl_password.value)
        if self.uses_tls:
            options.update(ssl_context=self.ssl.client_context(),
                           ssl_check_hostname=self.ssl.endpoint_identification_algorithm == "https")
        return options

    def librdkafka_config(self) -> SecretOptions:
        """librdkafka's (confluent-kafka's) configuration for the same login."""
        config = SecretOptions({"security.protocol": self.security_protocol.lower()})
        if self.uses_sasl:
            config.update({"sasl.mechanisms": self.sasl_mechanism, "sasl.username": self.sasl_username,
                           "sasl.password": self.sasl_password.value})
        if not self.uses_tls:
            return config
        tls = self.ssl
        config["ssl.endpoint.identification.algorithm"] = tls.endpoint_identification_algorithm or "none"
        if tls.truststore_location and tls.truststore_kind() == "PEM":
            config["ssl.ca.location"] = tls.truststore_location
        elif tls.has_truststore:  # PKCS12 or inline: librdkafka takes the certificates as text
            config["ssl.ca.pem"] = tls.trusted_certificates_pem()
        if tls.keystore_key is not None:
            config.update({"ssl.certificate.pem": tls.keystore_certificate_chain.value,
                           "ssl.key.pem": tls.keystore_key.value})
        elif tls.keystore_location and tls.keystore_kind() == "PEM":
            # one file: OpenSSL picks the certificates and the key out of it
            config.update({"ssl.certificate.location": tls.keystore_location,
                           "ssl.key.location": tls.keystore_location})
        elif tls.keystore_location:
            config.update({"ssl.keystore.location": tls.keystore_location,
                           "ssl.keystore.password": tls.keystore_password.value})
        if tls.key_password is not None and tls.keystore_kind() == "PEM":
            config["ssl.key.password"] = tls.key_password.value
        if tls.openssl_cipher_list():
            config["ssl.cipher.suites"] = tls.openssl_cipher_list()
        return config

    def java_properties(self) -> SecretOptions:
        """A Java client's properties: ``sasl.jaas.config`` with quotes and
        backslashes escaped, store types always named (Java's default is JKS)."""
        props = SecretOptions({"security.protocol": self.security_protocol})
        if self.uses_sasl:
            props["sasl.mechanism"] = self.sasl_mechanism
            props["sasl.jaas.config"] = (f"{LOGIN_MODULES[self.sasl_mechanism]} required "
                                         f"username={_jaas_quote(self.sasl_username)} "
                                         f"password={_jaas_quote(self.sasl_password.value)};")
        for key, value in self.ssl.to_properties().items():
            props[key] = value.value if isinstance(value, Password) else value
        if self.ssl.truststore_location and not self.ssl.truststore_type:
            props["ssl.truststore.type"] = self.ssl.truststore_kind()
        if self.ssl.keystore_location and not self.ssl.keystore_type:
            props["ssl.keystore.type"] = self.ssl.keystore_kind()
        return props

    def write_java_properties(self, path: str | Path) -> Path:
        """:meth:`java_properties` as a file only its owner reads (0600)."""
        return _write_private(Path(path), format_java_properties(self.java_properties()))

    def write_librdkafka_config(self, path: str | Path) -> Path:
        """:meth:`librdkafka_config` as ``key=value`` lines (kcat's ``-F`` file), 0600."""
        config = self.librdkafka_config()
        multiline = sorted(k for k, v in config.items() if "\n" in str(v))
        if multiline:
            raise ConfigError(f"{', '.join(multiline)} hold PEM text, which a librdkafka file cannot; give the "
                              f"stores as PEM files (ssl.truststore.location, ssl.keystore.location)")
        return _write_private(Path(path), "".join(f"{k}={v}\n" for k, v in config.items()))

    def describe(self) -> str:
        """For logs: ``SASL_SSL, SCRAM-SHA-512 as alice``; never a secret."""
        text = self.security_protocol
        if self.uses_sasl:
            text += f", {self.sasl_mechanism} as {self.sasl_username}"
        if self.uses_tls and self.ssl.has_keystore:
            text += ", with a client certificate"
        return text


def _jaas_credentials(text: str, where: str) -> tuple[str, str]:
    modules = parse_jaas_config(text, where=f"{where}: sasl.jaas.config")
    module = modules[0]
    if module.simple_name not in ("PlainLoginModule", "ScramLoginModule"):
        raise ConfigError(f"{where}: sasl.jaas.config uses {module.simple_name}; zkcoord's clients log in with "
                          f"PlainLoginModule or ScramLoginModule (username and password) only")
    missing = [k for k in ("username", "password") if k not in module.options]
    if missing:
        raise ConfigError(f"{where}: sasl.jaas.config has no {' and no '.join(missing)} option")
    return module.options["username"], module.options["password"]


def _write_private(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)
    return path


def _escape_properties(text: str, key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch in "\\=:#!" or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.append("".join(f"\\u{unit:04x}" for unit in _utf16_units(ch)))
        else:
            out.append(ch)
    return "".join(out)


def _utf16_units(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def format_java_properties(props: Mapping[str, str]) -> str:
    """``props`` as ``java.util.Properties.store`` escapes them (the file reads back exactly)."""
    return "".join(f"{_escape_properties(k, True)}={_escape_properties(str(v), False)}\n" for k, v in props.items())


# -- an asyncio connection, logged in ---------------------------------------------------------


class _Closed(Exception):
    """The server closed the connection (or reset it) while we waited for an answer."""


@dataclass
class KafkaConnection:
    """An open connection, logged in: send requests with :meth:`call` or use
    the streams directly, taking correlation ids from ``next_correlation_id``."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    where: str
    client_id: str
    api_versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    next_correlation_id: int = 1
    user: str | None = None  # the SASL user we logged in as
    session_lifetime_ms: int = 0  # KIP-368: 0 when the server does not ask for re-authentication

    async def _exchange(self, request, version: int) -> bytes:
        """Send ``request`` at ``version``, return the whole answer frame."""
        correlation_id = self.next_correlation_id
        self.next_correlation_id += 1
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        try:
            self.writer.write(bytes(request.encode(header=True, framed=True)))
            await self.writer.drain()
            prefix = await self.reader.readexactly(4)
            size, _ = Int32.decode_from(prefix, 0)
            return prefix + await self.reader.readexactly(size)
        except ssl.SSLError as exc:  # TLS 1.3: a refused client certificate shows on the first read
            raise AuthenticationError(f"TLS with {self.where} failed after the handshake: {exc.reason or exc} "
                                      f"(the server refused our client certificate, or we have none?)") from None
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise _Closed(str(exc)) from None

    async def call(self, request_class, version: int, response_class, **fields):
        """One request built from plain values with kafka-python's generated
        class; its decoded answer. ServiceUnavailableError when the server goes away."""
        request = build_message(request_class, version, **fields)
        try:
            frame = await self._exchange(request, version)
        except _Closed as exc:
            raise ServiceUnavailableError(f"{self.where} closed the connection instead of answering "
                                          f"{request_class.__name__} v{version}: {exc}") from None
        return decode_response_frame(frame, response_class, version)[1]

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass


async def open_kafka_connection(host: str, port: int, security: KafkaClientSecurity, *,
                                client_id: str = "zkcoord", timeout_s: float = 10.0) -> KafkaConnection:
    """Connect to a Kafka broker (or a zkcoord daemon) at ``host:port``, with
    TLS (the server's name checked against ``host``) and the SASL login as
    ``security`` says; within ``timeout_s`` for all of it."""
    where = f"{host}:{port}"
    context = security.ssl.client_context() if security.uses_tls else None
    connection: KafkaConnection | None = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await _connect(host, port, context, where)
            connection = KafkaConnection(reader, writer, where, client_id)
            connection.api_versions = await _api_versions(connection, security)
            if security.uses_sasl:
                await _sasl_login(connection, security, host)
    except BaseException as exc:
        if connection is not None:
            await connection.close()
        if isinstance(exc, TimeoutError):
            steps = "ApiVersions and the SASL login" if security.uses_sasl else "ApiVersions"
            what = ("accept a connection" + (" and finish the TLS handshake" if context else "")
                    if connection is None else f"answer {steps}")
            raise ServiceUnavailableError(f"{where} did not {what} within {timeout_s:g} s "
                                          f"({security.describe()})") from None
        raise
    log.debug("connected to %s (%s)", where, security.describe())
    return connection


async def _connect(host: str, port: int, context: ssl.SSLContext | None, where: str):
    try:
        return await asyncio.open_connection(host, port, ssl=context, server_hostname=host if context else None)
    except ssl.SSLCertVerificationError as exc:
        raise AuthenticationError(f"TLS to {where}: the server's certificate is not accepted: "
                                  f"{exc.verify_message or exc.reason} (check ssl.truststore.* and that {host} is "
                                  f"a name in the certificate)") from None
    except ssl.SSLError as exc:
        hint = " (is it a plaintext listener?)" if "WRONG_VERSION_NUMBER" in str(exc) else ""
        raise AuthenticationError(f"TLS handshake with {where} failed: {exc.reason or exc}{hint}") from None
    except ConnectionResetError as exc:
        if context is not None and exc.errno is None:  # asyncio's TLS layer: the peer left mid-handshake
            raise AuthenticationError(f"TLS handshake with {where} failed: the server closed the connection "
                                      f"(is it a plaintext listener?)") from None
        raise ServiceUnavailableError(f"{where} does not accept connections: {exc.strerror or exc}") from None
    except OSError as exc:
        raise ServiceUnavailableError(f"{where} does not accept connections: {exc.strerror or exc}") from None


async def _api_versions(connection: KafkaConnection, security: KafkaClientSecurity) -> dict[int, tuple[int, int]]:
    """The server's ApiVersions table, asking v3 first and then the version it names (KIP-511)."""
    version = 3
    for _ in range(2):
        request = build_message(ApiVersionsRequest, version, client_software_name="zkcoord",
                                client_software_version=zkcoord.__version__)
        try:
            frame = await connection._exchange(request, version)
        except _Closed:
            if security.uses_tls:
                # A TLS 1.3 server checks our certificate after the handshake looked done to us, and
                # may close without the alert that says so: the likeliest cause, not a certain one.
                ours = "not trusted by it" if security.ssl.has_keystore else "we have none"
                raise AuthenticationError(
                    f"TLS with {connection.where}: the server closed the connection right after the handshake; "
                    f"it probably refused our client certificate ({ours})") from None
            raise ServiceUnavailableError(f"{connection.where} closed the connection at its first request "
                                          f"(ApiVersions); is it a TLS listener? security.protocol is "
                                          f"{security.security_protocol}") from None
        answer = ApiVersionsResponse.decode(frame[4:], version=version, header=True)
        table = {e.api_key: (e.min_version, e.max_version) for e in answer.api_keys}
        if answer.error_code == UNSUPPORTED_VERSION and API_VERSIONS in table:
            version = min(version, table[API_VERSIONS][1])
            continue
        if answer.error_code:
            raise ServiceUnavailableError(f"{connection.where} answered ApiVersions with "
                                          f"{kafka.errors.for_code(answer.error_code).__name__}")
        return table
    raise ServiceUnavailableError(f"{connection.where} refused every ApiVersions version")


def _login_error(connection: KafkaConnection, security: KafkaClientSecurity, what: str) -> AuthenticationError:
    return AuthenticationError(f"{connection.where} refused the {security.sasl_mechanism} login of user "
                               f"{security.sasl_username!r}: {what}")


async def _sasl_login(connection: KafkaConnection, security: KafkaClientSecurity, host: str) -> None:
    table, mechanism_name = connection.api_versions, security.sasl_mechanism
    if table.get(SASL_HANDSHAKE, (0, -1))[1] < 1 or SASL_AUTHENTICATE not in table:
        raise AuthenticationError(f"{connection.where} offers no SaslHandshake v1 / SaslAuthenticate: not a SASL "
                                  f"listener (security.protocol is {security.security_protocol})")
    try:
        handshake = build_message(SaslHandshakeRequest, 1, mechanism=mechanism_name)
        _, answer = decode_response_frame(await connection._exchange(handshake, 1), SaslHandshakeResponse, 1)
        if answer.error_code == UNSUPPORTED_SASL_MECHANISM:
            raise _login_error(connection, security, f"the server does not enable {mechanism_name}; it offers "
                                                     f"{', '.join(answer.mechanisms) or 'none'}")
        if answer.error_code == ILLEGAL_SASL_STATE:  # what a broker's PLAINTEXT or SSL listener answers
            raise _login_error(connection, security, "IllegalSaslStateError (the listener takes no SASL logins: "
                                                     "is it a PLAINTEXT or SSL listener?)")
        if answer.error_code:
            raise _login_error(connection, security, kafka.errors.for_code(answer.error_code).__name__)
        version = min(table[SASL_AUTHENTICATE][1], SaslAuthenticateRequest.max_version)
        mechanism = get_sasl_mechanism(mechanism_name)(
            host=host, security_protocol=security.security_protocol, sasl_mechanism=mechanism_name,
            sasl_plain_username=security._wire_username(), sasl_plain_password=security.sasl_password.value)
        while not mechanism.is_done():
            request = build_message(SaslAuthenticateRequest, version, auth_bytes=mechanism.auth_bytes())
            frame = await connection._exchange(request, version)
            _, answer = decode_response_frame(frame, SaslAuthenticateResponse, version)
            if answer.error_code:
                name = kafka.errors.for_code(answer.error_code).__name__
                detail = f": {answer.error_message}" if answer.error_message else ""
                raise _login_error(connection, security, f"{name}{detail}")
            mechanism.receive(bytes(answer.auth_bytes))
            connection.session_lifetime_ms = getattr(answer, "session_lifetime_ms", 0) or 0
    except _Closed:
        raise _login_error(connection, security, "it closed the connection during the login (Kafka does this "
                                                 "on a mechanism or state error)") from None
    except (ValueError, KeyError) as exc:  # kafka-python's SCRAM client: a wrong nonce or signature, a bad message
        raise _login_error(connection, security, f"the server's answer fails the {mechanism_name} check: {exc} "
                                                 f"(it does not hold this user's credentials)") from None
    if not mechanism.is_authenticated():
        raise _login_error(connection, security, "the exchange ended without success")
    connection.user = security.sasl_username
