"""A local certificate authority for the secure sandbox and the tests.

Owns making keys and certificates (with ``cryptography``) and writing them in
the formats the three TLS stacks around zkcoord read:

* Python / OpenSSL / librdkafka: PEM certificates, PKCS#8 PEM keys
  (optionally encrypted), PKCS12 key stores;
* Kafka's brokers and Java clients: a PKCS12 key store
  (``ssl.keystore.type=PKCS12``), a "key store PEM", key and certificate
  chain in one file (``ssl.keystore.type=PEM``, the key encrypted with
  ``ssl.key.password``), and trust stores as PEM (``ssl.truststore.type=PEM``)
  or PKCS12.

Choices, each checked against the real software (tests/integration):

* Keys are EC P-256 with ECDSA-SHA256 signatures: Java 17 (SunEC, and
  Kafka's PEM key loader, which tries RSA, DSA, then EC), OpenSSL 3 and
  librdkafka all accept them, and they cost far less than RSA to make.
* PKCS12 files use PBES2 (PBKDF2-HMAC-SHA256, AES-256-CBC) and an
  HMAC-SHA256 MAC: what Java 17's own keytool writes, readable by OpenSSL 3
  without its legacy provider (the old 3DES/RC2 defaults are not).
* Encrypted PEM keys use PKCS#12's pbeWithSHAAnd3-KeyTripleDES-CBC: Java 17
  has no SecretKeyFactory for the PBES2 keys cryptography writes, so Kafka's
  PEM key store could not load them (see :func:`_pem_key`). Java also wants
  such key passwords in ASCII.
* PKCS12 trust stores carry Java's "trusted key usage" attribute
  (``serialize_java_truststore``); without it Java's KeyStore sees no trusted
  certificate entry in the file. PEM trust stores are the simplest choice for
  every stack and the one the sandbox's properties files name.
* Server certificates name every host and IP address clients dial as
  subjectAltNames (Java and Python check the host name by default) and allow
  both server and client authentication: a broker's key store also serves
  its own connections to other brokers.

Every file is written readable by its owner only (0600). No clock is read
here unless the caller leaves ``now`` out.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives import hashes, padding, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers import Cipher, modes
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from zkcoord.errors import ConfigError
from zkcoord.password import Password

__all__ = ["Identity", "ClientFiles", "LocalCa", "new_ca", "new_server_identity", "new_client_identity",
           "write_certificates_pem", "write_key_pem", "write_keystore_pem", "write_keystore_pkcs12",
           "write_truststore_pem", "write_truststore_pkcs12", "make_local_ca", "DEFAULT_HOSTS",
           "CA_VALID_DAYS", "LEAF_VALID_DAYS"]

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
CA_VALID_DAYS = 3650
LEAF_VALID_DAYS = 825  # the longest leaf lifetime browsers and some TLS stacks accept
CLOCK_SKEW = dt.timedelta(hours=1)  # certificates start an hour early: another host's clock may lag
PKCS12_KDF_ROUNDS = 50_000
FILE_MODE = 0o600


@dataclass(frozen=True)
class Identity:
    """A private key, its certificate and the certificates above it (issuer first)."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    chain: tuple[x509.Certificate, ...] = ()

    @property
    def full_chain(self) -> tuple[x509.Certificate, ...]:
        return (self.certificate, *self.chain)

    def __repr__(self) -> str:  # never the key
        return f"Identity({self.certificate.subject.rfc4514_string()})"


def _now(now: dt.datetime | None) -> dt.datetime:
    return now if now is not None else dt.datetime.now(dt.timezone.utc)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _builder(subject: x509.Name, issuer: x509.Name, public_key, now: dt.datetime,
             valid_days: int) -> x509.CertificateBuilder:
    start = now - CLOCK_SKEW
    return (x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + dt.timedelta(days=valid_days))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False))


def new_ca(common_name: str = "zkcoord local CA", *, now: dt.datetime | None = None,
           valid_days: int = CA_VALID_DAYS) -> Identity:
    """A self-signed CA that may sign leaf certificates only (path length 0)."""
    key = _new_key()
    # most significant first in DER, so the text reads CN=...,O=zkcoord (RFC 4514 prints it reversed)
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "zkcoord"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    certificate = (_builder(name, name, key.public_key(), _now(now), valid_days)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                                key_encipherment=False, data_encipherment=False,
                                                key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                encipher_only=False, decipher_only=False), critical=True)
                   .sign(key, hashes.SHA256()))
    return Identity(key, certificate)


