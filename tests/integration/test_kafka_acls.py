"""Kafka's ACLs in ZooKeeper (zkcoord.zk.kafka_acls) reaching the authorizer.

ACLs are written in the test's chroot by Kafka 3.9's own ``kafka-acls``
(``kafka.admin.AclCommand --authorizer-properties zookeeper.connect=...``):
Kafka's AclAuthorizer code then writes the ACL znodes and the change
notifications, as a broker would. Checked: what the tool wrote before the
watcher started decides (literal, prefixed, ``*`` and DENY); additions and
removals while it runs take effect; ACL paths that did not exist at start
are picked up once the tool creates them; on one set of ACLs, every
decision equals that of Kafka's own AclAuthorizer (a JVM asking it the same
questions). The session cases (a reconnection, a new session) and a corrupt
znode write Kafka's format by hand, as they test our side only.

Every ``kafka-acls`` run is a JVM start that connects to ZooKeeper (a few
seconds here), so the tests combine ACLs in few runs. Waits are bounded
polls of the decision (``eventually``), never sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from pathlib import Path

import pytest
from test_zk_support import CuttableProxy, connection, eventually

from tests.support import java_tools as jt
from zkcoord.core.acl import (
    AclEntry, AclOperation, AclPermissionType, Authorizer, AuthorizerSettings, PatternType, ResourcePattern,
    ResourceType, java_host_address,
)
from zkcoord.zk.kafka_acls import KafkaAclWatcher

pytestmark = pytest.mark.integration

ACL_COMMAND = "kafka.admin.AclCommand"
READ, DESCRIBE, DELETE, WRITE, ALL = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                                      AclOperation.WRITE, AclOperation.ALL)
GROUP, TOPIC, CLUSTER = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER
HOST = "10.0.0.1"


def kafka_acls(zk_hosts: str, *args: str) -> str:
    """Run Kafka's ``kafka-acls`` against the ZooKeeper (and chroot) directly; its stdout."""
    result = jt.run_tool(ACL_COMMAND, "--authorizer-properties", f"zookeeper.connect={zk_hosts}", *args)
    if "Error while" in result.stdout:  # it exits 0 when the authorizer refused the change
        raise AssertionError(f"kafka-acls {' '.join(args)} failed:\n{result.stdout}")
    return result.stdout


async def kafka_acls_async(zk_hosts: str, *args: str) -> str:
    return await asyncio.to_thread(kafka_acls, zk_hosts, *args)


@contextlib.asynccontextmanager
async def watching(hosts: str, settings: AuthorizerSettings | None = None, **connection_options):
    async with connection(hosts, **connection_options) as conn:
        watcher = KafkaAclWatcher(conn, Authorizer(settings))
        await watcher.start()
        try:
            yield watcher
        finally:
            await watcher.stop()


def can(watcher: KafkaAclWatcher, principal: str, operation: AclOperation, resource_type: ResourceType,
        name: str, host: str = HOST) -> bool:
    return watcher.authorizer.authorize(principal, host, operation, resource_type, name)


