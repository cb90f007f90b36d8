"""zkcoord.kafka.client_security: Kafka client properties -> kafka-python,
librdkafka and Java client settings (no network here)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import ssl
import stat

import pytest
from kafka.admin.client import KafkaAdminClient
from kafka.consumer.group import KafkaConsumer
from kafka.producer.kafka import KafkaProducer
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.sasl import (SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
                                 SaslHandshakeResponse)

from zkcoord.errors import AuthenticationError, ConfigError
from zkcoord.kafka.client_security import KafkaClientSecurity, format_java_properties, open_kafka_connection
from zkcoord.local import certs
from zkcoord.password import Password
from zkcoord.security.properties import parse_properties
from zkcoord.security.tls import SslSettings
from zkcoord.wire.messages import api_versions_response
from zkcoord.wire.registry import ApiRegistry, ApiSpec
from zkcoord.wire.requests import decode_request
from zkcoord.wire.responses import encode_response, response_for

SECRET = 'p"a\\ss=w:o#rd! é'  # quotes, backslash, separators, a comment mark and non-ASCII
STORE_PW, KEY_PW = "store-pw-31", "key-pw-47"
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="a-pw";'


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return certs.make_local_ca(tmp_path_factory.mktemp("ca"), clients=["alice"],
                               store_password=Password(STORE_PW), key_password=Password(KEY_PW))


def _error(call, *secrets: str) -> str:
    with pytest.raises(ConfigError) as info:
        call()
    for secret in (SECRET, STORE_PW, KEY_PW, "a-pw", *secrets):
        assert secret not in str(info.value)
    return str(info.value)


def test_java_client_properties():
    security = KafkaClientSecurity.from_properties({
        "bootstrap.servers": "b:9093", "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": SCRAM_JAAS, "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM"},
        load_stores=False)
    assert security == KafkaClientSecurity("SASL_SSL", "SCRAM-SHA-512", "alice", Password("a-pw"),
                                           SslSettings(truststore_type="PEM", truststore_location="/ca.pem"))
    assert security.describe() == "SASL_SSL, SCRAM-SHA-512 as alice"
    assert "a-pw" not in repr(security)
    plain = KafkaClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" '
                            'password="b\\"pw";'})
    assert (plain.sasl_username, plain.sasl_password) == ("bob", Password('b"pw'))
    assert KafkaClientSecurity.from_properties({}).describe() == "PLAINTEXT"


def test_librdkafka_names_are_synonyms():
    security = KafkaClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "scram-sha-256", "sasl.username": "carol",
        "sasl.password": "c-pw", "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "none"},
        load_stores=False)
    assert security == KafkaClientSecurity("SASL_SSL", "SCRAM-SHA-256", "carol", Password("c-pw"),
                                           SslSettings(truststore_location="/ca.pem",
                                                       endpoint_identification_algorithm=""))


def test_from_file(tmp_path):
    path = tmp_path / "alice.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={SCRAM_JAAS}\n")
    assert KafkaClientSecurity.from_file(path) == KafkaClientSecurity("SASL_PLAINTEXT", "PLAIN", "alice", "a-pw")
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    assert _error(lambda: KafkaClientSecurity.from_file(bad)).startswith(f"client properties file {bad}: ")


@pytest.mark.parametrize("props, expected", [
    ({"security.protocol": "TLS"}, "security.protocol is 'TLS'; use one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"security.protocol": "SASL_SSL", "sasl.jaas.config": SCRAM_JAAS},
     "security.protocol SASL_SSL needs sasl.mechanism (Kafka's default, GSSAPI, is not offered by zkcoord's "
     "clients); use one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"},
     "sasl.mechanism GSSAPI: zkcoord's clients do not log in with it yet; use one of PLAIN, SCRAM-SHA-256, "
     "SCRAM-SHA-512"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"},
     "sasl.mechanism OAUTHBEARER: zkcoord's clients do not log in with it yet"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "DIGEST-MD5"}, "sasl.mechanism is 'DIGEST-MD5'"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
     "security.protocol SASL_PLAINTEXT with PLAIN needs a user and a password: set sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
     "needs a user and a password"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": SCRAM_JAAS,
      "sasl.username": "u", "sasl.password": SECRET},
     "both sasl.jaas.config and sasl.username/sasl.password are set; keep one"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": 'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;'},
     "sasl.jaas.config uses Krb5LoginModule; zkcoord's clients log in with PlainLoginModule or ScramLoginModule"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required password="j-pw";'},
     "sasl.jaas.config has no username option"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required password="j-pw"'},
     "sasl.jaas.config: the options of org.apache.kafka.common.security.plain.PlainLoginModule do not end with ';'"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem"},
     "ssl.certificate.location, ssl.key.location are librdkafka's"),
    ({"security.protocol": "SSL", "ssl.keystore.type": "JKS", "ssl.keystore.location": "/k.jks"},
     "is a Java KeyStore (JKS)"),
])
def test_errors_name_the_setting_never_the_secret(props, expected):
    text = _error(lambda: KafkaClientSecurity.from_properties(props, "alice.properties"), "j-pw")
    assert text.startswith("alice.properties: ")
    assert expected in text


def test_stores_are_loaded_when_read(ca):
    props = {"security.protocol": "SSL", "ssl.keystore.location": str(ca.clients["alice"].keystore_pkcs12),
             "ssl.keystore.password": "not-the-store-pw", "ssl.truststore.location": str(ca.ca_certificate_pem)}
    text = _error(lambda: KafkaClientSecurity.from_properties(props, "alice.properties"), "not-the-store-pw")
    assert text.startswith(f"alice.properties: ssl.keystore.location {ca.clients['alice'].keystore_pkcs12}: cannot "
                           f"be opened with ssl.keystore.password")
    assert KafkaClientSecurity.from_properties(props, load_stores=False).ssl.keystore_password == Password(
        "not-the-store-pw")
    missing = {"security.protocol": "SSL", "ssl.truststore.location": "/nowhere/ca.pem"}
    assert _error(lambda: KafkaClientSecurity.from_properties(missing, "c")) == (
        "c: ssl.truststore.location: /nowhere/ca.pem does not exist")


def test_sasl_settings_are_dropped_without_a_sasl_protocol(caplog):
    security = KafkaClientSecurity.from_properties({"security.protocol": "SSL", "sasl.mechanism": "PLAIN",
                                                    "sasl.jaas.config": SCRAM_JAAS}, "c")
    assert security == KafkaClientSecurity("SSL")
    assert [r.getMessage() for r in caplog.records] == ["c: SASL settings ignored: security.protocol is SSL"]


def test_kafka_python_options():
    sasl = KafkaClientSecurity("SASL_PLAINTEXT", "PLAIN", "bob", Password(SECRET))
    assert sasl.kafka_python_options() == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                           "sasl_plain_username": "bob", "sasl_plain_password": SECRET}
    assert SECRET not in repr(sasl.kafka_python_options()) and SECRET not in str(sasl.kafka_python_options())
    # SCRAM's saslname escapes ',' and '=' (RFC 5802); kafka-python sends the name as given
    scram = KafkaClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "a,b=c", Password(SECRET))
    assert scram.kafka_python_options()["sasl_plain_username"] == "a=2Cb=3Dc"
    assert KafkaClientSecurity().kafka_python_options() == {"security_protocol": "PLAINTEXT"}


def test_kafka_python_options_with_tls_are_real_client_settings(ca):
    security = KafkaClientSecurity("SASL_SSL", "SCRAM-SHA-512", "alice", Password(SECRET), SslSettings(
        truststore_location=str(ca.truststore_pkcs12), truststore_password=STORE_PW,
        keystore_location=str(ca.clients["alice"].keystore_pkcs12), keystore_password=STORE_PW))
    options = security.kafka_python_options()
    assert set(options) == {"security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
                            "ssl_context", "ssl_check_hostname"}
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert (context.verify_mode, context.check_hostname, options["ssl_check_hostname"]) == (
        ssl.CERT_REQUIRED, True, True)
    for client in (KafkaAdminClient, KafkaConsumer, KafkaProducer):  # every name is one the clients know
        assert set(options) <= set(client.DEFAULT_CONFIG), client.__name__


def test_librdkafka_config(ca):
    alice = ca.clients["alice"]
    pem = KafkaClientSecurity("SASL_SSL", "SCRAM-SHA-512", "alice", Password(SECRET), SslSettings(
        truststore_location=str(ca.ca_certificate_pem), keystore_location=str(alice.keystore_pem),
        key_password=KEY_PW))
    assert pem.librdkafka_config() == {
        "security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
        "sasl.password": SECRET, "ssl.endpoint.identification.algorithm": "https",
        "ssl.ca.location": str(ca.ca_certificate_pem), "ssl.certificate.location": str(alice.keystore_pem),
        "ssl.key.location": str(alice.keystore_pem), "ssl.key.password": KEY_PW}
    for secret in (SECRET, KEY_PW):
        assert secret not in repr(pem.librdkafka_config())
    pkcs12 = KafkaClientSecurity("SSL", ssl=SslSettings(
        truststore_location=str(ca.truststore_pkcs12), truststore_password=STORE_PW,
        keystore_location=str(alice.keystore_pkcs12), keystore_password=STORE_PW,
        endpoint_identification_algorithm="", cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"))
    assert pkcs12.librdkafka_config() == {
        "security.protocol": "ssl", "ssl.endpoint.identification.algorithm": "none",
        "ssl.ca.pem": ca.ca_certificate_pem.read_text(), "ssl.keystore.location": str(alice.keystore_pkcs12),
        "ssl.keystore.password": STORE_PW, "ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256"}
    inline = KafkaClientSecurity("SSL", ssl=SslSettings(keystore_key=alice.key_pem.read_text(),
                                                        keystore_certificate_chain=alice.certificate_pem.read_text(),
                                                        key_password=KEY_PW))
    assert inline.librdkafka_config() == {
        "security.protocol": "ssl", "ssl.endpoint.identification.algorithm": "https",
        "ssl.certificate.pem": alice.certificate_pem.read_text(), "ssl.key.pem": alice.key_pem.read_text(),
        "ssl.key.password": KEY_PW}


def test_java_properties_round_trip(ca):
    alice = ca.clients["alice"]
    cases = [
        KafkaClientSecurity("SASL_SSL", "SCRAM-SHA-512", "alice", Password(SECRET), SslSettings(
            truststore_type="PEM", truststore_location=str(ca.ca_certificate_pem))),
        KafkaClientSecurity("SASL_PLAINTEXT", "PLAIN", 'we"ird\\user', Password(SECRET)),
        KafkaClientSecurity("SSL", ssl=SslSettings(
            truststore_type="PKCS12", truststore_location=str(ca.truststore_pkcs12), truststore_password=STORE_PW,
            keystore_type="PEM", keystore_location=str(alice.keystore_pem), key_password=KEY_PW,
            endpoint_identification_algorithm="")),
        KafkaClientSecurity("PLAINTEXT"),
    ]
    for security in cases:
        props = security.java_properties()
        assert KafkaClientSecurity.from_properties(props) == security
        assert KafkaClientSecurity.from_properties(parse_properties(format_java_properties(props))) == security
    assert cases[0].java_properties() == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
                            'password="p\\"a\\\\ss=w:o#rd! é";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.ca_certificate_pem)}
    assert SECRET not in repr(cases[0].java_properties())


def test_java_properties_name_store_types_java_would_guess_wrong(ca):
    # Java's default store type is JKS: a file of ours must be named PEM or PKCS12
    security = KafkaClientSecurity("SSL", ssl=SslSettings(
        truststore_location=str(ca.ca_certificate_pem),
        keystore_location=str(ca.clients["alice"].keystore_pkcs12), keystore_password=STORE_PW))
    props = security.java_properties()
    assert (props["ssl.truststore.type"], props["ssl.keystore.type"]) == ("PEM", "PKCS12")
    again = KafkaClientSecurity.from_properties(props)
    assert again.java_properties() == props


def test_files_for_clients_are_private(ca, tmp_path):
    security = KafkaClientSecurity("SASL_SSL", "SCRAM-SHA-512", "alice", Password(SECRET), SslSettings(
        truststore_location=str(ca.ca_certificate_pem)))
    java = security.write_java_properties(tmp_path / "alice.properties")
    rdkafka = security.write_librdkafka_config(tmp_path / "alice.librdkafka.conf")
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in (java, rdkafka)} == {0o600}
    assert KafkaClientSecurity.from_file(java).java_properties() == security.java_properties()
    # kcat's -F format: key=value lines, no escapes
    assert dict(line.split("=", 1) for line in rdkafka.read_text().splitlines()) == security.librdkafka_config()
    pkcs12_trust = KafkaClientSecurity("SSL", ssl=SslSettings(truststore_location=str(ca.truststore_pkcs12),
                                                              truststore_password=STORE_PW))
    assert "ssl.ca.pem hold PEM text, which a librdkafka file cannot" in _error(
        lambda: pkcs12_trust.write_librdkafka_config(tmp_path / "x.conf"))


# -- open_kafka_connection's SASL login, against a stand-in ------------------------------------
# Real SASL listeners (the daemon's, the secure sandbox's brokers) are tested
# with them; this stand-in speaks Kafka's SASL exchange with kafka-python's
# generated classes and checks PLAIN and SCRAM as RFC 4616 / RFC 5802 say.

SASL_APIS = ApiRegistry([ApiSpec(ApiVersionsRequest, ApiVersionsResponse, 0, 3),
                         ApiSpec(SaslHandshakeRequest, SaslHandshakeResponse, 0, 1),
                         ApiSpec(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2)])
HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}


class SaslStandIn:
    def __init__(self, *, apis: ApiRegistry = SASL_APIS, mechanisms=("PLAIN", "SCRAM-SHA-256"),
                 users=None, lie: bool = False, close_on_authenticate: bool = False) -> None:
        self.apis, self.mechanisms, self.lie, self.close_on_authenticate = apis, mechanisms, lie, close_on_authenticate
        self.users = users if users is not None else {"alice": SECRET}
        self.seen: list[tuple[int, int]] = []

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader, writer):
        state: dict = {}
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                decoded = decode_request(await reader.readexactly(size), self.apis)
                self.seen.append((decoded.api_key, decoded.api_version))
                if decoded.immediate_response is not None:
                    response = decoded.immediate_response
                elif decoded.api_key == 18:
                    response = api_versions_response(decoded.api_version, self.apis)
                elif decoded.api_key == 17:
                    state["mechanism"] = decoded.request.mechanism
                    known = state["mechanism"] in self.mechanisms
                    response = response_for(decoded, error_code=0 if known else 33, mechanisms=list(self.mechanisms))
                else:
                    if self.close_on_authenticate:
                        return
                    response = response_for(decoded, **self._authenticate(state, bytes(decoded.request.auth_bytes)))
                writer.write(encode_response(decoded, response))
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    def _authenticate(self, state: dict, token: bytes) -> dict:
        failed = dict(error_code=58, error_message="Authentication failed: Invalid username or password",
                      auth_bytes=b"")
        if state["mechanism"] == "PLAIN":
            _, user, password = token.decode().split("\0")
            ok = self.users.get(user) == password
            return dict(auth_bytes=b"", session_lifetime_ms=3_600_000) if ok else failed
        digest = HASHES[state["mechanism"]]
        if "first" not in state:
            bare = token.decode()[3:]
            fields = dict(kv.split("=", 1) for kv in bare.split(","))
            state["user"] = fields["n"].replace("=2C", ",").replace("=3D", "=")
            state["first"] = f"r={fields['r']}server-nonce,s={base64.b64encode(b'salty').decode()},i=4096"
            state["bare"] = bare
            return dict(auth_bytes=state["first"].encode())
        final = token.decode()
        without_proof, proof = final.rsplit(",p=", 1)
        message = f"{state['bare']},{state['first']},{without_proof}".encode()
        salted = hashlib.pbkdf2_hmac(digest().name, self.users.get(state["user"], "").encode(), b"salty", 4096)
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        signature = hmac.new(digest(client_key).digest(), message, digest).digest()
        expected = bytes(a ^ b for a, b in zip(client_key, signature))
        if state["user"] not in self.users or base64.b64decode(proof) != expected:
            return failed
        server_key = hmac.new(salted, b"Server Key", digest).digest()
        verifier = hmac.new(server_key, message + (b"!" if self.lie else b""), digest).digest()
        return dict(auth_bytes=b"v=" + base64.b64encode(verifier))


def _login(stand_in: SaslStandIn, security: KafkaClientSecurity):
    async def scenario():
        async with stand_in:
            connection = await open_kafka_connection("127.0.0.1", stand_in.port, security, timeout_s=10)
            await connection.close()
            return connection

    return asyncio.run(scenario())


@pytest.mark.parametrize("mechanism, user", [("PLAIN", "alice"), ("SCRAM-SHA-256", "alice"),
                                             ("SCRAM-SHA-512", "a,b=c")])
def test_sasl_login(mechanism, user):
    stand_in = SaslStandIn(mechanisms=(mechanism,), users={user: SECRET})
    connection = _login(stand_in, KafkaClientSecurity("SASL_PLAINTEXT", mechanism, user, Password(SECRET)))
    assert connection.user == user
    rounds = 1 if mechanism == "PLAIN" else 2
    assert stand_in.seen == [(18, 3), (17, 1)] + [(36, 2)] * rounds
    assert connection.next_correlation_id == 3 + rounds
    assert connection.session_lifetime_ms == (3_600_000 if mechanism == "PLAIN" else 0)


def test_kip511_fallback_and_older_sasl_authenticate():
    apis = ApiRegistry([ApiSpec(ApiVersionsRequest, ApiVersionsResponse, 0, 2),
                        ApiSpec(SaslHandshakeRequest, SaslHandshakeResponse, 0, 1),
                        ApiSpec(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 0)])
    stand_in = SaslStandIn(apis=apis)
    connection = _login(stand_in, KafkaClientSecurity("SASL_PLAINTEXT", "PLAIN", "alice", Password(SECRET)))
    assert stand_in.seen == [(18, 3), (18, 2), (17, 1), (36, 0)]
    assert connection.api_versions == {18: (0, 2), 17: (0, 1), 36: (0, 0)}


def _refused_login(stand_in: SaslStandIn, security: KafkaClientSecurity) -> str:
    with pytest.raises(AuthenticationError) as info:
        _login(stand_in, security)
    assert SECRET not in str(info.value) and "wrong-pw" not in str(info.value)
    return str(info.value).replace(f"127.0.0.1:{stand_in.port}", "HOST")


@pytest.mark.parametrize("stand_in, security, expected", [
    (SaslStandIn(), KafkaClientSecurity("SASL_PLAINTEXT", "PLAIN", "alice", Password("wrong-pw")),
     "HOST refused the PLAIN login of user 'alice': SaslAuthenticationFailedError: Authentication failed: "
     "Invalid username or password"),
    (SaslStandIn(), KafkaClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", Password("wrong-pw")),
     "HOST refused the SCRAM-SHA-256 login of user 'alice': SaslAuthenticationFailedError: Authentication failed: "
     "Invalid username or password"),
    (SaslStandIn(), KafkaClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "mallory", Password(SECRET)),
     "HOST refused the SCRAM-SHA-256 login of user 'mallory': SaslAuthenticationFailedError"),
    (SaslStandIn(), KafkaClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", Password(SECRET)),
     "HOST refused the SCRAM-SHA-512 login of user 'alice': the server does not enable SCRAM-SHA-512; it offers "
     "PLAIN, SCRAM-SHA-256"),
    (SaslStandIn(lie=True), KafkaClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", Password(SECRET)),
     "HOST refused the SCRAM-SHA-256 login of user 'alice': the server's answer fails the SCRAM-SHA-256 check: "
     "Server sent wrong signature! (it does not hold this user's credentials)"),
    (SaslStandIn(close_on_authenticate=True), KafkaClientSecurity("SASL_PLAINTEXT", "PLAIN", "alice", Password(SECRET)),
     "HOST refused the PLAIN login of user 'alice': it closed the connection during the login (Kafka does this "
     "on a mechanism or state error)"),
    (SaslStandIn(apis=ApiRegistry([ApiSpec(ApiVersionsRequest, ApiVersionsResponse, 0, 3)])),
     KafkaClientSecurity("SASL_PLAINTEXT", "PLAIN", "alice", Password(SECRET)),
     "HOST offers no SaslHandshake v1 / SaslAuthenticate: not a SASL listener (security.protocol is SASL_PLAINTEXT)"),
])
def test_refused_logins(stand_in, security, expected):
    assert _refused_login(stand_in, security).startswith(expected)
