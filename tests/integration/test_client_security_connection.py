"""open_kafka_connection against real servers, and the local CA's files read
by the real TLS stacks (Java with Kafka's own store loaders, librdkafka).

* PLAINTEXT: the sandbox's Kafka 3.9 broker answers ApiVersions and Metadata
  over the connection; a SASL login against its plaintext listener is
  refused by Kafka itself (ILLEGAL_SASL_STATE).
* TLS: a TLS proxy of our own (``SslSettings.server_context()``, certificates
  of ``zkcoord.local.certs``) in front of that broker, so a real Kafka answers
  over TLS; client certificates required, requested and not asked for;
  untrusted CAs, host name mismatches and missing client certificates fail
  with AuthenticationError.
* Java: Kafka's DefaultSslEngineFactory loads the PEM and PKCS12 stores the
  local CA wrote (an encrypted PKCS#8 key in a PEM key store, a PKCS12 trust
  store) from ``java_properties()`` and completes a handshake with the proxy,
  host name checked; the principal our side derives is "User:" + what Java
  prints for its own certificate.
* librdkafka: confluent-kafka reads ``librdkafka_config()`` (PEM and PKCS12
  key stores) and lists topics through the proxy.

SASL logins against real SASL listeners are tested with the daemon's SASL
listener and the secure sandbox.
"""

from __future__ import annotations

import asyncio
import subprocess
import textwrap

import pytest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from zkcoord.errors import AuthenticationError, MissingToolError, ServiceUnavailableError
from zkcoord.kafka.client_security import KafkaClientSecurity, open_kafka_connection
from zkcoord.local import certs, jars
from zkcoord.password import Password
from zkcoord.security.ssl_principal import peer_principal
from zkcoord.security.tls import SslSettings

pytestmark = pytest.mark.integration

STORE_PW, KEY_PW, SASL_PW = "store-pw-5", "key-pw-9", "sasl-pw-13"
ALICE = "CN=alice,OU=clients,O=zkcoord"


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return certs.make_local_ca(tmp_path_factory.mktemp("ca"), clients={"alice": ALICE},
                               store_password=Password(STORE_PW), key_password=Password(KEY_PW))


@pytest.fixture(scope="module")
def broker(services) -> tuple[str, int]:
    host, port = services.bootstrap_servers.split(",")[0].rsplit(":", 1)
    return host, int(port)


def _server(ca, client_auth: str = "required", keystore=None) -> SslSettings:
    return SslSettings(keystore_location=str(keystore or ca.server_keystore_pkcs12), keystore_password=STORE_PW,
                       truststore_location=str(ca.ca_certificate_pem), client_auth=client_auth)


def _client(ca, *, certificate: bool = True, **extra) -> KafkaClientSecurity:
    keystore = dict(keystore_location=str(ca.clients["alice"].keystore_pkcs12),
                    keystore_password=STORE_PW) if certificate else {}
    truststore = dict(truststore_location=str(ca.ca_certificate_pem))
    truststore.update(extra)
    return KafkaClientSecurity("SSL", ssl=SslSettings(**keystore, **truststore))


class TlsProxy:
    """A TLS listener of ours in front of a plaintext broker (or of nothing:
    then it closes each connection it accepted); records the principal of
    every client it accepted."""

    def __init__(self, settings: SslSettings, upstream: tuple[str, int] | None) -> None:
        self.settings, self.upstream = settings, upstream
        self.principals: list[str] = []
        self.mapper = settings.principal_mapper()
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> TlsProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.settings.server_context())
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        for writer in self._writers:  # ends every pipe: its reads see EOF
            writer.transport.abort()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        self.principals.append(peer_principal(der, self.mapper))
        self._writers.append(writer)
        if self.upstream is None:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers.append(up_writer)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _metadata_brokers(connection) -> list[tuple[int, int]]:
    version = min(connection.api_versions[MetadataRequest.API_KEY][1], MetadataRequest.max_version)
    answer = await connection.call(MetadataRequest, version, MetadataResponse, topics=[],
                                   allow_auto_topic_creation=False)
    return [(b.node_id, b.port) for b in answer.brokers]