# ------------------------------------------------ what the tool wrote before
def test_acls_written_by_kafka_decide_after_start(java_tools_available, zk_hosts, zk):
    kafka_acls(zk_hosts, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "alice-g")
    kafka_acls(zk_hosts, "--add", "--resource-pattern-type", "prefixed", "--allow-principal", "User:carol",
               "--operation", "Read", "--group", "carol-")
    kafka_acls(zk_hosts, "--add", "--allow-principal", "User:*", "--operation", "Read", "--topic", "*",
               "--deny-principal", "User:bob", "--deny-host", "10.0.0.66")
    # Kafka's own layout, in the test's chroot
    assert zk.exists("/kafka-acl/Group/alice-g") and zk.exists("/kafka-acl-extended/prefixed/Group/carol-")
    assert json.loads(zk.get("/kafka-acl/Group/alice-g")[0]) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}

    async def scenario():
        async with watching(zk_hosts) as watcher:
            assert (watcher.loaded, watcher.resource_count, watcher.acl_count) == (True, 3, 4)
            # the literal group ACL, DESCRIBE implied by READ, nothing for other groups or users
            assert can(watcher, "User:alice", READ, GROUP, "alice-g") is True
            assert can(watcher, "User:alice", DESCRIBE, GROUP, "alice-g") is True
            assert can(watcher, "User:alice", DELETE, GROUP, "alice-g") is False
            assert can(watcher, "User:alice", READ, GROUP, "alice-g2") is False
            assert can(watcher, "User:bob", READ, GROUP, "alice-g") is False
            # the prefixed group ACL
            assert can(watcher, "User:carol", READ, GROUP, "carol-1") is True
            assert can(watcher, "User:carol", READ, GROUP, "carol") is False
            # every topic for everyone, but bob from 10.0.0.66 is denied (only READ: DESCRIBE is implied still)
            assert can(watcher, "User:alice", READ, TOPIC, "any-topic") is True
            assert can(watcher, "User:bob", READ, TOPIC, "any-topic") is True
            assert can(watcher, "User:bob", READ, TOPIC, "any-topic", host="10.0.0.66") is False
            assert can(watcher, "User:bob", DESCRIBE, TOPIC, "any-topic", host="10.0.0.66") is True
            assert can(watcher, "User:alice", WRITE, TOPIC, "any-topic") is False
            # by resource type, for list filters
            assert watcher.authorizer.authorize_by_resource_type("User:carol", HOST, READ, GROUP) is True
            assert watcher.authorizer.authorize_by_resource_type("User:bob", HOST, READ, GROUP) is False
            assert watcher.authorizer.authorize_by_resource_type("User:bob", "10.0.0.66", READ, TOPIC) is False
    asyncio.run(scenario())


# ---------------------------------------------------- changes while running
def test_changes_while_running_and_paths_created_later(java_tools_available, zk_hosts, zk):
    async def scenario():
        async with watching(zk_hosts) as watcher:
            assert not zk.exists("/kafka-acl") and not zk.exists("/kafka-acl-changes")
            assert (watcher.loaded, watcher.resource_count) == (True, 0)
            assert can(watcher, "User:alice", READ, GROUP, "alice-g") is False

            await kafka_acls_async(zk_hosts, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                                   "--group", "alice-g", "--topic", "orders")
            await eventually(lambda: can(watcher, "User:alice", READ, GROUP, "alice-g"), "the literal ACL")
            assert can(watcher, "User:alice", READ, TOPIC, "orders") is True

            await kafka_acls_async(zk_hosts, "--add", "--resource-pattern-type", "prefixed", "--deny-principal",
                                   "User:alice", "--operation", "Read", "--group", "alice-")
            await eventually(lambda: not can(watcher, "User:alice", READ, GROUP, "alice-g"),
                             "the prefixed DENY (extended notification)")

            await kafka_acls_async(zk_hosts, "--remove", "--force", "--resource-pattern-type", "prefixed",
                                   "--group", "alice-")
            await eventually(lambda: can(watcher, "User:alice", READ, GROUP, "alice-g"), "the DENY's removal")
            await kafka_acls_async(zk_hosts, "--remove", "--force", "--allow-principal", "User:alice",
                                   "--operation", "Read", "--group", "alice-g")
            await eventually(lambda: not can(watcher, "User:alice", READ, GROUP, "alice-g"), "the ACL's removal")
            assert can(watcher, "User:alice", READ, TOPIC, "orders") is True
            assert watcher.authorizer.snapshot() == {ResourcePattern(TOPIC, "orders", PatternType.LITERAL): {
                AclEntry("User:alice", "*", READ, AclPermissionType.ALLOW)}}
            # one notification per resource changed: 2 + 1 + 1 + 1
            assert watcher.notifications_processed == 5
            assert watcher.reloads == 1  # everything after the start came from notifications
    asyncio.run(scenario())


