"""``zkcoord burrow-config --command-config``: the Kafka login written as
Burrow 1.2.1 reads it (core/internal/helpers/sarama.go: a client profile's
``tls`` and ``sasl`` profiles), what it cannot do refused with the setting
named, and the SASL password out of the file unless asked for."""

from __future__ import annotations

import os
import tomllib

import pytest
from click.testing import CliRunner

from zkcoord.cli.main import cli
from zkcoord.local.certs import make_local_ca, write_keystore_pem

SECRET = "burrow-Pw-5Tz"
BASE = ["burrow-config", "--zookeeper", "zk:2181", "--bootstrap-servers", "k1:9093"]


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return make_local_ca(tmp_path_factory.mktemp("ca"), clients=["burrow"])


def run(tmp_path, text: str, *args: str):
    path = tmp_path / "burrow.properties"
    path.write_text(text)
    return CliRunner().invoke(cli, [*BASE, "--command-config", str(path), *args])


def plain_user(protocol: str = "SASL_PLAINTEXT") -> str:
    return (f"security.protocol={protocol}\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security."
            f'plain.PlainLoginModule required username="burrow" password="{SECRET}";\n')


def test_sasl_plain_without_the_password_in_the_file(tmp_path):
    result = run(tmp_path, plain_user())
    assert result.exit_code == 0, result.output
    assert SECRET not in result.stdout
    config = tomllib.loads(result.stdout)
    assert config["client-profile"]["zkcoord"] == {"client-id": "burrow-local", "kafka-version": "2.1.0",
                                                   "sasl": "zkcoord"}
    assert config["sasl"] == {"zkcoord": {"username": "burrow", "handshake-first": True}}
    assert "tls" not in config
    assert result.stderr == ("note: the SASL password is not in the configuration: set BURROW_SASL_ZKCOORD_PASSWORD "
                             "where Burrow runs (or pass --include-password)\n")
    assert "# SASL/PLAIN to the brokers. Without a password here, Burrow reads it from the environment variable " \
           "BURROW_SASL_ZKCOORD_PASSWORD.\n[sasl.zkcoord]" in result.stdout


def test_sasl_ssl_with_pem_files_and_the_password_in_a_private_file(tmp_path, ca):
    keystore = write_keystore_pem(tmp_path / "burrow-keystore.pem", _identity(ca))
    text = plain_user("SASL_SSL") + f"ssl.truststore.location={ca.ca_certificate_pem}\n" \
                                    f"ssl.keystore.location={keystore}\n"
    out = tmp_path / "burrow.toml"
    result = run(tmp_path, text, "--include-password", "--output", str(out))
    assert result.exit_code == 0, result.output
    assert os.stat(out).st_mode & 0o777 == 0o600
    config = tomllib.loads(out.read_text())
    assert config["client-profile"]["zkcoord"]["tls"] == "zkcoord"
    assert config["tls"] == {"zkcoord": {"cafile": str(ca.ca_certificate_pem), "certfile": str(keystore),
                                         "keyfile": str(keystore), "noverify": False}}
    assert config["sasl"] == {"zkcoord": {"username": "burrow", "password": SECRET, "handshake-first": True}}
    assert SECRET not in result.output


def test_ssl_with_the_systems_cas(tmp_path):
    result = run(tmp_path, "security.protocol=SSL\n")
    assert result.exit_code == 0 and result.stderr == ""
    config = tomllib.loads(result.stdout)
    assert config["tls"] == {"zkcoord": {"noverify": False}} and "sasl" not in config
    assert tomllib.loads(run(tmp_path, "security.protocol=PLAINTEXT\n").stdout)["client-profile"]["zkcoord"] == {
        "client-id": "burrow-local", "kafka-version": "2.1.0"}


@pytest.mark.parametrize("text, args, expected", [
    ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=burrow\nsasl.password=" + SECRET +
     "\n", (), "Burrow 1.2 logs in with SASL/PLAIN only (its sasl profile has no mechanism; SCRAM came with Burrow "
               "1.3.4), not SCRAM-SHA-512"),
    ("security.protocol=SSL\nssl.truststore.location={ca}\n", (),
     "Burrow 1.2 uses a CA file only together with a client certificate and key"),
    ("security.protocol=SSL\nssl.truststore.location={p12}\nssl.truststore.password={store}\n"
     "ssl.keystore.location={keystore}\nssl.key.password={key}\n", (), "is PKCS12; Burrow 1.2 reads PEM files only"),
    ("security.protocol=SSL\nssl.truststore.location={ca}\nssl.keystore.location={keystore}\n"
     "ssl.key.password={key}\n", (), "is encrypted (ssl.key.password); Burrow 1.2 has no key password"),
    ("security.protocol=SSL\n", ("--include-password",), "--include-password: --command-config (SSL) has no SASL"),
])
def test_what_burrow_cannot_do_is_refused(tmp_path, ca, text, args, expected):
    values = {"ca": ca.ca_certificate_pem, "p12": ca.truststore_pkcs12, "store": ca.store_password.value,
              "keystore": ca.clients["burrow"].keystore_pem, "key": ca.key_password.value}
    result = run(tmp_path, text.format(**values), *args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and expected in result.output and len(result.output.splitlines()) == 1
    for secret in (SECRET, ca.store_password.value, ca.key_password.value):
        assert secret not in result.output


def _identity(ca):
    """The burrow client's identity with its key decrypted (Burrow reads unencrypted keys only)."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from cryptography.x509 import load_pem_x509_certificates

    from zkcoord.local.certs import Identity

    files = ca.clients["burrow"]
    key = load_pem_private_key(files.key_pem.read_bytes(), ca.key_password.value.encode())
    certificate, *chain = load_pem_x509_certificates(files.certificate_pem.read_bytes())
    return Identity(key, certificate, tuple(chain))