def test_plaintext_connection_to_the_broker(broker):
    async def scenario():
        connection = await open_kafka_connection(*broker, KafkaClientSecurity(), client_id="zkcoord-test")
        try:
            assert connection.next_correlation_id == 2  # one ApiVersions v3, accepted at once
            assert connection.api_versions[18] == (0, 4)  # Kafka 3.9 serves ApiVersions v0-v4; we ask v3
            assert connection.user is None
            assert [port for _, port in await _metadata_brokers(connection)] == [broker[1]]
            assert connection.next_correlation_id == 3
        finally:
            await connection.close()

    asyncio.run(scenario())


def test_sasl_login_on_a_plaintext_listener_is_refused_by_kafka(broker):
    security = KafkaClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", Password(SASL_PW))
    with pytest.raises(AuthenticationError) as info:
        asyncio.run(open_kafka_connection(*broker, security))
    assert str(info.value) == (f"{broker[0]}:{broker[1]} refused the SCRAM-SHA-512 login of user 'alice': "
                               f"IllegalSaslStateError (the listener takes no SASL logins: is it a PLAINTEXT or "
                               f"SSL listener?)")
    assert SASL_PW not in str(info.value)


def test_tls_with_a_client_certificate_required(ca, broker):
    async def scenario():
        async with TlsProxy(_server(ca, "required"), broker) as proxy:
            for host in ("localhost", "127.0.0.1"):  # a DNS name and an IP address in the certificate
                connection = await open_kafka_connection(host, proxy.port, _client(ca))
                try:
                    assert connection.writer.get_extra_info("ssl_object").version() == "TLSv1.3"
                    assert [p for _, p in await _metadata_brokers(connection)] == [broker[1]]
                finally:
                    await connection.close()
            return proxy.principals

    assert asyncio.run(scenario()) == [f"User:{ALICE}"] * 2


@pytest.mark.parametrize("client_auth", ["none", "requested"])
def test_tls_without_a_client_certificate(ca, broker, client_auth):
    async def scenario():
        async with TlsProxy(_server(ca, client_auth), broker) as proxy:
            connection = await open_kafka_connection("localhost", proxy.port, _client(ca, certificate=False))
            try:
                assert len(await _metadata_brokers(connection)) == 1
            finally:
                await connection.close()
            return proxy.principals

    assert asyncio.run(scenario()) == ["User:ANONYMOUS"]


def _refused(proxy_settings: SslSettings, client: KafkaClientSecurity, host: str = "localhost",
             error=AuthenticationError) -> str:
    async def scenario():
        async with TlsProxy(proxy_settings, None) as proxy:
            with pytest.raises(error) as info:
                await open_kafka_connection(host, proxy.port, client, timeout_s=20)
            return proxy.port, str(info.value)

    port, text = asyncio.run(scenario())
    assert text.startswith(f"TLS with {host}:{port} ") or text.startswith(f"TLS to {host}:{port}: ") \
        or f"{host}:{port}" in text
    for secret in (STORE_PW, KEY_PW):
        assert secret not in text
    return text


def test_a_required_client_certificate_that_is_missing(ca):
    text = _refused(_server(ca, "required"), _client(ca, certificate=False))
    assert text.endswith("the server closed the connection right after the handshake; it probably refused our "
                         "client certificate (we have none)")


def test_a_server_certificate_from_another_ca(ca, tmp_path):
    other = certs.make_local_ca(tmp_path / "other", store_password=Password(STORE_PW))
    client = _client(ca, certificate=False, truststore_location=str(other.ca_certificate_pem))
    text = _refused(_server(ca, "none"), client)
    assert "the server's certificate is not accepted: self-signed certificate in certificate chain" in text


def test_a_client_certificate_from_another_ca(ca, tmp_path):
    other = certs.make_local_ca(tmp_path / "other", clients=["alice"], store_password=Password(STORE_PW))
    client = KafkaClientSecurity("SSL", ssl=SslSettings(
        truststore_location=str(ca.ca_certificate_pem), keystore_location=str(other.clients["alice"].keystore_pkcs12),
        keystore_password=STORE_PW))
    assert _refused(_server(ca, "required"), client).endswith("it probably refused our client certificate (not "
                                                              "trusted by it)")


