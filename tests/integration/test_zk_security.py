"""zkcoord's ZooKeeper login and the ACLs of its znodes (issue 17 item 5), on
a real ZooKeeper 3.8 with SASL (tests/support/secure_zookeeper.py: started
once for this module, always stopped): digest and SASL DIGEST-MD5 logins,
refused logins, a daemon with zookeeper_set_acl against an unauthenticated
(legacy) client, ``zkcoord zookeeper-acl`` and the commands' login flags."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from kafka.protocol.consumer.group import JoinGroupRequest, OffsetCommitRequest, SyncGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions

from tests.support.secure_zookeeper import SecureZooKeeper, start_secure_zookeeper
from tests.support.wire import WireClient
from zkcoord.cli.main import cli
from zkcoord.config import DaemonConfig
from zkcoord.errors import AuthenticationError, AuthorizationError
from zkcoord.server.daemon import Daemon
from zkcoord.zk import layout
from zkcoord.zk.auth import ZkSecurity, digest_id
from zkcoord.zk.connection import ZkConnection

pytestmark = pytest.mark.integration

ZKCOORD_PASSWORD = "zk-Secret-1"  # SASL user zkcoord
DIGEST = "zkcoord-d:digest-Secret-2"  # digest USER:PASSWORD
READ_ALL = ACL(Permissions.READ, Id("world", "anyone"))
OPEN = list(OPEN_ACL_UNSAFE)
SASL_SECURE = [ACL(Permissions.ALL, Id("sasl", "zkcoord")), READ_ALL]
DIGEST_SECURE = [ACL(Permissions.ALL, Id("digest", digest_id(*DIGEST.split(":", 1)))), READ_ALL]
# ZooKeeper shows a digest identity's hash only to those with ADMIN on the znode; others see "user:x".
DIGEST_SECURE_SEEN = [ACL(Permissions.ALL, Id("digest", "zkcoord-d:x")), READ_ALL]
SECRETS = (ZKCOORD_PASSWORD, "digest-Secret-2", "wrong-Secret-3")


@pytest.fixture(scope="module")
def secure_zk(tmp_path_factory):
    server = start_secure_zookeeper(tmp_path_factory.mktemp("sasl-zookeeper"),
                                    {"zkcoord": ZKCOORD_PASSWORD, "other": "other-Secret-4"})
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def plain_client(secure_zk):
    """A client that does not log in: what a legacy consumer (or anyone) is."""
    client = KazooClient(hosts=secure_zk.hosts, timeout=10)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def hosts(secure_zk, plain_client, request):
    """A connection string with a chroot of this test's own (created open)."""
    chroot = f"/zkcoord-security/{re.sub(r'[^A-Za-z0-9_-]+', '-', request.node.name)[:50]}-{uuid.uuid4().hex[:8]}"
    plain_client.ensure_path(chroot)
    return secure_zk.hosts + chroot


@pytest.fixture
def anyone(hosts):
    """An unauthenticated kazoo client inside the test's chroot."""
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


def acls(client: KazooClient, path: str) -> list[ACL]:
    return list(client.get_acls(path)[0])


# ------------------------------------------------------------------ a daemon with zookeeper_set_acl
async def _join_and_commit(address: tuple[str, int], group: str) -> None:
    """FindCoordinator, JoinGroup, SyncGroup and one OffsetCommit (orders-0 at 42)."""
    client = await WireClient.connect(*address, "c")
    try:
        found = await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
        assert found.error_code == 0, found

        def join(member_id: str):
            return JoinGroupRequest(
                version=5, group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                member_id=member_id, group_instance_id=None, protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")])

        member = (await client.call(join(""))).member_id
        joined = await client.call(join(member))
        assert (joined.error_code, joined.generation_id) == (0, 1)
        synced = await client.call(SyncGroupRequest(
            version=3, group_id=group, generation_id=1, member_id=member, group_instance_id=None,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"a")]))
        assert synced.error_code == 0
        Partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
        committed = await client.call(OffsetCommitRequest(
            version=7, group_id=group, generation_id_or_member_epoch=1, member_id=member, group_instance_id=None,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="orders", partitions=[
                Partition(partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                          committed_metadata="m")])]))
        assert committed.topics[0].partitions[0].error_code == 0
    finally:
        await client.close()