# ------------------------------------------------ Kafka's own authorizer agrees
CHECKER = r"""
import java.io.*;
import java.net.InetAddress;
import java.util.*;
import kafka.security.authorizer.AclAuthorizer;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.resource.*;
import org.apache.kafka.common.security.auth.*;
import org.apache.kafka.common.utils.SecurityUtils;
import org.apache.kafka.server.authorizer.*;

/** Asks Kafka's AclAuthorizer (allow.everyone.if.no.acl.found false, then true) the questions on stdin:
 *  principal TAB host TAB operation TAB resourceType [TAB name]; answers "bool bool" per line. */
public class AclCheck {
    public static void main(String[] args) throws Exception {
        AclAuthorizer[] authorizers = {configured(args, "false"), configured(args, "true")};
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", -1);
            AuthorizableRequestContext context = context(SecurityUtils.parseKafkaPrincipal(f[0]),
                InetAddress.getByName(f[1]));
            AclOperation op = SecurityUtils.operation(f[2]);
            ResourceType type = SecurityUtils.resourceType(f[3]);
            StringBuilder answer = new StringBuilder();
            for (AclAuthorizer authorizer : authorizers) {
                AuthorizationResult result = f.length == 4
                    ? authorizer.authorizeByResourceType(context, op, type)
                    : authorizer.authorize(context, List.of(new Action(op,
                        new ResourcePattern(type, f[4], PatternType.LITERAL), 1, false, false))).get(0);
                answer.append(result == AuthorizationResult.ALLOWED).append(' ');
            }
            System.out.println(answer.toString().trim());
        }
        for (AclAuthorizer authorizer : authorizers) authorizer.close();
    }

    static AclAuthorizer configured(String[] args, String allowEveryone) {
        Map<String, Object> config = new HashMap<>();
        config.put("zookeeper.connect", args[0]);
        config.put("super.users", args[1]);
        config.put("allow.everyone.if.no.acl.found", allowEveryone);
        AclAuthorizer authorizer = new AclAuthorizer();
        authorizer.configure(config);
        return authorizer;
    }

    static AuthorizableRequestContext context(KafkaPrincipal principal, InetAddress host) {
        return new AuthorizableRequestContext() {
            public String listenerName() { return "SASL_PLAINTEXT"; }
            public SecurityProtocol securityProtocol() { return SecurityProtocol.SASL_PLAINTEXT; }
            public KafkaPrincipal principal() { return principal; }
            public InetAddress clientAddress() { return host; }
            public int requestType() { return 12; }
            public int requestVersion() { return 4; }
            public String clientId() { return "zkcoord-test"; }
            public int correlationId() { return 1; }
        };
    }
}
"""

SUPER_USERS = "User:admin;User:ops"
PRINCIPALS = ["User:alice", "User:bob", "User:carol", "User:dave", "User:admin", "User:mallory", "User:erin",
              "Group:alice"]
HOSTS = ["10.0.0.1", "10.0.0.2", "::1"]
OPERATIONS = [READ, DESCRIBE, DELETE, WRITE, AclOperation.ALTER, ALL]
RESOURCES = [(GROUP, n) for n in ("alice-g", "alice-secret-1", "alice-secret-ok-1", "alice-", "alice", "shared-g",
                                  "bob-g", "dave-g", "erin-x1", "other", "*", "")] + \
            [(TOPIC, n) for n in ("alice.t", "alice", "other-t", "*")] + [(CLUSTER, "kafka-cluster")]