def test_a_host_name_the_certificate_does_not_name(ca, tmp_path):
    identity = certs.new_server_identity(certs.Identity(*_ca_identity(ca)), ["broker.example"])
    keystore = certs.write_keystore_pkcs12(tmp_path / "elsewhere.p12", identity, Password(STORE_PW))
    settings = _server(ca, "none", keystore=keystore)
    text = _refused(settings, _client(ca, certificate=False))
    assert "Hostname mismatch, certificate is not valid for 'localhost'" in text

    async def unchecked():  # ssl.endpoint.identification.algorithm= (empty): the name is not checked
        async with TlsProxy(settings, None) as proxy:
            client = _client(ca, certificate=False, endpoint_identification_algorithm="")
            with pytest.raises(AuthenticationError, match="closed the connection right after the handshake"):
                await open_kafka_connection("localhost", proxy.port, client)  # TLS done; the proxy has no broker
            return proxy.principals

    assert asyncio.run(unchecked()) == ["User:ANONYMOUS"]


def _ca_identity(ca):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    key = serialization.load_pem_private_key(ca.ca_key_pem.read_bytes(), None)
    return key, x509.load_pem_x509_certificate(ca.ca_certificate_pem.read_bytes())


def test_plaintext_client_on_a_tls_listener_and_the_other_way(ca, broker):
    text = _refused(_server(ca, "none"), KafkaClientSecurity(), error=ServiceUnavailableError)
    assert text.endswith("closed the connection at its first request (ApiVersions); is it a TLS listener? "
                         "security.protocol is PLAINTEXT")
    with pytest.raises((AuthenticationError, ServiceUnavailableError)) as info:
        asyncio.run(open_kafka_connection(*broker, _client(ca, certificate=False), timeout_s=20))
    assert f"{broker[0]}:{broker[1]}" in str(info.value)


def test_refused_and_silent_servers_are_unavailable():
    async def scenario():
        silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = silent.sockets[0].getsockname()[1]
        try:
            with pytest.raises(ServiceUnavailableError) as quiet:
                await open_kafka_connection("127.0.0.1", port, KafkaClientSecurity(), timeout_s=0.5)
        finally:
            silent.close()
            await silent.wait_closed()
        with pytest.raises(ServiceUnavailableError) as refused:
            await open_kafka_connection("127.0.0.1", port, KafkaClientSecurity())
        return port, str(quiet.value), str(refused.value)

    port, quiet, refused = asyncio.run(scenario())
    assert quiet == f"127.0.0.1:{port} did not answer ApiVersions within 0.5 s (PLAINTEXT)"
    assert refused.startswith(f"127.0.0.1:{port} does not accept connections: ")


# -- the real TLS stacks read the local CA's files -------------------------------------------------

JAVA_CLIENT = textwrap.dedent("""\
    import java.io.*;
    import java.nio.file.*;
    import java.util.*;
    import javax.net.ssl.*;
    import org.apache.kafka.common.config.ConfigDef;
    import org.apache.kafka.common.config.SslConfigs;
    import org.apache.kafka.common.security.ssl.DefaultSslEngineFactory;

    /** Loads each client properties file with Kafka's own SSL factory and shakes hands with the port. */
    public class KafkaTlsClient {
        public static void main(String[] args) throws Exception {
            int port = Integer.parseInt(args[0]);
            for (int i = 1; i < args.length; i++) {
                Properties props = new Properties();
                try (InputStream in = Files.newInputStream(Paths.get(args[i]))) { props.load(in); }
                ConfigDef def = new ConfigDef();
                SslConfigs.addClientSslSupport(def);
                Map<String, Object> configs = def.parse(props);
                DefaultSslEngineFactory factory = new DefaultSslEngineFactory();
                try {
                    factory.configure(configs);
                } catch (Exception e) {  // Kafka's ApiExceptions carry no stack trace: print the causes
                    System.out.println("FAIL " + e + (e.getCause() != null ? " caused by " + e.getCause() : ""));
                    continue;
                }
                SSLSocketFactory sockets = factory.sslContext().getSocketFactory();
                try (SSLSocket socket = (SSLSocket) sockets.createSocket("localhost", port)) {
                    SSLParameters params = socket.getSSLParameters();
                    params.setEndpointIdentificationAlgorithm("HTTPS");
                    socket.setSSLParameters(params);
                    socket.startHandshake();
                    int eof = socket.getInputStream().read();  // the server closes once it accepted us
                    System.out.println("OK " + eof + " " + socket.getSession().getLocalPrincipal().getName());
                } catch (Exception e) {
                    System.out.println("FAIL " + e);
                }
            }
        }
    }
    """)