def _daemon(hosts: str, **login) -> Daemon:
    return Daemon(DaemonConfig(zookeeper=hosts, listen="127.0.0.1:0", node_id=1, group_initial_rebalance_delay_ms=0,
                               zk_session_timeout_ms=6000, **login))


def test_daemon_with_set_acl_writes_only_as_itself_and_legacy_parents_stay_open(hosts, anyone):
    group = "payments"
    daemon = _daemon(hosts, zookeeper_digest=DIGEST, zookeeper_set_acl=True)

    async def scenario():
        running = await daemon.start()
        try:
            await _join_and_commit(running.advertised, group)
            contender = anyone.get_children(f"/coordinators/{group}/owner")
            assert len(contender) == 1
            secured = ["/coordinators", f"/coordinators/{group}", f"/coordinators/{group}/owner",
                       f"/coordinators/{group}/owner/{contender[0]}", f"/coordinators/{group}/state", "/zkcoord",
                       "/zkcoord/nodes", "/zkcoord/nodes/1", "/zkcoord/layout", "/zkcoord/node-id-seq",
                       "/zkcoord/migrations", f"/consumers/{group}/offsets", f"/consumers/{group}/offsets/orders",
                       f"/consumers/{group}/offsets/orders/0", f"/consumers/{group}/offsets-metadata/orders/0"]
            assert {path: acls(anyone, path) for path in secured} == {path: DIGEST_SECURE_SEEN for path in secured}
            assert acls(daemon.conn.client, "/zkcoord/nodes/1") == DIGEST_SECURE  # as the daemon sees it
            assert {path: acls(anyone, path) for path in ("/consumers", f"/consumers/{group}")} == \
                {"/consumers": OPEN, f"/consumers/{group}": OPEN}

            # Everybody reads ...
            assert anyone.get(f"/consumers/{group}/offsets/orders/0")[0] == b"42"
            assert json.loads(anyone.get("/zkcoord/nodes/1")[0])["port"] == running.advertised[1]
            # ... nobody else writes: no planted contender, no fake registration, no rewound offset.
            refused = {
                "contender": lambda: anyone.create(f"/coordinators/{group}/owner/x__lock__0000000000", b"9",
                                                   ephemeral=True),
                "new group": lambda: anyone.create("/coordinators/planted"),
                "registration set": lambda: anyone.set("/zkcoord/nodes/1", b'{"host":"evil","port":1}'),
                "registration delete": lambda: anyone.delete("/zkcoord/nodes/1"),
                "fake node": lambda: anyone.create("/zkcoord/nodes/7", b"{}", ephemeral=True),
                "state set": lambda: anyone.set(f"/coordinators/{group}/state", b"{}"),
                "offset set": lambda: anyone.set(f"/consumers/{group}/offsets/orders/0", b"0"),
                "offset delete": lambda: anyone.delete(f"/consumers/{group}/offsets/orders/0"),
                "offset create": lambda: anyone.create(f"/consumers/{group}/offsets/orders/1", b"0"),
            }
            outcomes = {}
            for name, attempt in refused.items():
                try:
                    attempt()
                    outcomes[name] = "written"
                except NoAuthError:
                    outcomes[name] = "NoAuth"
            assert outcomes == {name: "NoAuth" for name in refused}
            # A legacy ZooKeeper consumer still registers under the open /consumers/<group>.
            anyone.create(f"/consumers/{group}/ids/legacy-1", b"{}", ephemeral=True, makepath=True)
            anyone.create(f"/consumers/{group}/owners/orders/0", b"legacy-1", ephemeral=True, makepath=True)
            assert sorted(anyone.get_children(f"/consumers/{group}")) == ["ids", "offsets", "offsets-metadata",
                                                                         "owners"]
        finally:
            await daemon.stop()

    asyncio.run(scenario())


# ------------------------------------------------------------------ SASL DIGEST-MD5 logins
def _connect(hosts: str, security: ZkSecurity, **settings) -> ZkConnection:
    conn = ZkConnection(hosts, fail_when_refused=True, security=security, **settings)
    conn.start()
    return conn


def test_sasl_login_from_the_jaas_client_section(secure_zk: SecureZooKeeper, hosts, anyone):
    conn = _connect(hosts, ZkSecurity(str(secure_zk.client_jaas("zkcoord")), set_acl=True))

    async def create_layout():
        await layout.ensure_layout(conn)

    try:
        asyncio.run(create_layout())
    finally:
        conn.stop()
    assert {p: acls(anyone, p) for p in ("/zkcoord", "/zkcoord/layout", "/coordinators")} == \
        {p: SASL_SECURE for p in ("/zkcoord", "/zkcoord/layout", "/coordinators")}
    with pytest.raises(NoAuthError):
        anyone.set("/zkcoord/layout", b"{}")


