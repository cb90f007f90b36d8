"""zkcoord.security.tls (SslSettings -> SSLContext, PEM and PKCS12 stores),
zkcoord.security.ssl_principal (Java's subject text, Kafka's mapping rules)
and the local CA of zkcoord.local.certs."""

from __future__ import annotations

import base64
import datetime as dt
import logging
import os
import ssl
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID, ObjectIdentifier

from zkcoord.errors import AuthenticationError, ConfigError
from zkcoord.local import certs
from zkcoord.password import Password
from zkcoord.security.ssl_principal import SslPrincipalMapper, java_x500_name, peer_principal
from zkcoord.security.tls import IGNORED_SSL_PROPERTIES, SSL_PROPERTIES, SslSettings, validity_problems

STORE_PW, KEY_PW = "st0re-pässword", "k3y\"pass=word"


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return certs.make_local_ca(tmp_path_factory.mktemp("ca"), clients=["alice"],
                               store_password=Password(STORE_PW), key_password=Password(KEY_PW))


def _error(call) -> str:
    with pytest.raises(ConfigError) as info:
        call()
    text = str(info.value)
    assert STORE_PW not in text and KEY_PW not in text
    return text


# -- the local CA ----------------------------------------------------------------------------


def test_local_ca_files_are_private_and_read_back(ca):
    paths = [ca.ca_certificate_pem, ca.ca_key_pem, ca.truststore_pkcs12, ca.server_certificate_pem,
             ca.server_key_pem, ca.server_keystore_pem, ca.server_keystore_pkcs12, ca.directory / "store.password",
             *(getattr(ca.clients["alice"], f) for f in ("certificate_pem", "key_pem", "keystore_pem",
                                                         "keystore_pkcs12"))]
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in paths} == {0o600}
    assert stat.S_IMODE(os.stat(ca.directory).st_mode) == 0o700
    assert (ca.directory / "store.password").read_text() == STORE_PW + "\n"
    server = x509.load_pem_x509_certificates(ca.server_certificate_pem.read_bytes())
    authority = x509.load_pem_x509_certificate(ca.ca_certificate_pem.read_bytes())
    assert [c.subject for c in server] == [server[0].subject, authority.subject]
    sans = server[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(a) for a in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    server[0].verify_directly_issued_by(authority)
    alice = x509.load_pem_x509_certificate(ca.clients["alice"].certificate_pem.read_bytes())
    assert alice.subject.rfc4514_string() == "CN=alice,OU=clients,O=zkcoord"
    assert b"ENCRYPTED PRIVATE KEY" in ca.clients["alice"].keystore_pem.read_bytes()
    assert "[hidden]" in repr(ca) and STORE_PW not in repr(ca) and KEY_PW not in repr(ca)


def test_pkcs12_files_read_back(ca):
    from cryptography.hazmat.primitives.serialization import pkcs12
    keystore = pkcs12.load_pkcs12(ca.server_keystore_pkcs12.read_bytes(), STORE_PW.encode())
    assert keystore.key is not None and keystore.cert.friendly_name == b"zkcoord"
    truststore = pkcs12.load_pkcs12(ca.truststore_pkcs12.read_bytes(), STORE_PW.encode())
    assert truststore.key is None and len(truststore.additional_certs) == 1
    # Java's view of both (a PrivateKeyEntry, a trustedCertEntry): tests/integration/test_client_security_connection.py


def test_encrypted_pem_keys_are_ones_java_17_and_openssl_read(ca):
    der = base64.b64decode(b"".join(ca.server_key_pem.read_bytes().splitlines()[1:-1]))
    assert bytes.fromhex("060a2a864886f70d010c0103") in der[:24]  # pbeWithSHAAnd3-KeyTripleDES-CBC, not PBES2
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(ca.server_certificate_pem, ca.server_key_pem, password=KEY_PW)  # OpenSSL's own decryption
    with pytest.raises(ssl.SSLError):
        context.load_cert_chain(ca.server_certificate_pem, ca.server_key_pem, password="not-it")
    key = serialization.load_pem_private_key(ca.clients["alice"].key_pem.read_bytes(), KEY_PW.encode())
    alice = x509.load_pem_x509_certificate(ca.clients["alice"].certificate_pem.read_bytes())
    assert key.public_key() == alice.public_key()


def test_client_subject_that_is_not_rfc4514_is_a_config_error(ca):
    authority = certs.new_ca()
    text = _error(lambda: certs.new_client_identity(authority, "alice"))
    assert "'alice' is not an RFC 4514 name" in text


# -- settings ---------------------------------------------------------------------------------


def test_settings_normalise_and_hide_secrets():
    settings = SslSettings(keystore_type="pkcs12", keystore_location="/x.p12", keystore_password="pw-1",
                           truststore_type="pem", truststore_location="/ca.pem", client_auth="REQUIRED",
                           endpoint_identification_algorithm="HTTPS")
    assert (settings.keystore_type, settings.truststore_type, settings.client_auth) == ("PKCS12", "PEM", "required")
    assert settings.endpoint_identification_algorithm == "https"
    assert settings.keystore_password == Password("pw-1")
    assert "pw-1" not in repr(settings) and "pw-1" not in str(settings.to_properties())


def test_from_properties_reads_kafka_names_and_warns_about_ignored_ones(caplog):
    props = {"ssl.keystore.location": "/k.p12", "ssl.keystore.type": "PKCS12", "ssl.keystore.password": "pw-2",
             "ssl.truststore.location": "/ca.pem", "ssl.client.auth": "requested",
             "ssl.endpoint.identification.algorithm": "", "ssl.enabled.protocols": "TLSv1.3",
             "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/,DEFAULT",
             "ssl.protocol": "TLSv1.3", "ssl.keymanager.algorithm": "SunX509", "bootstrap.servers": "b:9092",
             "ssl.no.such.thing": "x"}
    with caplog.at_level(logging.WARNING, "zkcoord.security.tls"):
        settings = SslSettings.from_properties(props, "client.properties")
    assert settings == SslSettings(keystore_type="PKCS12", keystore_location="/k.p12", keystore_password="pw-2",
                                   truststore_location="/ca.pem", client_auth="requested",
                                   endpoint_identification_algorithm="", enabled_protocols="TLSv1.3",
                                   principal_mapping_rules="RULE:^CN=(.*?),.*$/$1/,DEFAULT")
    assert [r.getMessage() for r in caplog.records] == [
        "client.properties: ssl.keymanager.algorithm, ssl.protocol: Kafka settings zkcoord does not use; ignored"]
    revealed = {k: (v.value if isinstance(v, Password) else v) for k, v in settings.to_properties().items()}
    assert SslSettings.from_properties(revealed) == settings
    assert set(SSL_PROPERTIES.values()) == {f for f in SslSettings.__dataclass_fields__}
    assert not set(IGNORED_SSL_PROPERTIES) & set(SSL_PROPERTIES)


@pytest.mark.parametrize("kwargs, expected", [
    (dict(client_auth="maybe"), "ssl.client.auth is 'maybe'; use none, requested or required"),
    (dict(endpoint_identification_algorithm="ldaps"), "ssl.endpoint.identification.algorithm is 'ldaps'"),
    (dict(enabled_protocols="TLSv1.1,TLSv1.2"), "ssl.enabled.protocols names TLSv1.1; zkcoord offers TLSv1.2"),
    (dict(enabled_protocols=" "), "ssl.enabled.protocols is empty"),
    (dict(cipher_suites="TLS_NOT_A_SUITE"), "ssl.cipher.suites names 'TLS_NOT_A_SUITE'"),
    (dict(enabled_protocols="TLSv1.2", cipher_suites="TLS_AES_128_GCM_SHA256"),
     "ssl.cipher.suites lists no suite of the protocols in ssl.enabled.protocols"),
    (dict(keystore_type="BCFKS"), "ssl.keystore.type is 'BCFKS'; zkcoord reads PEM and PKCS12 stores"),
    (dict(keystore_type="JKS", keystore_location="/etc/k.jks"),
     "ssl.keystore.type: /etc/k.jks is a Java KeyStore (JKS); zkcoord reads PEM and PKCS12 stores. Convert it "
     "with `keytool -importkeystore -srckeystore /etc/k.jks -srcstoretype JKS -destkeystore /etc/k.jks.p12 "
     "-deststoretype PKCS12` and set the type to PKCS12"),
    (dict(keystore_key="-----BEGIN PRIVATE KEY-----"), "ssl.keystore.key and ssl.keystore.certificate.chain go "
                                                       "together"),
    (dict(keystore_key="k", keystore_certificate_chain="c", keystore_location="/k.pem"),
     "both ssl.keystore.location and ssl.keystore.key are set"),
    (dict(keystore_type="PEM", keystore_location="/k.pem", keystore_password="pw"),
     "ssl.keystore.password is not used with a PEM key store; put the password of an encrypted key in "
     "ssl.key.password"),
    (dict(keystore_password="pw"), "ssl.keystore.password is set but there is no key store"),
    (dict(truststore_certificates="c", truststore_location="/ca.pem"),
     "both ssl.truststore.location and ssl.truststore.certificates are set"),
    (dict(truststore_type="PEM", truststore_password="pw"), "ssl.truststore.password is not used with a PEM"),
    (dict(principal_mapping_rules="RULE:^CN=(.*$/$1/"), "ssl.principal.mapping.rules: the pattern of "
                                                        "RULE:^CN=(.*$/... cannot be compiled"),
])
def test_invalid_settings_name_the_setting(kwargs, expected):
    assert expected in _error(lambda: SslSettings(**kwargs))


def test_from_properties_errors_name_where():
    assert _error(lambda: SslSettings.from_properties({"ssl.client.auth": "x"}, "daemon.toml")).startswith(
        "daemon.toml: ssl.client.auth is 'x'")


def test_cipher_suites_map_java_names_and_limit_protocols():
    twelve = SslSettings(cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_EMPTY_RENEGOTIATION_INFO_SCSV")
    assert twelve.openssl_cipher_list() == "ECDHE-ECDSA-AES256-GCM-SHA384"
    context = twelve.client_context()
    assert (context.minimum_version, context.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2)
    assert [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-ECDSA-AES256-GCM-SHA384"]
    thirteen = SslSettings(cipher_suites="TLS_AES_256_GCM_SHA384").client_context()
    assert thirteen.minimum_version == ssl.TLSVersion.TLSv1_3
    plain = SslSettings().client_context()
    assert (plain.minimum_version, plain.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)


# -- stores and contexts -------------------------------------------------------------------------


def _no_temp_files() -> set[str]:
    base = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    return {n for n in os.listdir(base) if n.startswith("zkcoord-tls-")}


def test_server_context_from_each_kind_of_key_store(ca):
    before = _no_temp_files()
    alice = ca.clients["alice"]
    chain_pem = ca.server_certificate_pem.read_text()
    key_pem = ca.server_key_pem.read_text()
    kinds = [
        (SslSettings(keystore_location=str(ca.server_keystore_pkcs12), keystore_password=STORE_PW), "PKCS12"),
        (SslSettings(keystore_location=str(ca.server_keystore_pem), key_password=KEY_PW), "PEM"),
        (SslSettings(keystore_key=key_pem, keystore_certificate_chain=chain_pem, key_password=KEY_PW), "PEM"),
        (SslSettings(keystore_location=str(alice.keystore_pkcs12), keystore_password=STORE_PW,
                     keystore_type="PKCS12"), "PKCS12"),
    ]
    for settings, kind in kinds:
        assert settings.keystore_kind() == kind
        context = settings.server_context()
        assert context.verify_mode == ssl.CERT_NONE
        assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert _no_temp_files() == before


def test_client_auth_and_trust_stores(ca):
    for truststore in (dict(truststore_location=str(ca.ca_certificate_pem)),
                       dict(truststore_location=str(ca.truststore_pkcs12), truststore_password=STORE_PW),
                       dict(truststore_certificates=ca.ca_certificate_pem.read_text())):
        settings = SslSettings(keystore_location=str(ca.server_keystore_pkcs12), keystore_password=STORE_PW,
                               client_auth="required", **truststore)
        context = settings.server_context()
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert [c["subject"] for c in context.get_ca_certs()] == [
            ((("organizationName", "zkcoord"),), (("commonName", "zkcoord local CA"),))]
        assert len(settings.trusted_certificates()) == 1
    requested = SslSettings(keystore_location=str(ca.server_keystore_pkcs12), keystore_password=STORE_PW,
                            truststore_location=str(ca.ca_certificate_pem), client_auth="requested")
    assert requested.server_context().verify_mode == ssl.CERT_OPTIONAL


def test_client_context(ca):
    context = SslSettings(truststore_location=str(ca.ca_certificate_pem)).client_context()
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)
    no_check = SslSettings(truststore_location=str(ca.ca_certificate_pem), endpoint_identification_algorithm="")
    assert no_check.client_context().check_hostname is False
    system = SslSettings().client_context()  # no trust store: the system's CAs, as Java uses its cacerts
    assert system.verify_mode == ssl.CERT_REQUIRED


def test_store_errors_name_setting_and_file_never_the_password(ca, tmp_path):
    wrong = SslSettings(keystore_location=str(ca.server_keystore_pkcs12), keystore_password="not-it")
    assert _error(wrong.server_context).startswith(
        f"ssl.keystore.location {ca.server_keystore_pkcs12}: cannot be opened with ssl.keystore.password")
    wrong_key = SslSettings(keystore_location=str(ca.server_keystore_pem), key_password="not-it")
    assert _error(wrong_key.server_context) == (
        f"ssl.keystore.location {ca.server_keystore_pem}: the private key cannot be decrypted with "
        f"ssl.key.password (wrong password?) or read")
    no_password = SslSettings(keystore_location=str(ca.server_keystore_pem))
    assert "the private key is encrypted; set ssl.key.password" in _error(no_password.server_context)
    missing = SslSettings(keystore_location=str(tmp_path / "nope.p12"), keystore_password=STORE_PW)
    assert _error(missing.server_context) == f"ssl.keystore.location: {tmp_path / 'nope.p12'} does not exist"
    directory = SslSettings(keystore_location=str(tmp_path), keystore_password=STORE_PW, keystore_type="PKCS12")
    assert f"ssl.keystore.location: {tmp_path} cannot be read: Is a directory" == _error(directory.server_context)
    trust_only = SslSettings(keystore_location=str(ca.truststore_pkcs12), keystore_password=STORE_PW)
    assert "holds no private key with its certificate" in _error(trust_only.server_context)
    no_key = SslSettings(keystore_location=str(ca.ca_certificate_pem))
    assert "expected one private key (-----BEGIN [ENCRYPTED] PRIVATE KEY-----), found 0" in _error(
        no_key.server_context)
    assert "a TLS listener needs a certificate" in _error(SslSettings().server_context)
    trust_no_password = SslSettings(truststore_location=str(ca.truststore_pkcs12))
    assert "cannot be opened as a PKCS12 trust store (set ssl.truststore.password)" in _error(
        trust_no_password.client_context)


def test_a_key_that_is_not_the_certificates_is_refused(ca, tmp_path):
    mixed = tmp_path / "mixed.pem"
    mixed.write_bytes(ca.clients["alice"].key_pem.read_bytes() + ca.server_certificate_pem.read_bytes())
    settings = SslSettings(keystore_location=str(mixed), key_password=KEY_PW)
    assert _error(settings.server_context) == (
        f"ssl.keystore.location {mixed}: the private key does not belong to the first certificate "
        f"(CN=localhost,OU=servers,O=zkcoord); the key's own certificate must come first")


def test_jks_files_are_recognised(tmp_path):
    jks = tmp_path / "broker.keystore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02rest")
    settings = SslSettings(keystore_location=str(jks), keystore_password="pw")
    assert "is a Java KeyStore (JKS)" in _error(settings.server_context)
    assert f"-srckeystore {jks} -srcstoretype JKS" in _error(settings.server_context)


def test_expired_and_future_certificates_are_warned_about(tmp_path, caplog):
    authority = certs.new_ca()
    past = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
    old = certs.new_server_identity(authority, ["localhost"], now=past, valid_days=30)
    assert validity_problems([old.certificate], past + dt.timedelta(days=40)) == [
        "certificate CN=localhost,OU=servers,O=zkcoord expired on 2020-01-30 23:00 UTC"]
    assert validity_problems([old.certificate], past - dt.timedelta(days=1)) == [
        "certificate CN=localhost,OU=servers,O=zkcoord is not valid before 2019-12-31 23:00 UTC"]
    assert validity_problems([old.certificate], past) == []
    path = certs.write_keystore_pem(tmp_path / "old.pem", old)
    with caplog.at_level(logging.WARNING, "zkcoord.security.tls"):
        SslSettings(keystore_location=str(path)).server_context()
    assert [r.getMessage() for r in caplog.records] == [
        f"ssl.keystore.location {path}: certificate CN=localhost,OU=servers,O=zkcoord expired on 2020-01-30 "
        f"23:00 UTC"]


# -- principals: Kafka's SslPrincipalMapperTest, ported -------------------------------------------


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules):
    SslPrincipalMapper(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules):
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules: .* is not a rule"):
        SslPrincipalMapper(rules)