def test_every_decision_equals_kafkas_own_authorizer(java_tools_available, zk_hosts, tmp_path: Path):
    # kafka-acls gives each resource named every principal x host x operation named
    kafka_acls(zk_hosts, "--add", "--allow-principal", "User:alice", "--allow-principal", "User:carol",
               "--operation", "Read", "--operation", "Describe", "--group", "alice-g", "--group", "shared-g")
    kafka_acls(zk_hosts, "--add", "--resource-pattern-type", "prefixed", "--allow-principal", "User:alice",
               "--operation", "Read", "--group", "alice-", "--group", "alice-secret-ok", "--topic", "alice.")
    kafka_acls(zk_hosts, "--add", "--resource-pattern-type", "prefixed", "--deny-principal", "User:alice",
               "--deny-host", "10.0.0.2", "--operation", "All", "--group", "alice-secret")
    kafka_acls(zk_hosts, "--add", "--allow-principal", "User:*", "--allow-host", "10.0.0.1", "--operation", "Read",
               "--topic", "*", "--deny-principal", "User:carol", "--deny-host", "10.0.0.2")
    kafka_acls(zk_hosts, "--add", "--allow-principal", "User:bob", "--allow-principal", "User:dave",
               "--allow-host", "0:0:0:0:0:0:0:1", "--operation", "Delete", "--group", "bob-g", "--group", "dave-g",
               "--deny-principal", "User:mallory")
    kafka_acls(zk_hosts, "--add", "--allow-principal", "User:mallory", "--operation", "Write", "--topic", "other-t",
               "--deny-principal", "User:*", "--deny-host", "10.0.0.2")
    # by resource type: erin's only allow is dominated by a prefixed deny from 10.0.0.2
    kafka_acls(zk_hosts, "--add", "--resource-pattern-type", "prefixed", "--allow-principal", "User:erin",
               "--operation", "Read", "--group", "erin-x", "--deny-principal", "User:erin", "--deny-host", "10.0.0.2")
    checker = tmp_path / "AclCheck.java"
    checker.write_text(CHECKER)

    questions = [(p, h, op, t, n) for p, h, op, (t, n) in itertools.product(PRINCIPALS, HOSTS, OPERATIONS, RESOURCES)]
    questions += [(p, h, op, t, None) for p, h, op, t in itertools.product(PRINCIPALS, HOSTS, OPERATIONS,
                                                                            (GROUP, TOPIC, CLUSTER))]
    lines = "".join("\t".join([p, h, op.kafka_name, t.kafka_name] + ([] if n is None else [n])) + "\n"
                    for p, h, op, t, n in questions)
    result = jt.run_tool(str(checker), zk_hosts, SUPER_USERS, stdin=lines, timeout_s=180)
    kafka_answers = [tuple(word == "true" for word in line.split()) for line in result.stdout.splitlines()]
    assert len(kafka_answers) == len(questions)

    async def scenario():
        settings = [AuthorizerSettings.from_properties(SUPER_USERS, allow) for allow in ("false", "true")]
        async with watching(zk_hosts, settings[0]) as watcher:
            assert watcher.resource_count == 11
            ours = []
            for p, h, op, t, n in questions:
                answer = []
                for setting in settings:
                    watcher.authorizer.configure(setting)
                    host = java_host_address(h)
                    answer.append(watcher.authorizer.authorize(p, host, op, t, n) if n is not None
                                  else watcher.authorizer.authorize_by_resource_type(p, host, op, t))
                ours.append(tuple(answer))
            return ours

    ours = asyncio.run(scenario())
    differences = [(q, k, o) for q, k, o in zip(questions, kafka_answers, ours) if k != o]
    assert differences == [], f"{len(differences)} of {len(questions)} decisions differ, e.g. {differences[:5]}"
    # the grid is not trivially uniform: both answers occur for both settings
    assert {a[0] for a in ours} == {True, False} and {a[1] for a in ours} == {True, False}


# ------------------------------------------------------ sessions (by hand)
def acl_json(principal: str, operation: str = "Read", permission: str = "Allow", host: str = "*") -> bytes:
    return json.dumps({"version": 1, "acls": [{"principal": principal, "permissionType": permission,
                                               "operation": operation, "host": host}]}).encode()


def notify(zk, resource: str) -> None:
    """A literal change notification, as LiteralAclChangeStore writes it."""
    zk.create("/kafka-acl-changes/acl_changes_", resource.encode(), sequence=True, makepath=True)


def test_a_new_session_reloads_everything(zk_hosts, zk, expire_session):
    zk.create("/kafka-acl/Group/g1", acl_json("User:alice"), makepath=True)

    async def scenario():
        async with watching(zk_hosts) as watcher:
            assert can(watcher, "User:alice", READ, GROUP, "g1") is True
            # a change whose notification was missed (no notification at all): only a reload can see it
            zk.create("/kafka-acl/Group/g2", acl_json("User:alice"))
            zk.delete("/kafka-acl/Group/g1")
            await asyncio.to_thread(expire_session, watcher._conn.client)
            await eventually(lambda: watcher.reloads == 2, "the reload after the new session")
            assert can(watcher, "User:alice", READ, GROUP, "g2") is True
            assert can(watcher, "User:alice", READ, GROUP, "g1") is False
            # and notifications are followed on the new session
            zk.set("/kafka-acl/Group/g2", acl_json("User:bob"))
            notify(zk, "GROUP:g2")
            await eventually(lambda: can(watcher, "User:bob", READ, GROUP, "g2"), "a change after the reload")
    asyncio.run(scenario())