@pytest.mark.parametrize("user, password", [("zkcoord", "wrong-Secret-3"), ("nobody", "wrong-Secret-3")])
def test_refused_sasl_login_is_one_authentication_error(secure_zk: SecureZooKeeper, hosts, user, password):
    jaas = secure_zk.client_jaas(user, password, name=f"refused-{user}.jaas")
    with pytest.raises(AuthenticationError) as info:
        _connect(hosts, ZkSecurity(str(jaas), set_acl=True))
    assert str(info.value) == (
        f"ZooKeeper at {hosts} refused the login (SASL DIGEST-MD5 as user {user!r} (JAAS file {jaas}, section "
        "Client)): a wrong password or a user the server does not know; check the login's user and password")


def test_sasl_login_to_a_server_without_sasl_is_an_authentication_error(tmp_path):
    plain = start_secure_zookeeper(tmp_path / "plain", {})
    try:
        jaas = tmp_path / "client.jaas"
        jaas.write_text('Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="zkcoord" '
                        f'password="{ZKCOORD_PASSWORD}"; }};')
        with pytest.raises(AuthenticationError) as info:
            # kazoo waits for the unanswered SASL exchange the session time-out over the number of servers
            _connect(plain.hosts, ZkSecurity(str(jaas)), session_timeout_ms=3000)
    finally:
        plain.stop()
    message = str(info.value)
    assert message.startswith(f"ZooKeeper at {plain.hosts} refused the login (SASL DIGEST-MD5 as user 'zkcoord' "
                              f"(JAAS file {jaas}, section Client)): the server did not answer the SASL exchange "
                              "within ")
    assert message.endswith("s: is SASL enabled on it (authProvider.1=org.apache.zookeeper.server.auth."
                            "SASLAuthenticationProvider in zoo.cfg and a Server section in its JAAS file)?")


def test_a_wrong_digest_password_is_told_from_the_secured_root(hosts, anyone):
    conn = _connect(hosts, ZkSecurity(digest=DIGEST, set_acl=True))
    try:
        asyncio.run(layout.ensure_layout(conn))
    finally:
        conn.stop()
    with pytest.raises(AuthenticationError) as info:
        _connect(hosts, ZkSecurity(digest="zkcoord-d:wrong-Secret-3"))
    assert str(info.value) == (
        f"ZooKeeper at {hosts}: the digest login as user 'zkcoord-d' has another password than the one /zkcoord "
        "was secured with (ZooKeeper accepts any digest login, so the password only shows in the znodes' ACLs); "
        "check zookeeper_digest (ZKCOORD_ZOOKEEPER_DIGEST)")


# ------------------------------------------------------------------ zkcoord zookeeper-acl
def _open_tree(anyone: KazooClient) -> None:
    """zkcoord's znodes of one coordinated group, a legacy group, and Kafka's, all made without ACLs."""
    for path, data in [("/zkcoord/layout", b"{}"), ("/zkcoord/migrations/g1", b"{}"),
                       ("/coordinators/g1/state", b"{}"), ("/consumers/g1/offsets/t/0", b"5"),
                       ("/consumers/g1/offsets-metadata/t/0", b'{"o":5,"m":""}'),
                       ("/consumers/legacy/offsets/t/0", b"7"), ("/brokers/topics/t", b"{}"),
                       ("/config/users/alice", b"{}")]:
        anyone.create(path, data, makepath=True)
    anyone.create("/zkcoord/nodes/1", b"{}", ephemeral=True, makepath=True)
    anyone.create("/coordinators/g1/owner/abc__lock__", b"1", ephemeral=True, sequence=True, makepath=True)
    anyone.create("/consumers/g1/ids/legacy-1", b"{}", ephemeral=True, makepath=True)


ZKCOORD_ZNODES = ["/coordinators", "/coordinators/g1", "/coordinators/g1/state", "/coordinators/g1/owner",
                  "/zkcoord", "/zkcoord/layout", "/zkcoord/migrations", "/zkcoord/migrations/g1", "/zkcoord/nodes",
                  "/zkcoord/nodes/1", "/consumers/g1/offsets", "/consumers/g1/offsets/t", "/consumers/g1/offsets/t/0",
                  "/consumers/g1/offsets-metadata", "/consumers/g1/offsets-metadata/t",
                  "/consumers/g1/offsets-metadata/t/0"]  # 16, and the contender