def test_ssl_principal_mapper():
    mapper = SslPrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize("expected, rules", [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    # empty rules are ignored
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    # escape sequences
    (r"[RULE:\/\\\(\)\n\t/\/\/]", r"RULE:\/\\\(\)\n\t/\/\//"),
    (r"[RULE:\**\/+/*/L, RULE:\/*\**/**]", r"RULE:\**\/+/*/L,RULE:\/*\**/**/"),
    # rules rule
    (r"[RULE:,RULE:,/,RULE:,\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_rules_splitting(expected, rules):
    assert repr(SslPrincipalMapper(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_comma_with_whitespace():
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_java_replacement_rules():
    # $3 with two groups is a literal "$3" (Kafka's escapeLiteralBackReferences); $12 with two groups is $1 then "2"
    assert SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?)$/$1-$3-$12/").name("CN=a,OU=b") == "a-$3-a2"
    assert SslPrincipalMapper(r"RULE:^CN=(?<user>[^,]*),.*$/${user}\$/").name("CN=bob,O=x") == "bob$"
    assert SslPrincipalMapper("RULE:^CN=([^,]*),.*$/x/,DEFAULT").name("O=x") == "O=x"


def test_no_matching_rule_is_an_authentication_error():
    with pytest.raises(AuthenticationError) as info:
        SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").name("CN=eve,OU=Other")
    assert str(info.value) == ("no rule of ssl.principal.mapping.rules applies to 'CN=eve,OU=Other' (rules "
                               "[RULE:^CN=(.*?),OU=ServiceUsers.*$/$1]); add one, or DEFAULT at the end")


# -- principals: Java's subject text --------------------------------------------------------------

A = x509.NameAttribute
R = x509.RelativeDistinguishedName

# Each expected text is what Java 17's X500Principal.getName() printed for a
# certificate with this subject (checked with a 6-line java program; the
# integration tests repeat the check for the client certificates they use).
JAVA_NAMES = [
    (x509.Name([A(NameOID.COUNTRY_NAME, "US"), A(NameOID.ORGANIZATION_NAME, "zkcoord"),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "clients"), A(NameOID.COMMON_NAME, "alice")]),
     "CN=alice,OU=clients,O=zkcoord,C=US"),
    (x509.Name([A(NameOID.COMMON_NAME, "Tkac, Adam"), A(NameOID.ORGANIZATIONAL_UNIT_NAME, 'a=b+c;d<e>f"g\\h'),
                A(NameOID.ORGANIZATION_NAME, "#lead mid#dle"), A(NameOID.LOCALITY_NAME, " lead and trail ")]),
     r"L=\ lead and trail\ ,O=\#lead mid\#dle,OU=a\=b\+c\;d\<e\>f\"g\\h,CN=Tkac\, Adam"),
    (x509.Name([R([A(NameOID.COMMON_NAME, "multi"), A(NameOID.USER_ID, "u1")])] + [R([a]) for a in [
        A(NameOID.DOMAIN_COMPONENT, "example"), A(NameOID.EMAIL_ADDRESS, "a@b.c"), A(NameOID.SERIAL_NUMBER, "123"),
        A(NameOID.TITLE, "boss"), A(NameOID.STREET_ADDRESS, "Main St"), A(NameOID.STATE_OR_PROVINCE_NAME, "MD")]]),
     "ST=MD,STREET=Main St,2.5.4.12=#0c04626f7373,2.5.4.5=#1303313233,1.2.840.113549.1.9.1=#16056140622e63,"
     "DC=example,CN=multi+UID=u1"),
    (x509.Name([A(NameOID.COMMON_NAME, "Ünïcødé 名前"),
                A(NameOID.ORGANIZATION_NAME, "bmp é", _type=_ASN1Type.BMPString),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "printable", _type=_ASN1Type.PrintableString),
                A(NameOID.GIVEN_NAME, "x\x00y"), A(ObjectIdentifier("1.2.3.4.5"), "custom")]),
     # Java reads a BMPString's bytes as UTF-8 here: NULs escaped, the lone 0xE9 a replacement character
     "1.2.3.4.5=#0c06637573746f6d,2.5.4.42=#0c03780079,OU=printable,O=\\00b\\00m\\00p\\00 \\00\ufffd,"
     "CN=Ünïcødé 名前"),
    (x509.Name([A(NameOID.COMMON_NAME, "  "), A(NameOID.ORGANIZATION_NAME, "a\rb"),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "t61", _type=_ASN1Type.T61String),
                A(NameOID.PSEUDONYM, "univ", _type=_ASN1Type.UniversalString)]),
     "2.5.4.65=#1c10000000750000006e0000006900000076,OU=t61,O=a\rb,CN=\\ \\ "),
    (x509.Name([R([A(NameOID.ORGANIZATIONAL_UNIT_NAME, "z"), A(NameOID.COMMON_NAME, "b"),
                   A(NameOID.COMMON_NAME, "a")])]),
     "CN=a+CN=b+OU=z"),
]


@pytest.mark.parametrize("name, expected", JAVA_NAMES, ids=range(len(JAVA_NAMES)))
def test_subject_text_is_javas(name, expected):
    authority = certs.new_ca()
    certificate = certs.new_client_identity(authority, name).certificate
    assert java_x500_name(certificate.subject.public_bytes()) == expected
    der = certificate.public_bytes(serialization.Encoding.DER)
    assert peer_principal(der, SslPrincipalMapper("DEFAULT")) == "User:" + expected


def test_peer_principal():
    authority = certs.new_ca()
    alice = certs.new_client_identity(authority, "CN=alice,OU=clients,O=zkcoord").certificate
    der = alice.public_bytes(serialization.Encoding.DER)
    assert peer_principal(None, SslPrincipalMapper()) == "User:ANONYMOUS"
    assert peer_principal(b"", SslPrincipalMapper()) == "User:ANONYMOUS"
    assert peer_principal(der, SslPrincipalMapper()) == "User:CN=alice,OU=clients,O=zkcoord"
    rules = SslSettings(principal_mapping_rules="RULE:^CN=([^,]*),OU=clients,.*$/$1/L,DEFAULT").principal_mapper()
    assert peer_principal(der, rules) == "User:alice"
