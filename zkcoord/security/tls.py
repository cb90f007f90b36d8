"""TLS from Kafka's ``ssl.*`` settings: key and trust stores, ``ssl.SSLContext``
for servers and clients, and the principal of a client certificate.

Owns :class:`SslSettings` (Kafka's names, :data:`SSL_PROPERTIES`), reading
PEM and PKCS12 stores (files or inline PEM) and the two contexts.
:func:`peer_principal` and :class:`SslPrincipalMapper`
(``ssl.principal.mapping.rules``) live in :mod:`.ssl_principal` and are
re-exported here.

Rules:

* Kafka's behaviour where Python can follow it: the same property names,
  the same checks on which settings go together
  (``DefaultSslEngineFactory``), a PEM key store is key + chain with the key
  password in ``ssl.key.password``, the server's certificate is checked
  against its host name unless ``ssl.endpoint.identification.algorithm`` is
  empty. JKS is not read (only Java reads it); the error says how to convert.
* Python's ``ssl`` loads keys only from files. A key from a PKCS12 store or
  inline PEM goes through a temporary file in a private directory (0700,
  the file 0600, in /dev/shm when there is one), encrypted with a one-time
  password, and deleted before the load returns.
* No secret in any message: errors name the setting and the file.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import secrets
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from zkcoord.errors import ConfigError
from zkcoord.password import Password
from zkcoord.security.ssl_principal import ANONYMOUS, SslPrincipalMapper, java_x500_name, peer_principal

__all__ = ["SslSettings", "SSL_PROPERTIES", "IGNORED_SSL_PROPERTIES", "SslPrincipalMapper", "peer_principal",
           "java_x500_name", "ANONYMOUS", "validity_problems"]

log = logging.getLogger(__name__)

SSL_PROPERTIES: dict[str, str] = {  # Kafka's property name -> SslSettings field
    "ssl.keystore.type": "keystore_type",
    "ssl.keystore.location": "keystore_location",
    "ssl.keystore.password": "keystore_password",
    "ssl.key.password": "key_password",
    "ssl.keystore.certificate.chain": "keystore_certificate_chain",
    "ssl.keystore.key": "keystore_key",
    "ssl.truststore.type": "truststore_type",
    "ssl.truststore.location": "truststore_location",
    "ssl.truststore.password": "truststore_password",
    "ssl.truststore.certificates": "truststore_certificates",
    "ssl.client.auth": "client_auth",
    "ssl.endpoint.identification.algorithm": "endpoint_identification_algorithm",
    "ssl.enabled.protocols": "enabled_protocols",
    "ssl.cipher.suites": "cipher_suites",
    "ssl.principal.mapping.rules": "principal_mapping_rules",
}
# Kafka settings with no meaning for Python's ssl module: read, warned about, ignored.
IGNORED_SSL_PROPERTIES = ("ssl.protocol", "ssl.provider", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
                          "ssl.secure.random.implementation", "ssl.engine.factory.class", "ssl.allow.dn.changes",
                          "ssl.allow.san.changes")
_SECRETS = {"keystore_password", "key_password", "keystore_certificate_chain", "keystore_key",
            "truststore_password", "truststore_certificates"}
_FIELD_TO_PROPERTY = {v: k for k, v in SSL_PROPERTIES.items()}
STORE_TYPES = ("PEM", "PKCS12")
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
PROTOCOLS = {"TLSV1.2": ssl.TLSVersion.TLSv1_2, "TLSV1.3": ssl.TLSVersion.TLSv1_3}
JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS
# Java/IANA names of the TLS 1.2 suites worth offering -> OpenSSL's names (openssl ciphers -stdname).
TLS12_SUITES = {f"TLS_{kx}_WITH_{enc}": name for kx, enc, name in [
    ("ECDHE_ECDSA", "AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"),
    ("ECDHE_RSA", "AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"),
    ("ECDHE_ECDSA", "AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"),
    ("ECDHE_RSA", "AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
    ("ECDHE_ECDSA", "CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
    ("ECDHE_RSA", "CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"),
    ("DHE_RSA", "AES_256_GCM_SHA384", "DHE-RSA-AES256-GCM-SHA384"),
    ("DHE_RSA", "AES_128_GCM_SHA256", "DHE-RSA-AES128-GCM-SHA256"),
    ("DHE_RSA", "CHACHA20_POLY1305_SHA256", "DHE-RSA-CHACHA20-POLY1305"),
    ("ECDHE_ECDSA", "AES_256_CBC_SHA384", "ECDHE-ECDSA-AES256-SHA384"),
    ("ECDHE_RSA", "AES_256_CBC_SHA384", "ECDHE-RSA-AES256-SHA384"),
    ("ECDHE_ECDSA", "AES_128_CBC_SHA256", "ECDHE-ECDSA-AES128-SHA256"),
    ("ECDHE_RSA", "AES_128_CBC_SHA256", "ECDHE-RSA-AES128-SHA256"),
    ("ECDHE_ECDSA", "AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"),
    ("ECDHE_RSA", "AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"),
    ("ECDHE_ECDSA", "AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"),
    ("ECDHE_RSA", "AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"),
    ("RSA", "AES_256_GCM_SHA384", "AES256-GCM-SHA384"),
    ("RSA", "AES_128_GCM_SHA256", "AES128-GCM-SHA256"),
]}
TLS13_SUITES = ("TLS_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256")


@dataclass(frozen=True)
class SslSettings:
    """Kafka's ``ssl.*`` settings of one listener or one client (see :data:`SSL_PROPERTIES`).

    Text given for a secret field becomes a :class:`Password`; types and
    choices are normalised (``pkcs12`` -> ``PKCS12``, ``HTTPS`` -> ``https``).
    """

    keystore_type: str | None = None
    keystore_location: str | None = None
    keystore_password: Password | None = None
    key_password: Password | None = None
    keystore_certificate_chain: Password | None = None
    keystore_key: Password | None = None
    truststore_type: str | None = None
    truststore_location: str | None = None
    truststore_password: Password | None = None
    truststore_certificates: Password | None = None
    client_auth: str = "none"
    endpoint_identification_algorithm: str = "https"
    enabled_protocols: str = "TLSv1.2,TLSv1.3"
    cipher_suites: str = ""
    principal_mapping_rules: str = "DEFAULT"

    def __post_init__(self) -> None:
        for name in _SECRETS:
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, Password(value))
        for name in ("keystore_type", "truststore_type"):
            value = getattr(self, name)
            if value is not None:
                location = getattr(self, name.replace("_type", "_location"))
                object.__setattr__(self, name, _store_type_name(value, _FIELD_TO_PROPERTY[name], location))
        auth = (self.client_auth or "none").strip().lower()
        if auth not in CLIENT_AUTH:
            raise ConfigError(f"ssl.client.auth is {self.client_auth!r}; use none, requested or required")
        object.__setattr__(self, "client_auth", auth)
        algorithm = (self.endpoint_identification_algorithm or "").strip().lower()
        if algorithm not in ("https", ""):
            raise ConfigError(f"ssl.endpoint.identification.algorithm is {algorithm!r}; use https (check the "
                              f"server's host name, Kafka's default) or an empty value (do not)")
        object.__setattr__(self, "endpoint_identification_algorithm", algorithm)
        _protocol_range(self.enabled_protocols)
        _cipher_plan(self.cipher_suites, _protocol_range(self.enabled_protocols))
        SslPrincipalMapper(self.principal_mapping_rules)
        self._check_combinations()

    def _check_combinations(self) -> None:
        """The combinations Kafka's DefaultSslEngineFactory refuses, with its reasons."""
        if self.keystore_key is not None or self.keystore_certificate_chain is not None:
            if self.keystore_key is None or self.keystore_certificate_chain is None:
                raise ConfigError("ssl.keystore.key and ssl.keystore.certificate.chain go together: set both "
                                  "(the PEM key and the PEM certificate chain) or neither")
            if self.keystore_type not in (None, "PEM"):
                raise ConfigError(f"ssl.keystore.key is PEM text but ssl.keystore.type is {self.keystore_type}; "
                                  f"set ssl.keystore.type=PEM or leave it out")
            if self.keystore_location:
                raise ConfigError("both ssl.keystore.location and ssl.keystore.key are set; use one of them")
        if self.keystore_type == "PEM" and self.keystore_password is not None:
            raise ConfigError("ssl.keystore.password is not used with a PEM key store; put the password of "
                              "an encrypted key in ssl.key.password")
        if self.keystore_password is not None and not (self.keystore_location or self.keystore_key):
            raise ConfigError("ssl.keystore.password is set but there is no key store "
                              "(ssl.keystore.location)")
        if self.truststore_certificates is not None:
            if self.truststore_type not in (None, "PEM"):
                raise ConfigError(f"ssl.truststore.certificates is PEM text but ssl.truststore.type is "
                                  f"{self.truststore_type}; set ssl.truststore.type=PEM or leave it out")
            if self.truststore_location:
                raise ConfigError("both ssl.truststore.location and ssl.truststore.certificates are set; "
                                  "use one of them")
        if self.truststore_type == "PEM" and self.truststore_password is not None:
            raise ConfigError("ssl.truststore.password is not used with a PEM trust store; remove it")

    @classmethod
    def from_properties(cls, props: Mapping[str, str], where: str = "settings") -> SslSettings:
        """Settings from Kafka's property names in ``props``; other keys are the caller's.
        Kafka settings zkcoord does not use (:data:`IGNORED_SSL_PROPERTIES`) are logged and ignored."""
        ignored = sorted(k for k in props if k in IGNORED_SSL_PROPERTIES)
        if ignored:
            log.warning("%s: %s: Kafka settings zkcoord does not use; ignored", where, ", ".join(ignored))
        values: dict[str, object] = {}
        for key, name in SSL_PROPERTIES.items():
            if key not in props:
                continue
            value = props[key].strip() if name not in _SECRETS else props[key]
            if name in _SECRETS:
                values[name] = Password(value) if value else None
            elif name.endswith(("_type", "_location")):
                values[name] = value or None
            else:
                values[name] = value
        try:
            return cls(**values)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def to_properties(self) -> dict[str, str | Password]:
        """Kafka's names of the settings that differ from the defaults (secrets stay Passwords)."""
        defaults = SslSettings()
        out: dict[str, str | Password] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and value != getattr(defaults, f.name):
                out[_FIELD_TO_PROPERTY[f.name]] = value
        return out

    # -- what the stores hold ------------------------------------------------------------

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_key)

    @property
    def has_truststore(self) -> bool:
        return bool(self.truststore_location or self.truststore_certificates)

    def keystore_kind(self) -> str | None:
        """PEM or PKCS12: the type given, else what the file holds; None without a key store."""
        if self.keystore_key is not None:
            return "PEM"
        if not self.keystore_location:
            return None
        return self.keystore_type or _detect_type(self.keystore_location, "ssl.keystore.location")

    def truststore_kind(self) -> str | None:
        if self.truststore_certificates is not None:
            return "PEM"
        if not self.truststore_location:
            return None
        return self.truststore_type or _detect_type(self.truststore_location, "ssl.truststore.location")

    def trusted_certificates(self) -> list[x509.Certificate] | None:
        """The trust store's certificates; None when none is set (the system's CAs then)."""
        if self.truststore_certificates is not None:
            return _pem_certificates(self.truststore_certificates.value.encode(), "ssl.truststore.certificates")
        if not self.truststore_location:
            return None
        where = f"ssl.truststore.location {self.truststore_location}"
        data = _read_store(self.truststore_location, "ssl.truststore.location")
        if self.truststore_kind() == "PEM":
            return _pem_certificates(data, where)
        return _pkcs12_certificates(data, self.truststore_password, where)

    def trusted_certificates_pem(self) -> str | None:
        certificates = self.trusted_certificates()
        if certificates is None:
            return None
        return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)

    def key_material(self) -> tuple[object, list[x509.Certificate]] | None:
        """(private key, certificate chain) of the key store, checked; None without one."""
        if self.keystore_key is not None:
            pem = (self.keystore_key.value + "\n" + self.keystore_certificate_chain.value).encode()
            return _pem_keystore(pem, self.key_password, "ssl.keystore.key / ssl.keystore.certificate.chain")
        if not self.keystore_location:
            return None
        where = f"ssl.keystore.location {self.keystore_location}"
        data = _read_store(self.keystore_location, "ssl.keystore.location")
        if self.keystore_kind() == "PEM":
            return _pem_keystore(data, self.key_password, where)
        return _pkcs12_keystore(data, self.keystore_password, self.key_password, where)

    # -- contexts -------------------------------------------------------------------------

    def server_context(self) -> ssl.SSLContext:
        """A listener's context: our certificate chain, and client certificates
        checked against the trust store (the system's CAs without one) as
        ``ssl.client.auth`` says."""
        material = self.key_material()
        if material is None:
            raise ConfigError("a TLS listener needs a certificate: set ssl.keystore.location (PKCS12, or PEM "
                              "with the key and its chain) or ssl.keystore.key and ssl.keystore.certificate.chain")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._apply_protocols(context)
        _load_cert_chain(context, *material)
        context.verify_mode = CLIENT_AUTH[self.client_auth]
        if self.client_auth != "none":
            self._load_trust(context, ssl.Purpose.CLIENT_AUTH)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client's context: the server's certificate checked against the
        trust store (the system's CAs without one), its host name checked
        unless endpoint identification is off, our certificate if we have one."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = self.endpoint_identification_algorithm == "https"
        context.verify_mode = ssl.CERT_REQUIRED
        self._apply_protocols(context)
        self._load_trust(context, ssl.Purpose.SERVER_AUTH)
        material = self.key_material()
        if material is not None:
            _load_cert_chain(context, *material)
        return context

    def _load_trust(self, context: ssl.SSLContext, purpose: ssl.Purpose) -> None:
        pem = self.trusted_certificates_pem()
        if pem is None:
            context.load_default_certs(purpose)
        else:
            context.load_verify_locations(cadata=pem)

    def _apply_protocols(self, context: ssl.SSLContext) -> None:
        low, high = _protocol_range(self.enabled_protocols)
        openssl_names, low, high = _cipher_plan(self.cipher_suites, (low, high))
        context.minimum_version, context.maximum_version = low, high
        if openssl_names:
            context.set_ciphers(":".join(openssl_names))

    def openssl_cipher_list(self) -> str:
        """``ssl.cipher.suites``' TLS 1.2 suites in OpenSSL's names, ':'-joined ("" for the defaults)."""
        names, _, _ = _cipher_plan(self.cipher_suites, _protocol_range(self.enabled_protocols))
        return ":".join(names)

    def principal_mapper(self) -> SslPrincipalMapper:
        return SslPrincipalMapper(self.principal_mapping_rules)

    def describe(self) -> str:
        """For logs: which stores, never a secret."""
        parts = []
        if self.has_keystore:
            parts.append(f"key store {self.keystore_location or '(inline PEM)'}")
        parts.append(f"trust store {self.truststore_location or '(inline PEM)'}" if self.has_truststore
                     else "the system's CAs")
        if self.client_auth != "none":
            parts.append(f"client certificates {self.client_auth}")
        if not self.endpoint_identification_algorithm:
            parts.append("no host name check")
        return "TLS: " + ", ".join(parts)


# -- settings helpers ---------------------------------------------------------------------


def _jks_error(setting: str, path: str | None = None) -> ConfigError:
    source = path or "<store.jks>"
    return ConfigError(
        f"{setting}: {source} is a Java KeyStore (JKS); zkcoord reads PEM and PKCS12 stores. Convert it with "
        f"`keytool -importkeystore -srckeystore {source} -srcstoretype JKS -destkeystore {source}.p12 "
        f"-deststoretype PKCS12` and set the type to PKCS12")


def _store_type_name(value: str, setting: str, location: str | None) -> str:
    name = value.strip().upper()
    if name in ("JKS", "JCEKS"):
        raise _jks_error(setting, location)
    if name not in STORE_TYPES:
        raise ConfigError(f"{setting} is {value!r}; zkcoord reads PEM and PKCS12 stores")
    return name


def _protocol_range(text: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    names = [p.strip() for p in (text or "").split(",") if p.strip()]
    if not names:
        raise ConfigError("ssl.enabled.protocols is empty; use TLSv1.2,TLSv1.3 (Kafka's default) or TLSv1.3")
    unknown = [p for p in names if p.upper() not in PROTOCOLS]
    if unknown:
        raise ConfigError(f"ssl.enabled.protocols names {', '.join(unknown)}; zkcoord offers TLSv1.2 and "
                          f"TLSv1.3 only (older versions are broken)")
    versions = sorted(PROTOCOLS[p.upper()] for p in names)
    return versions[0], versions[-1]


def _cipher_plan(text: str, protocols: tuple[ssl.TLSVersion, ssl.TLSVersion]
                 ) -> tuple[list[str], ssl.TLSVersion, ssl.TLSVersion]:
    """(OpenSSL names of the TLS 1.2 suites, lowest, highest protocol) for
    ``ssl.cipher.suites``. Python cannot narrow TLS 1.3's suites (OpenSSL's three
    are all strong); a list without any suite of a version turns that version off,
    as it does in Java."""
    low, high = protocols
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    if not names:
        return [], low, high
    tls12, tls13 = [], []
    for name in names:
        if name.upper() in TLS13_SUITES:
            tls13.append(name)
        elif name.upper() in TLS12_SUITES:
            tls12.append(TLS12_SUITES[name.upper()])
        elif name.upper() == "TLS_EMPTY_RENEGOTIATION_INFO_SCSV":
            continue  # a signalling value Java lists among its suites
        elif re.fullmatch(r"[A-Z0-9]+(-[A-Z0-9]+)+", name):
            tls12.append(name)  # already OpenSSL's name
        else:
            raise ConfigError(f"ssl.cipher.suites names {name!r}, a suite zkcoord does not know; use Java's "
                              f"names (TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS_AES_256_GCM_SHA384) or OpenSSL's")
    if not tls12:
        low = ssl.TLSVersion.TLSv1_3
    if not tls13:
        high = ssl.TLSVersion.TLSv1_2
    if low > high:
        raise ConfigError("ssl.cipher.suites lists no suite of the protocols in ssl.enabled.protocols")
    if tls12:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise ConfigError(f"ssl.cipher.suites: OpenSSL offers none of {', '.join(tls12)}") from None
    return tls12, low, high


# -- stores -------------------------------------------------------------------------------

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)


def _read_store(path: str, setting: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{setting}: {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{setting}: {path} cannot be read: {exc.strerror or exc}") from None


def _detect_type(path: str, setting: str) -> str:
    head = _read_store(path, setting)[:4096]
    if head[:4] in JKS_MAGIC:
        raise _jks_error(setting, path)
    if b"-----BEGIN " in head:
        return "PEM"
    if head[:1] == b"\x30":  # a DER SEQUENCE: a PKCS12 file
        return "PKCS12"
    raise ConfigError(f"{setting}: {path} is neither PEM text nor a PKCS12 store")


def _pem_certificates(data: bytes, where: str) -> list[x509.Certificate]:
    blocks = [m.group(0) for m in _PEM_BLOCK.finditer(data) if m.group(1) == b"CERTIFICATE"]
    if not blocks:
        raise ConfigError(f"{where}: no certificate (-----BEGIN CERTIFICATE-----) in it")
    try:
        return [x509.load_pem_x509_certificate(b) for b in blocks]
    except ValueError as exc:
        raise ConfigError(f"{where}: a certificate cannot be read: {exc}") from None


def _pem_keystore(data: bytes, key_password: Password | None, where: str) -> tuple[object, list[x509.Certificate]]:
    keys = [m.group(0) for m in _PEM_BLOCK.finditer(data) if m.group(1).endswith(b"PRIVATE KEY")]
    if len(keys) != 1:
        raise ConfigError(f"{where}: expected one private key (-----BEGIN [ENCRYPTED] PRIVATE KEY-----), "
                          f"found {len(keys)}")
    encrypted = keys[0].startswith(b"-----BEGIN ENCRYPTED") or b"Proc-Type: 4,ENCRYPTED" in keys[0]
    if encrypted and key_password is None:
        raise ConfigError(f"{where}: the private key is encrypted; set ssl.key.password")
    password = key_password.value.encode() if (encrypted and key_password is not None) else None
    try:
        key = serialization.load_pem_private_key(keys[0], password)
    except ValueError:
        raise ConfigError(f"{where}: the private key cannot be decrypted with ssl.key.password "
                          f"(wrong password?) or read") from None
    except (TypeError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"{where}: the private key cannot be read: {exc}") from None
    chain = _pem_certificates(data, where)
    _check_pair(key, chain, where)
    return key, chain


def _pkcs12_keystore(data: bytes, password: Password | None, key_password: Password | None,
                     where: str) -> tuple[object, list[x509.Certificate]]:
    if password is None:
        raise ConfigError(f"{where}: a PKCS12 key store needs ssl.keystore.password")
    tried = [password] + ([key_password] if key_password is not None and key_password != password else [])
    for candidate in tried:
        try:
            key, cert, more = pkcs12.load_key_and_certificates(data, candidate.value.encode())
            break
        except (ValueError, UnsupportedAlgorithm):
            continue
    else:
        raise ConfigError(f"{where}: cannot be opened with ssl.keystore.password (a wrong password, not a "
                          f"PKCS12 file, or a key password that differs from the store's, which zkcoord "
                          f"cannot read: re-export the store with one password)")
    if key is None or cert is None:
        raise ConfigError(f"{where}: holds no private key with its certificate; a key store needs one")
    chain = [cert, *more]
    _check_pair(key, chain, where)
    return key, chain


def _pkcs12_certificates(data: bytes, password: Password | None, where: str) -> list[x509.Certificate]:
    try:
        store = pkcs12.load_pkcs12(data, password.value.encode() if password is not None else None)
    except (ValueError, UnsupportedAlgorithm):
        hint = "wrong ssl.truststore.password?" if password is not None else "set ssl.truststore.password"
        raise ConfigError(f"{where}: cannot be opened as a PKCS12 trust store ({hint})") from None
    certificates = ([store.cert.certificate] if store.cert else []) + [c.certificate for c in store.additional_certs]
    if not certificates:
        raise ConfigError(f"{where}: holds no certificate to trust")
    return certificates


def _public_der(key) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _check_pair(key, chain: list[x509.Certificate], where: str, now: dt.datetime | None = None) -> None:
    if _public_der(key.public_key()) != _public_der(chain[0].public_key()):
        raise ConfigError(f"{where}: the private key does not belong to the first certificate "
                          f"({chain[0].subject.rfc4514_string()}); the key's own certificate must come first")
    for problem in validity_problems(chain, now or dt.datetime.now(dt.timezone.utc)):
        log.warning("%s: %s", where, problem)


def validity_problems(chain: list[x509.Certificate], now: dt.datetime) -> list[str]:
    """What is wrong with the dates of ``chain`` at ``now`` (peers will refuse it)."""
    problems = []
    for certificate in chain:
        subject = certificate.subject.rfc4514_string()
        if now < certificate.not_valid_before_utc:
            problems.append(f"certificate {subject} is not valid before "
                            f"{certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
        elif now > certificate.not_valid_after_utc:
            problems.append(f"certificate {subject} expired on {certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    return problems


def _private_dir() -> str:
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix="zkcoord-tls-", dir=base)  # mkdtemp makes it 0700


def _load_cert_chain(context: ssl.SSLContext, key, chain: list[x509.Certificate]) -> None:
    """Python's ssl reads keys from files only: a private temporary one, gone before we return."""
    one_time = secrets.token_hex(24)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.BestAvailableEncryption(one_time.encode()))
    pem += b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
    directory = _private_dir()
    path = os.path.join(directory, "key.pem")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        context.load_cert_chain(path, password=one_time)
    except ssl.SSLError as exc:
        raise ConfigError(f"the TLS library refused the key and certificate chain: {exc.reason or exc}") from None
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.rmdir(directory)