UNTOUCHED = ["/consumers", "/consumers/g1", "/consumers/g1/ids", "/consumers/g1/ids/legacy-1", "/consumers/legacy",
             "/consumers/legacy/offsets/t/0", "/brokers", "/brokers/topics/t", "/config/users/alice"]


def _cli(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def _summary(document: dict) -> dict[str, tuple[int, int, dict]]:
    return {s["subtree"]: (s["znodes"], s["changed"], s["by_kind"]) for s in document["subtrees"]}


def test_zookeeper_acl_secure_and_unsecure_zkcoords_znodes_only(secure_zk: SecureZooKeeper, hosts, anyone):
    _open_tree(anyone)
    contender = "/coordinators/g1/owner/" + anyone.get_children("/coordinators/g1/owner")[0]
    login = {"ZKCOORD_ZOOKEEPER_SASL_JAAS_FILE": str(secure_zk.client_jaas("zkcoord"))}

    dry = _cli("zookeeper-acl", "secure", "--zookeeper", hosts, "--dry-run", "--output", "json", env=login)
    assert dry.exit_code == 0, dry.output
    document = json.loads(dry.output)
    assert (document["schema"], document["action"], document["dry_run"], document["zkcoord_groups"],
            document["changed"], document["target_acl"]) == \
        ("zkcoord/zookeeper-acl/v1", "secure", True, 1, 17, ["sasl:zkcoord=ALL", "world:anyone=READ"])
    assert _summary(document) == {"/coordinators": (5, 5, {"open": 5}), "/zkcoord": (6, 6, {"open": 6}),
                                  "/consumers/*/offsets": (3, 3, {"open": 3}),
                                  "/consumers/*/offsets-metadata": (3, 3, {"open": 3})}
    assert all(acls(anyone, p) == OPEN for p in [*ZKCOORD_ZNODES, contender])

    done = _cli("zookeeper-acl", "secure", "--zookeeper", hosts, env=login)
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[-1] == "changed the ACL of 17 znode(s)"
    assert {p: acls(anyone, p) for p in [*ZKCOORD_ZNODES, contender]} == \
        {p: SASL_SECURE for p in [*ZKCOORD_ZNODES, contender]}
    assert {p: acls(anyone, p) for p in UNTOUCHED} == {p: OPEN for p in UNTOUCHED}

    again = json.loads(_cli("zookeeper-acl", "secure", "--zookeeper", hosts, "--output", "json", env=login).output)
    assert again["changed"] == 0  # already secure: nothing set again
    shown = json.loads(_cli("zookeeper-acl", "show", "--zookeeper", hosts, "--output", "json").output)
    assert {s["subtree"]: s["by_acl"] for s in shown["subtrees"]} == {
        "/coordinators": {"sasl:zkcoord=ALL, world:anyone=READ": 5},
        "/zkcoord": {"sasl:zkcoord=ALL, world:anyone=READ": 6},
        "/consumers/*/offsets": {"sasl:zkcoord=ALL, world:anyone=READ": 3},
        "/consumers/*/offsets-metadata": {"sasl:zkcoord=ALL, world:anyone=READ": 3}}

    # Without the login that secured them, nobody may open them again: one error line, exit 2.
    refused = CliRunner().invoke(cli, ["zookeeper-acl", "unsecure", "--zookeeper", hosts])
    assert refused.exit_code == 2
    assert refused.output.startswith(f"error: ZooKeeper at {hosts} refused to change the ACL of /coordinators "
                                     "(sasl:zkcoord=ALL, world:anyone=READ): only an identity with ADMIN on it may")
    assert len(refused.output.strip().splitlines()) == 1

    opened = _cli("zookeeper-acl", "unsecure", "--zookeeper", hosts, env=login)
    assert opened.exit_code == 0, opened.output
    assert opened.output.splitlines()[-1] == "changed the ACL of 17 znode(s)"
    assert {p: acls(anyone, p) for p in [*ZKCOORD_ZNODES, contender, *UNTOUCHED]} == \
        {p: OPEN for p in [*ZKCOORD_ZNODES, contender, *UNTOUCHED]}


def test_zookeeper_acl_secure_needs_a_login(hosts):
    result = CliRunner().invoke(cli, ["zookeeper-acl", "secure", "--zookeeper", hosts])
    assert result.exit_code == 2
    assert result.output.startswith("error: zookeeper-acl secure needs a ZooKeeper login")


# ------------------------------------------------------------------ every command takes the login
def test_groups_and_describe_with_the_login_flags_and_variables(secure_zk: SecureZooKeeper, hosts, anyone):
    jaas = secure_zk.client_jaas("zkcoord")
    daemon = _daemon(hosts, zookeeper_sasl_jaas_file=str(jaas), zookeeper_set_acl=True)

    async def serve_one_group():
        running = await daemon.start()
        try:
            await _join_and_commit(running.advertised, "orders-app")
        finally:
            await daemon.stop()

    asyncio.run(serve_one_group())
    assert acls(anyone, "/coordinators/orders-app/state") == SASL_SECURE

    listed = _cli("groups", "--zookeeper", hosts, "--zookeeper-sasl-jaas-file", str(jaas), "--output", "json")
    assert listed.exit_code == 0, listed.output
    assert [g["group"] for g in json.loads(listed.output)["groups"]] == ["orders-app"]
    described = _cli("describe", "orders-app", "--zookeeper", hosts, "--output", "json",
                     env={"ZKCOORD_ZOOKEEPER_DIGEST": DIGEST})
    assert described.exit_code == 0, described.output
    group = json.loads(described.output)["groups"][0]
    assert [(o["topic"], o["partition"], o["current_offset"]) for o in group["offsets"]] == [("orders", 0, 42)]

    wrong = secure_zk.client_jaas("zkcoord", "wrong-Secret-3", name="wrong.jaas")
    refused = CliRunner().invoke(cli, ["describe", "orders-app", "--zookeeper", hosts],
                                 env={"ZKCOORD_ZOOKEEPER_SASL_JAAS_FILE": str(wrong)})
    assert refused.exit_code == 2
    assert refused.output == (f"error: ZooKeeper at {hosts} refused the login (SASL DIGEST-MD5 as user 'zkcoord' "
                              f"(JAAS file {wrong}, section Client)): a wrong password or a user the server does "
                              "not know; check the login's user and password\n")
    assert not any(secret in refused.output for secret in SECRETS)



def test_migrate_layout_up_with_set_acl_creates_secure_znodes(hosts, anyone):
    no_login = CliRunner().invoke(cli, ["migrate", "layout", "up", "--zookeeper", hosts, "--zookeeper-set-acl"])
    assert no_login.exit_code == 2
    assert no_login.output.startswith("error: zookeeper_set_acl (--zookeeper-set-acl, ZKCOORD_ZOOKEEPER_SET_ACL) "
                                      "needs a ZooKeeper login")
    assert anyone.get_children("/") == []

    created = _cli("migrate", "layout", "up", "--zookeeper", hosts,
                   env={"ZKCOORD_ZOOKEEPER_DIGEST": DIGEST, "ZKCOORD_ZOOKEEPER_SET_ACL": "true"})
    assert created.exit_code == 0, created.output
    assert {p: acls(anyone, p) for p in ("/zkcoord", "/zkcoord/layout", "/coordinators")} == \
        {p: DIGEST_SECURE_SEEN for p in ("/zkcoord", "/zkcoord/layout", "/coordinators")}
    assert not any(secret in created.output for secret in SECRETS)


def test_migrate_import_with_set_acl_keeps_the_group_znode_open(hosts, anyone, tmp_path):
    offsets = tmp_path / "imp.csv"
    offsets.write_text("orders,0,42\norders,1,7\n")
    env = {"ZKCOORD_ZOOKEEPER_DIGEST": DIGEST}
    imported = _cli("migrate", "import", "--file", str(offsets), "--group", "imp", "--zookeeper", hosts,
                    "--zookeeper-set-acl", env=env)
    assert imported.exit_code == 0, imported.output
    assert {p: acls(anyone, p) for p in ("/consumers", "/consumers/imp")} == {p: OPEN for p in ("/consumers",
                                                                                                 "/consumers/imp")}
    written = ["/consumers/imp/offsets", "/consumers/imp/offsets/orders", "/consumers/imp/offsets/orders/0",
               "/consumers/imp/offsets/orders/1"]
    assert {p: acls(anyone, p) for p in written} == {p: DIGEST_SECURE_SEEN for p in written}
    exported = _cli("migrate", "export", "--group", "imp", "--zookeeper", hosts, env=env)
    assert exported.exit_code == 0, exported.output
    assert exported.output.splitlines()[:2] == ["orders,0,42", "orders,1,7"]


def test_waiting_for_a_registration_with_a_refused_login(secure_zk: SecureZooKeeper, hosts):
    from zkcoord.zk.nodes import wait_node_unregistered

    assert wait_node_unregistered(hosts, 1, 5.0, ZkSecurity(str(secure_zk.client_jaas("zkcoord")))) is True
    jaas = secure_zk.client_jaas("zkcoord", "wrong-Secret-3", name="wait.jaas")
    with pytest.raises(AuthenticationError) as info:
        wait_node_unregistered(hosts, 1, 5.0, ZkSecurity(str(jaas)))
    assert str(info.value) == (
        f"ZooKeeper at {hosts} refused the login (SASL DIGEST-MD5 as user 'zkcoord' (JAAS file {jaas}, section "
        "Client)): a wrong password or a user the server does not know; check the login's user and password")


def test_rollback_writes_keep_the_group_znode_open(hosts, anyone):
    from zkcoord.zk.legacy import LegacyOffsets

    conn = _connect(hosts, ZkSecurity(digest=DIGEST, set_acl=True))

    async def write():
        return await LegacyOffsets(conn, "/kafka/consumers").write_versioned("rb", [("t", 0, 5, None)])

    try:
        assert asyncio.run(write()) is True
    finally:
        conn.stop()
    opened = ["/kafka", "/kafka/consumers", "/kafka/consumers/rb"]
    written = ["/kafka/consumers/rb/offsets", "/kafka/consumers/rb/offsets/t", "/kafka/consumers/rb/offsets/t/0"]
    assert {p: acls(anyone, p) for p in opened + written} == \
        {**{p: OPEN for p in opened}, **{p: DIGEST_SECURE_SEEN for p in written}}


# ------------------------------------------------------------------ the legacy handover (issue 26)
def test_handover_znodes_with_set_acl_leave_the_legacy_consumers_their_directories(secure_zk, hosts, anyone):
    """A daemon with zookeeper_set_acl registers a member and claims for it: the
    directories legacy consumers create in (ids, owners, owners/<topic>) are open,
    as Kafka keeps them; our ephemeral znodes are the daemon's, readable by all."""
    from zkcoord.zk.handover import LegacyRebalanceZk

    conn = _connect(hosts, ZkSecurity(str(secure_zk.client_jaas("zkcoord")), set_acl=True))
    zid = "g_zkcoord-1795315596682-0a1b2c3d"

    async def take_part():
        handover = LegacyRebalanceZk(conn)
        await handover.register("g", zid, {"orders": 1}, 1)
        assert await handover.claim("g", ("orders", 0), f"{zid}-0") is True

    try:
        asyncio.run(take_part())
    finally:
        conn.stop()  # closes the session: our ephemeral znodes go
    for path in ("/consumers", "/consumers/g", "/consumers/g/ids", "/consumers/g/owners", "/consumers/g/owners/orders"):
        assert acls(anyone, path) == OPEN, path
    anyone.create("/consumers/g/ids/g_legacy-1", b"{}", ephemeral=True)  # an unauthenticated legacy consumer
    anyone.create("/consumers/g/owners/orders/0", b"g_legacy-1-0", ephemeral=True)


def test_handover_ephemeral_znodes_get_the_daemons_acl(secure_zk, hosts, anyone):
    from zkcoord.zk.handover import LegacyRebalanceZk

    conn = _connect(hosts, ZkSecurity(str(secure_zk.client_jaas("zkcoord")), set_acl=True))
    zid = "g_zkcoord-1795315596682-0a1b2c3d"

    async def take_part():
        handover = LegacyRebalanceZk(conn)
        await handover.register("g", zid, {"orders": 1}, 1)
        await handover.claim("g", ("orders", 0), f"{zid}-0")
        assert acls(anyone, f"/consumers/g/ids/{zid}") == SASL_SECURE
        assert acls(anyone, "/consumers/g/owners/orders/0") == SASL_SECURE
        assert anyone.get("/consumers/g/owners/orders/0")[0] == f"{zid}-0".encode()  # legacy consumers read it
        with pytest.raises(NoAuthError):
            anyone.set(f"/consumers/g/ids/{zid}", b"{}")

    try:
        asyncio.run(take_part())
    finally:
        conn.stop()