def _leaf(ca: Identity, subject: x509.Name, sans: list[x509.GeneralName], now: dt.datetime | None,
          valid_days: int) -> Identity:
    key = _new_key()
    ca_ski = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (_builder(subject, ca.certificate.subject, key.public_key(), _now(now), valid_days)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=True, key_cert_sign=False, crl_sign=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                              critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    certificate = builder.sign(ca.key, hashes.SHA256())
    return Identity(key, certificate, ca.full_chain)


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def new_server_identity(ca: Identity, hosts: Sequence[str] = DEFAULT_HOSTS, *, common_name: str | None = None,
                        now: dt.datetime | None = None, valid_days: int = LEAF_VALID_DAYS) -> Identity:
    """A certificate for a server reached as any of ``hosts`` (names and IP addresses)."""
    if not hosts:
        raise ConfigError("a server certificate needs at least one host name or IP address")
    cn = common_name or hosts[0]
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "zkcoord"),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "servers"),
                         x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    return _leaf(ca, subject, [_san(h) for h in dict.fromkeys(hosts)], now, valid_days)


def new_client_identity(ca: Identity, subject: str | x509.Name, *, now: dt.datetime | None = None,
                        valid_days: int = LEAF_VALID_DAYS) -> Identity:
    """A client certificate whose subject is ``subject``: an x509.Name or its
    RFC 4514 text, e.g. ``CN=alice,OU=clients,O=zkcoord`` (with the default
    ``ssl.principal.mapping.rules`` Kafka's principal is then
    ``User:CN=alice,OU=clients,O=zkcoord``)."""
    if isinstance(subject, x509.Name):
        return _leaf(ca, subject, [], now, valid_days)
    try:
        name = x509.Name.from_rfc4514_string(subject)
    except ValueError as exc:
        raise ConfigError(f"client certificate subject {subject!r} is not an RFC 4514 name "
                          f"({exc or 'cannot be parsed'}); write it like CN=alice,OU=clients,O=zkcoord; "
                          f"escape ',', '+', '=' and quotes in values with a backslash") from None
    return _leaf(ca, name, [], now, valid_days)


# -- files ---------------------------------------------------------------------------------


