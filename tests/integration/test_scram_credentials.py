"""Kafka's SCRAM credentials read from the real ZooKeeper of the sandbox
(zkcoord.zk.scram_credentials), written there by Kafka 3.9's own
ConfigCommand in the test's chroot, and used for whole logins: our SASL
session as the server, kafka-python's SCRAM client as the client."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets

import pytest
from kafka.net.sasl.scram import SaslMechanismScram
from test_zk_support import CuttableProxy, connection, eventually

from tests.support.java_tools import run_tool
from zkcoord.core import scram
from zkcoord.core.errors import ErrorCode
from zkcoord.core.sasl import AuthenticateReply, Lookup, SaslSession
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
