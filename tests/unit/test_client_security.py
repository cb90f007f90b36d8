"""zkcoord.kafka.client_security: Kafka client properties -> kafka-python,
librdkafka and Java client settings (no network here)."""

from __future__ import annotations

import os
import ssl
import stat

import pytest
from kafka.admin.client import KafkaAdminClient
from kafka.consumer.group import KafkaConsumer
from kafka.producer.kafka import KafkaProducer

from zkcoord.errors import ConfigError
from zkcoord.kafka.client_security import KafkaClientSecurity, format_java_properties
from zkcoord.local import certs
from zkcoord.security.properties import parse_properties
from zkcoord.security.secrets import Password
from zkcoord.security.tls import SslSettings

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
        "sasl.jaas.config": SCRAM_JAAS, "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM"})
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
        "sasl.password": "c-pw", "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "none"})
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