def test_java_reads_the_stores_with_kafkas_own_factory(ca, tmp_path):
    try:
        java, kafka = jars.find_java(), jars.kafka_distribution()
    except MissingToolError as exc:
        pytest.skip(f"needs java and the Kafka jars: {exc}")
    alice = ca.clients["alice"]
    pem = KafkaClientSecurity("SSL", ssl=SslSettings(
        truststore_location=str(ca.ca_certificate_pem), keystore_location=str(alice.keystore_pem),
        key_password=KEY_PW))
    pkcs12 = KafkaClientSecurity("SSL", ssl=SslSettings(
        truststore_location=str(ca.truststore_pkcs12), truststore_password=STORE_PW,
        keystore_location=str(alice.keystore_pkcs12), keystore_password=STORE_PW))
    files = [pem.write_java_properties(tmp_path / "pem.properties"),
             pkcs12.write_java_properties(tmp_path / "pkcs12.properties")]
    assert "ssl.keystore.type=PEM" in files[0].read_text() and "ssl.truststore.type=PKCS12" in files[1].read_text()
    source = tmp_path / "KafkaTlsClient.java"
    source.write_text(JAVA_CLIENT)

    async def scenario():
        async with TlsProxy(_server(ca, "required"), None) as proxy:
            process = await asyncio.create_subprocess_exec(
                java, "-cp", kafka.classpath, str(source), str(proxy.port), *map(str, files),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, err = await asyncio.wait_for(process.communicate(), 120)
            return out.decode(), err.decode(), proxy.principals

    out, err, principals = asyncio.run(scenario())
    assert out.splitlines() == [f"OK -1 {ALICE}"] * 2, err[-3000:]
    assert principals == [f"User:{ALICE}"] * 2  # our text of the subject is Java's

    keytool = str(java).removesuffix("java") + "keytool"
    listing = subprocess.run([keytool, "-list", "-storetype", "PKCS12", "-keystore", str(ca.truststore_pkcs12),
                              "-storepass", STORE_PW], capture_output=True, text=True, timeout=60)
    assert "trustedCertEntry" in listing.stdout, listing.stdout + listing.stderr


def test_librdkafka_reads_the_stores(ca, broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient
    alice = ca.clients["alice"]
    variants = [
        KafkaClientSecurity("SSL", ssl=SslSettings(
            truststore_location=str(ca.ca_certificate_pem), keystore_location=str(alice.keystore_pem),
            key_password=KEY_PW)),
        KafkaClientSecurity("SSL", ssl=SslSettings(
            truststore_location=str(ca.truststore_pkcs12), truststore_password=STORE_PW,
            keystore_location=str(alice.keystore_pkcs12), keystore_password=STORE_PW)),
    ]

    async def scenario():
        async with TlsProxy(_server(ca, "required"), broker) as proxy:
            for security in variants:
                # the broker it learns of is the plaintext one behind the proxy: quiet its TLS failures there
                config = dict(security.librdkafka_config(), **{"bootstrap.servers": f"localhost:{proxy.port}",
                                                               "log_level": 0})
                client = AdminClient(config)
                topics = await asyncio.to_thread(client.list_topics, timeout=20)
                assert topics.orig_broker_name == f"ssl://localhost:{proxy.port}/bootstrap"
                del client
            return proxy.principals

    principals = asyncio.run(scenario())
    assert principals and set(principals) == {f"User:{ALICE}"}
    assert confluent_kafka.libversion()[0] >= "2"