def _write_private(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path``, readable by the owner only, also when the file existed."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # an existing file keeps its old mode through O_CREAT
        os.write(fd, data)
    finally:
        os.close(fd)
    return path


def _pem_certificates(certificates: Iterable[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def _pem_key(key: ec.EllipticCurvePrivateKey, password: Password | None) -> bytes:
    """PKCS#8 ("BEGIN [ENCRYPTED] PRIVATE KEY"): the only key form Kafka's PEM key store reads."""
    if password is None:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    return _pkcs8_pbe_sha1_3des(key, password)


# Kafka's PEM key store decrypts with SecretKeyFactory.getInstance(EncryptedPrivateKeyInfo.getAlgName()).
# Java 17 names every PBES2 scheme (what cryptography and OpenSSL write by default) "PBES2", for
# which there is no SecretKeyFactory: the load fails. PKCS#12's pbeWithSHAAnd3-KeyTripleDES-CBC
# is the scheme Kafka's own tests encrypt PEM keys with; Java 17, OpenSSL 3 (default provider),
# librdkafka and cryptography all read it. Weaker than PBES2, so PKCS12 stores keep PBES2.
_PBE_SHA1_3DES = bytes.fromhex("060a2a864886f70d010c0103")  # OID 1.2.840.113549.1.12.1.3
PEM_KEY_KDF_ROUNDS = 10_000


def _der(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


def _pkcs12_kdf(password: str, salt: bytes, purpose: int, iterations: int, size: int) -> bytes:
    """RFC 7292 appendix B.2 with SHA-1 (u = 20, v = 64); the password as a NUL-ended BMPString."""
    u, v = 20, 64

    def stretch(data: bytes) -> bytes:  # copies of data up to the next multiple of v bytes
        length = v * -(-len(data) // v)
        return (data * (length // max(len(data), 1) + 1))[:length]

    diversifier = bytes([purpose]) * v
    block = stretch(salt) + stretch(password.encode("utf-16-be") + b"\0\0")
    out = b""
    while len(out) < size:
        digest = hashlib.sha1(diversifier + block).digest()
        for _ in range(iterations - 1):
            digest = hashlib.sha1(digest).digest()
        out += digest
        addend = int.from_bytes((digest * (v // u + 1))[:v], "big") + 1
        block = b"".join(((int.from_bytes(block[j:j + v], "big") + addend) % (1 << (8 * v))).to_bytes(v, "big")
                         for j in range(0, len(block), v))
    return out[:size]


def _pkcs8_pbe_sha1_3des(key: ec.EllipticCurvePrivateKey, password: Password) -> bytes:
    plain = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    salt = secrets.token_bytes(8)
    des_key = _pkcs12_kdf(password.value, salt, 1, PEM_KEY_KDF_ROUNDS, 24)
    iv = _pkcs12_kdf(password.value, salt, 2, PEM_KEY_KDF_ROUNDS, 8)
    padder = padding.PKCS7(64).padder()
    encryptor = Cipher(TripleDES(des_key), modes.CBC(iv)).encryptor()
    sealed = encryptor.update(padder.update(plain) + padder.finalize()) + encryptor.finalize()
    rounds = PEM_KEY_KDF_ROUNDS.to_bytes((PEM_KEY_KDF_ROUNDS.bit_length() + 8) // 8, "big")
    parameters = _der(0x30, _der(0x04, salt) + _der(0x02, rounds))
    der = _der(0x30, _der(0x30, _PBE_SHA1_3DES + parameters) + _der(0x04, sealed))
    body = base64.encodebytes(der).replace(b"\n", b"")
    lines = b"\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n" + lines + b"\n-----END ENCRYPTED PRIVATE KEY-----\n"


def _pkcs12_encryption(password: Password) -> serialization.KeySerializationEncryption:
    return (serialization.PrivateFormat.PKCS12.encryption_builder()
            .kdf_rounds(PKCS12_KDF_ROUNDS)
            .key_cert_algorithm(pkcs12.PBES.PBESv2SHA256AndAES256CBC)
            .hmac_hash(hashes.SHA256())
            .build(password.value.encode("utf-8")))


def write_certificates_pem(path: str | Path, certificates: Iterable[x509.Certificate]) -> Path:
    return _write_private(Path(path), _pem_certificates(certificates))


def write_key_pem(path: str | Path, identity: Identity, password: Password | None = None) -> Path:
    """The key alone, PKCS#8 PEM, encrypted when ``password`` is given."""
    return _write_private(Path(path), _pem_key(identity.key, password))


def write_keystore_pem(path: str | Path, identity: Identity, key_password: Password | None = None) -> Path:
    """Key and certificate chain in one file: Kafka's ``ssl.keystore.type=PEM``
    (with ``ssl.key.password`` when the key is encrypted), and a file
    OpenSSL, Python's ``load_cert_chain`` and librdkafka read as well."""
    return _write_private(Path(path), _pem_key(identity.key, key_password) + _pem_certificates(identity.full_chain))


def write_keystore_pkcs12(path: str | Path, identity: Identity, password: Password, alias: str = "zkcoord") -> Path:
    """A PKCS12 key store (one key entry with its chain) Java and OpenSSL read."""
    data = pkcs12.serialize_key_and_certificates(alias.encode("utf-8"), identity.key, identity.certificate,
                                                 list(identity.chain), _pkcs12_encryption(password))
    return _write_private(Path(path), data)


def write_truststore_pem(path: str | Path, certificates: Iterable[x509.Certificate]) -> Path:
    return write_certificates_pem(path, certificates)


def write_truststore_pkcs12(path: str | Path, certificates: Sequence[x509.Certificate], password: Password) -> Path:
    """A PKCS12 trust store of certificates only, marked trusted for Java."""
    entries = [pkcs12.PKCS12Certificate(c, f"ca{i}".encode()) for i, c in enumerate(certificates)]
    return _write_private(Path(path), pkcs12.serialize_java_truststore(entries, _pkcs12_encryption(password)))


# -- the sandbox's CA ----------------------------------------------------------------------


@dataclass(frozen=True)
class ClientFiles:
    """One client's certificate in every form."""

    name: str
    subject: str
    certificate_pem: Path
    key_pem: Path  # encrypted with LocalCa.key_password
    keystore_pem: Path  # key (encrypted with LocalCa.key_password) + chain
    keystore_pkcs12: Path  # LocalCa.store_password


@dataclass(frozen=True)
class LocalCa:
    """Paths of everything :func:`make_local_ca` wrote, and the passwords of the stores."""

    directory: Path
    ca_certificate_pem: Path  # also the PEM trust store
    ca_key_pem: Path  # unencrypted, 0600: the sandbox's CA signs nothing outside it
    truststore_pkcs12: Path
    server_certificate_pem: Path
    server_key_pem: Path
    server_keystore_pem: Path
    server_keystore_pkcs12: Path
    store_password: Password
    key_password: Password
    hosts: tuple[str, ...]
    clients: Mapping[str, ClientFiles] = field(default_factory=dict)

    @property
    def truststore_pem(self) -> Path:
        return self.ca_certificate_pem


def _client_subjects(clients: Mapping[str, str] | Iterable[str]) -> dict[str, str]:
    if isinstance(clients, Mapping):
        return dict(clients)
    return {name: f"CN={name},OU=clients,O=zkcoord" for name in clients}


def make_local_ca(directory: str | Path, hosts: Sequence[str] = DEFAULT_HOSTS,
                  clients: Mapping[str, str] | Iterable[str] = (), *, store_password: Password | None = None,
                  key_password: Password | None = None, now: dt.datetime | None = None) -> LocalCa:
    """A fresh CA in ``directory`` (made 0700 if new), a server certificate for
    ``hosts`` and a client certificate per entry of ``clients`` (names, or
    names mapped to RFC 4514 subjects; a bare name gets
    ``CN=<name>,OU=clients,O=zkcoord``). Passwords left out are random; they
    are also written to ``store.password`` and ``key.password`` (0600) for
    scripts. Existing files of the same names are replaced."""
    root = Path(directory)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if store_password is None:
        store_password = Password(secrets.token_urlsafe(18))
    if key_password is None:
        key_password = Password(secrets.token_urlsafe(18))
    _write_private(root / "store.password", store_password.value.encode() + b"\n")
    _write_private(root / "key.password", key_password.value.encode() + b"\n")
    ca = new_ca(now=now)
    server = new_server_identity(ca, hosts, now=now)
    files = dict(
        ca_certificate_pem=write_certificates_pem(root / "ca.pem", [ca.certificate]),
        ca_key_pem=write_key_pem(root / "ca-key.pem", ca),
        truststore_pkcs12=write_truststore_pkcs12(root / "truststore.p12", [ca.certificate], store_password),
        server_certificate_pem=write_certificates_pem(root / "server.pem", server.full_chain),
        server_key_pem=write_key_pem(root / "server-key.pem", server, key_password),
        server_keystore_pem=write_keystore_pem(root / "server-keystore.pem", server, key_password),
        server_keystore_pkcs12=write_keystore_pkcs12(root / "server-keystore.p12", server, store_password),
    )
    made = {}
    for name, subject in _client_subjects(clients).items():
        if not name or "/" in name or name.startswith("."):
            raise ConfigError(f"client name {name!r} cannot name a file; use letters, digits, '-' and '_'")
        identity = new_client_identity(ca, subject, now=now)
        made[name] = ClientFiles(
            name, subject,
            certificate_pem=write_certificates_pem(root / f"{name}.pem", identity.full_chain),
            key_pem=write_key_pem(root / f"{name}-key.pem", identity, key_password),
            keystore_pem=write_keystore_pem(root / f"{name}-keystore.pem", identity, key_password),
            keystore_pkcs12=write_keystore_pkcs12(root / f"{name}-keystore.p12", identity, store_password))
    return LocalCa(directory=root, store_password=store_password, key_password=key_password,
                   hosts=tuple(hosts), clients=made, **files)