def test_notifications_missed_while_disconnected_are_processed(services, zk_hosts, zk):
    chroot = zk_hosts[len(services.zookeeper):]
    proxy = CuttableProxy(services.zookeeper)
    notify(zk, "GROUP:g0")  # an old notification: processed before, never again

    async def scenario():
        events = []
        async with watching(proxy.hosts(chroot), events=events, session_timeout_ms=20_000) as watcher:
            proxy.cut()
            await eventually(lambda: "suspended" in [e.value for e in events], "SUSPENDED")
            zk.create("/kafka-acl/Group/g", acl_json("User:alice"), makepath=True)
            notify(zk, "GROUP:g")
            proxy.resume()
            await eventually(lambda: can(watcher, "User:alice", READ, GROUP, "g"), "the missed notification")
            assert [e.value for e in events] == ["connected", "suspended", "reconnected"]
            assert (watcher.reloads, watcher.notifications_processed) == (1, 1)
    try:
        asyncio.run(scenario())
    finally:
        proxy.close()


def test_a_corrupt_znode_is_logged_once_and_skipped(zk_hosts, zk, caplog):
    caplog.set_level(logging.INFO, logger="zkcoord.zk.kafka_acls")
    zk.create("/kafka-acl/Group/g", acl_json("User:alice"), makepath=True)
    zk.create("/kafka-acl/Group/broken", b"{not json", makepath=True)
    zk.create("/kafka-acl/GROUP/ignored", acl_json("User:alice"), makepath=True)  # Kafka reads Group only

    async def scenario():
        async with watching(zk_hosts) as watcher:
            assert watcher.corrupt_znodes == ("/kafka-acl/Group/broken",)
            assert watcher.resource_count == 1
            zk.set("/kafka-acl/Group/g", b'{"version":1,"acls":[{"principal":"alice"}]}')
            notify(zk, "GROUP:g")
            notify(zk, "GROUP:g")  # the same resource twice: one read, one warning
            notify(zk, "nonsense")  # not Type:name
            zk.set("/kafka-acl/Group/broken", acl_json("User:bob"))
            notify(zk, "GROUP:broken")
            await eventually(lambda: can(watcher, "User:bob", READ, GROUP, "broken"), "the repaired znode")
            assert can(watcher, "User:alice", READ, GROUP, "g") is True  # its last good ACLs
            assert watcher.corrupt_znodes == ("/kafka-acl/Group/g",)
            assert watcher.notifications_processed == 4
    asyncio.run(scenario())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sorted(warnings) == sorted([
        "Ignoring unknown ResourceType: GROUP (znode /kafka-acl/GROUP)",
        "/kafka-acl/Group/broken is not valid JSON (Expecting property name enclosed in double quotes: line 1 "
        "column 2 (char 1)); skipped it: ResourcePattern(resourceType=GROUP, name=broken, patternType=LITERAL) "
        "keeps the 0 ACL(s) read before",
        "ACL #0 of /kafka-acl/Group/g: expected a principal in the format principalType:principalName (such as "
        "User:alice), got 'alice'; skipped it: ResourcePattern(resourceType=GROUP, name=g, patternType=LITERAL) "
        "keeps the 1 ACL(s) read before",
        "error processing change notification nonsense from /kafka-acl-changes/acl_changes_0000000002: "
        "literal ACL change notification 'nonsense' is not ResourceType:ResourceName",
    ])
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert "/kafka-acl/Group/broken is readable again" in infos
    assert ("Processing Acl change notification for ResourcePattern(resourceType=GROUP, name=broken, "
            "patternType=LITERAL), versionedAcls : Set(User:bob has ALLOW permission for operations: READ from "
            "hosts: *), zkVersion : 1") in infos
