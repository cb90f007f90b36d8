"""Kafka's SCRAM credentials read from the real ZooKeeper of the sandbox
(zkcoord.zk.scram_credentials), written there by Kafka 3.9's own
ConfigCommand in the test's chroot, and used for whole logins: our SASL
session as the server, kafka-python's SCRAM client as the client."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import subprocess

import pytest
from kafka.net.sasl.scram import SaslMechanismScram
from test_zk_support import CuttableProxy, connection, eventually

from tests.support.java_tools import _environment, java_command, run_tool
from zkcoord.core import scram
from zkcoord.core.errors import ErrorCode
from zkcoord.core.sasl import AuthenticateReply, Lookup, SaslSession
from zkcoord.core.scram import PassiveScramVerifier, ScramAuthenticationError
from zkcoord.errors import ServiceUnavailableError
from zkcoord.zk.scram_credentials import USERS, ScramCredentialStore, sanitize

pytestmark = pytest.mark.integration

CONFIG_COMMAND = "kafka.admin.ConfigCommand"
SHA512, SHA256 = "SCRAM-SHA-512", "SCRAM-SHA-256"


def kafka_configs(zk_hosts: str, user: str, *args: str) -> None:
    """kafka-configs --zookeeper (Kafka 3.9's ConfigCommand) on ``user``."""
    run_tool(CONFIG_COMMAND, "--zookeeper", zk_hosts, "--entity-type", "users", "--entity-name", user, *args)


def set_password(zk_hosts: str, user: str, password: str, *mechanisms: str, iterations: int = 4096) -> None:
    configs = ",".join(f"{m}=[iterations={iterations},password={password}]" for m in mechanisms or (SHA512,))
    kafka_configs(zk_hosts, user, "--alter", "--add-config", configs)


async def login(store: ScramCredentialStore, user: str, password: str, mech: str = SHA512) -> AuthenticateReply:
    """A whole SCRAM login; the last reply (the client has checked our
    server signature when it says NONE)."""
    client = SaslMechanismScram(sasl_plain_username=user, sasl_plain_password=password, sasl_mechanism=mech,
                                security_protocol="SASL_SSL")
    session = SaslSession([SHA512, SHA256], unknown_user_key=b"test process key")
    assert session.handshake(mech).error_code == ErrorCode.NONE
    lookup = session.authenticate(client.auth_bytes())
    assert isinstance(lookup, Lookup)
    reply = session.resume(await store.credential(lookup.username, lookup.mechanism), secrets.token_hex(16))
    assert reply.error_code == ErrorCode.NONE
    client.receive(reply.auth_bytes)
    reply = session.authenticate(client.auth_bytes())
    if reply.error_code == ErrorCode.NONE:
        client.receive(reply.auth_bytes)  # raises if our signature were wrong
        assert client.is_done()
    return reply


def ok(reply: AuthenticateReply, user: str) -> bool:
    return reply.error_code == ErrorCode.NONE and reply.principal == f"User:{user}"


def refused(reply: AuthenticateReply) -> bool:
    return reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and reply.close


async def started(conn) -> ScramCredentialStore:
    store = ScramCredentialStore(conn)
    await store.start()
    return store


def test_kafkas_credentials_log_in_and_match_our_computation(zk_hosts, zk):
    set_password(zk_hosts, "alice", "alice-secret", SHA512, SHA256)
    stored = json.loads(zk.get(f"{USERS}/alice")[0])
    assert set(stored["config"]) == {SHA512, SHA256}

    async def scenario():
        async with connection(zk_hosts) as conn:
            store = await started(conn)
            for mech in (SHA512, SHA256):
                credential = await store.credential("alice", mech)
                assert credential.iterations == 4096
                # Kafka's ScramFormatter and ours derive the same keys from the password and salt
                assert scram.make_credential(mech, "alice-secret", credential.salt, 4096) == credential
                assert scram.format_credential(credential) == stored["config"][mech]
                assert ok(await login(store, "alice", "alice-secret", mech), "alice")
                assert refused(await login(store, "alice", "alice-guess", mech))
            assert refused(await login(store, "nobody", "alice-secret"))
            await store.stop()
    asyncio.run(scenario())


def test_a_password_change_takes_effect_and_a_deleted_user_fails(zk_hosts, zk):
    set_password(zk_hosts, "bob", "first")

    async def scenario():
        async with connection(zk_hosts) as conn:
            store = await started(conn)
            assert ok(await login(store, "bob", "first"), "bob")
            reads = store.user_reads
            await asyncio.to_thread(set_password, zk_hosts, "bob", "second")
            await eventually(lambda: "bob" not in store.cached(), "the watch dropping bob's entry")
            assert refused(await login(store, "bob", "first"))
            assert ok(await login(store, "bob", "second"), "bob")
            assert store.user_reads == reads + 1

            await asyncio.to_thread(kafka_configs, zk_hosts, "bob", "--alter", "--delete-config", SHA512)
            await eventually(lambda: "bob" not in store.cached(), "the watch after the deletion")
            assert await store.credential("bob", SHA512) is None
            assert refused(await login(store, "bob", "second"))

            await asyncio.to_thread(set_password, zk_hosts, "bob", "third")
            await eventually(lambda: "bob" not in store.cached(), "the watch after re-adding bob")
            assert ok(await login(store, "bob", "third"), "bob")
            zk.delete(f"{USERS}/bob")  # the user znode itself gone
            await eventually(lambda: "bob" not in store.cached(), "the watch after deleting the znode")
            assert refused(await login(store, "bob", "third"))
            await store.stop()
    asyncio.run(scenario())


@pytest.mark.parametrize("user", ["a@b.c", "x%y z~*+é"])
def test_user_names_that_need_sanitizing(zk_hosts, zk, user):
    set_password(zk_hosts, user, "pw-of-" + user)
    assert sanitize(user) in zk.get_children(USERS)  # Kafka named the znode as we do
    if not user.isascii():  # Kafka's SCRAM grammar is ASCII: such a user can never log in, there nor here
        with pytest.raises(scram.ScramFormatError):
            scram.parse_client_first(f"n,,n={user},r=x".encode())

    async def scenario():
        async with connection(zk_hosts) as conn:
            store = await started(conn)
            assert (await store.credential(user, SHA512)) is not None
            if user.isascii():
                assert ok(await login(store, user, "pw-of-" + user), user)
                assert refused(await login(store, user, "wrong"))
            await store.stop()
    asyncio.run(scenario())


def test_one_read_for_a_hundred_logins_and_none_for_unknown_users(zk_hosts, zk):
    set_password(zk_hosts, "carol", "carol-pw")

    async def scenario():
        async with connection(zk_hosts) as conn:
            store = await started(conn)
            replies = await asyncio.gather(*(login(store, "carol", "carol-pw") for _ in range(50)))
            replies += [await login(store, "carol", "carol-pw") for _ in range(50)]
            assert all(ok(reply, "carol") for reply in replies) and len(replies) == 100
            assert (store.user_reads, store.list_reads) == (1, 1)
            for i in range(2000):  # someone trying user names
                assert await store.credential(f"guess-{i}", SHA512) is None
            assert (store.user_reads, store.list_reads) == (1, 1) and store.cached() == ["carol"]
            await store.stop()
    asyncio.run(scenario())


def test_the_cache_is_bounded(zk_hosts, zk):
    record = scram.format_credential(scram.make_credential(SHA512, "pw", b"salt", 4096))
    for i in range(5):
        zk.create(f"{USERS}/u{i}", json.dumps({"version": 1, "config": {SHA512: record}}).encode(), makepath=True)

    async def scenario():
        async with connection(zk_hosts) as conn:
            store = ScramCredentialStore(conn, max_users=3)
            await store.start()
            for i in range(5):
                assert (await store.credential(f"u{i}", SHA512)).iterations == 4096
            assert store.cached() == ["u2", "u3", "u4"]
            await store.credential("u2", SHA512)  # cached, now the most recent
            await store.credential("u0", SHA512)  # read again, evicts u3
            assert store.cached() == ["u4", "u2", "u0"]
            assert store.user_reads == 6
            await store.stop()
    asyncio.run(scenario())


def test_a_corrupt_znode_is_no_credential_and_logged_once(zk_hosts, zk, caplog):
    record = scram.format_credential(scram.make_credential(SHA512, "pw", b"salt", 4096))
    zk.create(f"{USERS}/broken", b"{not json", makepath=True)
    zk.create(f"{USERS}/half", json.dumps({"version": 1, "config": {
        SHA512: record.replace("iterations=4096", "iterations=x"), SHA256: "garbage"}}).encode())

    async def scenario():
        async with connection(zk_hosts) as conn:
            store = await started(conn)
            for _ in range(3):
                assert await store.credential("broken", SHA512) is None
                assert await store.credential("half", SHA512) is None
                assert await store.credential("half", SHA256) is None
            assert refused(await login(store, "half", "pw"))
            await store.stop()
    with caplog.at_level(logging.WARNING, logger="zkcoord.zk.scram_credentials"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records]
    assert sorted(lines) == sorted([
        f"{USERS}/broken is not JSON; its SCRAM credentials are ignored until it is rewritten "
        "(kafka-configs --alter --add-config 'SCRAM-SHA-512=[...]')",
        f"the {SHA512} credential in {USERS}/half is unusable (the iterations of a SCRAM credential must be a "
        "positive whole number); logins with it fail until it is set again",
        f"the {SHA256} credential in {USERS}/half is unusable (a SCRAM credential must be comma-separated "
        "name=value fields (salt, stored_key, server_key, iterations); a field has no name); logins with it fail "
        "until it is set again",
    ])
    assert "salt=" not in " ".join(lines).replace("(salt,", "")


def test_a_lost_session_clears_the_cache(zk_hosts, zk, expire_session):
    record = scram.format_credential(scram.make_credential(SHA512, "pw", b"salt", 4096))
    zk.create(f"{USERS}/dave", json.dumps({"version": 1, "config": {SHA512: record}}).encode(), makepath=True)

    async def scenario():
        async with connection(zk_hosts) as conn:
            store = await started(conn)
            assert ok(await login(store, "dave", "pw"), "dave")
            assert (store.user_reads, store.list_reads) == (1, 1)
            await asyncio.to_thread(expire_session, conn.client)
            await eventually(lambda: conn.connected, "a new session")
            await eventually(lambda: not store.cached(), "the cache cleared")
            assert ok(await login(store, "dave", "pw"), "dave")
            assert (store.user_reads, store.list_reads) == (2, 2)
            await store.stop()
    asyncio.run(scenario())


def test_zookeeper_unreachable_is_service_unavailable(services, zk_chroot, zk):
    record = scram.format_credential(scram.make_credential(SHA512, "pw", b"salt", 4096))
    zk.create(f"{USERS}/erin", json.dumps({"version": 1, "config": {SHA512: record}}).encode(), makepath=True)
    proxy = CuttableProxy(services.zookeeper)

    async def scenario():
        async with connection(proxy.hosts(zk_chroot), session_timeout_ms=20_000, request_timeout_ms=1500) as conn:
            store = await started(conn)
            assert await store.credential("erin", SHA512) is not None
            proxy.cut()  # kazoo drops every watch: the cache goes with them
            await eventually(lambda: not store.cached(), "the cache cleared on the connection loss")
            with pytest.raises(ServiceUnavailableError, match="did not let us list Kafka's users"):
                await store.credential("erin", SHA512)
            proxy.resume()
            assert await store.credential("erin", SHA512) is not None
            await store.stop()
    try:
        asyncio.run(scenario())
    finally:
        proxy.close()


# ------------------------------------------------------------ Kafka's own SCRAM client and server
SCRAM_INTEROP_JAVA = """\
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Collections;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.CallbackHandler;
import javax.security.auth.callback.NameCallback;
import javax.security.auth.callback.PasswordCallback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.sasl.SaslClient;
import javax.security.sasl.SaslServer;
import org.apache.kafka.common.security.scram.ScramCredential;
import org.apache.kafka.common.security.scram.ScramCredentialCallback;
import org.apache.kafka.common.security.scram.internals.ScramCredentialUtils;
import org.apache.kafka.common.security.scram.internals.ScramMechanism;
import org.apache.kafka.common.security.scram.internals.ScramSaslClient;
import org.apache.kafka.common.security.scram.internals.ScramSaslServer;

/** Kafka's own SCRAM client and server, driven line by line (base64 payloads). */
public class ScramInterop {
    static String enc(byte[] b) { return b == null ? "-" : Base64.getEncoder().encodeToString(b); }
    static byte[] dec(String s) { return Base64.getDecoder().decode(s); }
    static String text(String s) { return new String(dec(s), StandardCharsets.UTF_8); }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        SaslServer server = null;
        SaslClient client = null;
        String line;
        while ((line = in.readLine()) != null) {
            String[] p = line.split(" ", -1);
            try {
                switch (p[0]) {
                    case "server": {
                        ScramCredential credential = ScramCredentialUtils.credentialFromString(p[2]);
                        CallbackHandler handler = callbacks -> {
                            for (Callback cb : callbacks)
                                if (cb instanceof ScramCredentialCallback)
                                    ((ScramCredentialCallback) cb).scramCredential(credential);
                        };
                        server = new ScramSaslServer(ScramMechanism.forMechanismName(p[1]), Collections.emptyMap(), handler);
                        System.out.println("ok");
                        break;
                    }
                    case "client": {
                        String user = text(p[2]);
                        char[] password = text(p[3]).toCharArray();
                        CallbackHandler handler = callbacks -> {
                            for (Callback cb : callbacks) {
                                if (cb instanceof NameCallback) ((NameCallback) cb).setName(user);
                                else if (cb instanceof PasswordCallback) ((PasswordCallback) cb).setPassword(password);
                                else throw new UnsupportedCallbackException(cb);
                            }
                        };
                        client = new ScramSaslClient(ScramMechanism.forMechanismName(p[1]), handler);
                        System.out.println("ok " + enc(client.evaluateChallenge(new byte[0])));
                        break;
                    }
                    case "toserver":
                        System.out.println("ok " + enc(server.evaluateResponse(dec(p[1]))) + " " + server.isComplete());
                        break;
                    case "toclient":
                        System.out.println("ok " + enc(client.evaluateChallenge(dec(p[1]))) + " " + client.isComplete());
                        break;
                    default:
                        System.out.println("err unknown command");
                }
            } catch (Exception e) {
                System.out.println("err " + e.getClass().getSimpleName());
            }
            System.out.flush();
        }
    }
}
"""


class KafkaScram:
    """Kafka 3.9's ScramSaslClient and ScramSaslServer in one JVM, driven
    line by line: ``client``/``server`` start one, ``to_client``/``to_server``
    hand it a message and return its answer, or the name of the exception
    it raised."""

    def __init__(self, directory) -> None:
        source = directory / "ScramInterop.java"
        source.write_text(SCRAM_INTEROP_JAVA)
        self.proc = subprocess.Popen(java_command(str(source)), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=_environment(),
                                     start_new_session=True)

    def _ask(self, *words: str) -> list[str]:
        self.proc.stdin.write(" ".join(words) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        assert answer, "the Java SCRAM driver exited"
        return answer

    def client(self, mech: str, user: str, password: str) -> bytes:
        b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
        status, first = self._ask("client", mech, b64(user), b64(password))
        assert status == "ok"
        return base64.b64decode(first)

    def server(self, mech: str, credential: scram.ScramCredential) -> None:
        assert self._ask("server", mech, scram.format_credential(credential)) == ["ok"]

    def _step(self, command: str, data: bytes) -> bytes | str:
        answer = self._ask(command, base64.b64encode(data).decode())
        if answer[0] == "err":
            return answer[1]
        return b"" if answer[1] == "-" else base64.b64decode(answer[1])

    def to_server(self, data: bytes) -> bytes | str:
        return self._step("toserver", data)

    def to_client(self, data: bytes) -> bytes | str:
        return self._step("toclient", data)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def kafka_scram(tmp_path_factory):
    driver = KafkaScram(tmp_path_factory.mktemp("scram-interop"))
    yield driver
    driver.close()


@pytest.mark.parametrize("mech", [SHA256, SHA512])
@pytest.mark.parametrize("user", ["alice", "a=b,c"])
def test_kafkas_scram_client_logs_in_to_our_server(kafka_scram, mech, user):
    credential = scram.make_credential(mech, "right", b"kafka-salt", 4096)
    for password, accepted in (("right", True), ("wrong", False)):
        session = SaslSession([mech], unknown_user_key=b"test process key")
        session.handshake(mech)
        lookup = session.authenticate(kafka_scram.client(mech, user, password))
        assert lookup == Lookup(mech, user)  # Kafka's client escaped the name, we unescaped it
        first = session.resume(credential, secrets.token_hex(16))
        final = session.authenticate(kafka_scram.to_client(first.auth_bytes))
        if accepted:
            assert ok(final, user)
            assert kafka_scram.to_client(final.auth_bytes) == b""  # Kafka's client checked our signature
        else:
            assert refused(final)


@pytest.mark.parametrize("mech", [SHA256, SHA512])
def test_the_passive_verifier_watching_kafkas_server(kafka_scram, mech):
    credential = scram.make_credential(mech, "right", b"kafka-salt", 8192)
    # kafka-python's client, then Kafka's own client, logging in to Kafka's server
    for make_client in ("kafka-python", "kafka"):
        for password in ("right", "wrong"):
            kafka_scram.server(mech, credential)
            if make_client == "kafka":
                client_first = kafka_scram.client(mech, "a=b,c", password)
                next_message = kafka_scram.to_client
            else:
                py_client = SaslMechanismScram(sasl_plain_username="bob", sasl_plain_password=password,
                                               sasl_mechanism=mech)
                client_first = py_client.auth_bytes()

                def next_message(challenge, c=py_client):
                    c.receive(challenge)
                    return c.auth_bytes()
            verifier = PassiveScramVerifier(mech, client_first)
            server_first = kafka_scram.to_server(client_first)
            verifier.observe_server_first(server_first)
            client_final = next_message(server_first)
            server_final = kafka_scram.to_server(client_final)
            if password == "right":
                verifier.observe_client_final(client_final, credential)
                assert verifier.observe_server_final(server_final) == verifier.username
            else:
                assert server_final == "SaslException"  # Kafka's server refused the proof
                with pytest.raises(ScramAuthenticationError, match="wrong password"):
                    verifier.observe_client_final(client_final, credential)
