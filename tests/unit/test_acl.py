"""Kafka's AclAuthorizer decision (zkcoord.core.acl), case by case.

The decision cases are ported from Kafka 3.9's AuthorizerTest and
BaseAuthorizerTest (core/src/test/scala/unit/kafka/security/authorizer/),
the ones that apply to AclAuthorizer, with the same principals, hosts and
expected booleans; Kafka's ``addAcls`` / ``removeAcls`` become
:meth:`Authorizer.update` with the resource's ACLs plus or minus the
entries. The JSON cases are AclEntryTest's, and Kafka's change
notification formats as ZkData.scala writes them.
"""

from __future__ import annotations

import re
import uuid

import pytest

from zkcoord.core.acl import (
    WILDCARD_HOST, WILDCARD_PRINCIPAL, AclEntry, AclOperation, AclPermissionType, Authorizer, AuthorizerSettings,
    PatternType, ResourcePattern, ResourceType, authorization_error, java_host_address, parse_super_users,
)
from zkcoord.core.acl_records import acls_to_json, parse_acls_json, parse_extended_change, parse_literal_change
from zkcoord.core.errors import ErrorCode
from zkcoord.errors import ConfigError

READ, WRITE, DESCRIBE, ALTER, DELETE, ALL = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE,
                                             AclOperation.ALTER, AclOperation.DELETE, AclOperation.ALL)
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                           ResourceType.TRANSACTIONAL_ID)
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED

# BaseAuthorizerTest's fixture: super users, alice at 192.168.0.1, a random topic.
SUPER_USERS = "User:superuser1; User:superuser2"
ALICE = "User:alice"
ALICE_HOST = "192.168.0.1"

ALLOW_READ = AclEntry(WILDCARD_PRINCIPAL, WILDCARD_HOST, READ, ALLOW)
ALLOW_WRITE = AclEntry(WILDCARD_PRINCIPAL, WILDCARD_HOST, WRITE, ALLOW)
DENY_READ = AclEntry(WILDCARD_PRINCIPAL, WILDCARD_HOST, READ, DENY)
WILDCARD_TOPIC = ResourcePattern(TOPIC, "*", LITERAL)
PREFIXED_FOO = ResourcePattern(TOPIC, "foo", PREFIXED)
CLUSTER_RESOURCE = ResourcePattern(CLUSTER, "kafka-cluster", LITERAL)


def ace(principal: str, host: str, operation: AclOperation, permission: AclPermissionType) -> AclEntry:
    return AclEntry(principal, host, operation, permission)


def add(authorizer: Authorizer, pattern: ResourcePattern, *entries: AclEntry) -> None:
    authorizer.update(pattern, authorizer.acls(pattern) | set(entries))


def remove(authorizer: Authorizer, pattern: ResourcePattern, *entries: AclEntry) -> None:
    authorizer.update(pattern, authorizer.acls(pattern) - set(entries) if entries else ())


@pytest.fixture
def authorizer() -> Authorizer:
    return Authorizer(AuthorizerSettings.from_properties(super_users=SUPER_USERS))


@pytest.fixture
def topic() -> ResourcePattern:
    return ResourcePattern(TOPIC, f"foo-{uuid.uuid4()}", LITERAL)


def allowed(authorizer: Authorizer, principal: str, host: str, operation: AclOperation,
            pattern: ResourcePattern) -> bool:
    assert pattern.pattern_type is LITERAL
    return authorizer.authorize(principal, host, operation, pattern.resource_type, pattern.name)


# ------------------------------------------------------- AuthorizerTest
def test_empty_resource_name(authorizer):
    group = ResourcePattern(GROUP, "", LITERAL)
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, group) is False
    add(authorizer, ResourcePattern(GROUP, "*", LITERAL), ALLOW_READ)
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, group) is True


def test_topic_acl(authorizer, topic):
    user1, user2, user3 = "User:alice", "User:rob", "User:batman"
    host1, host2 = "192.168.1.1", "192.168.1.2"
    add(authorizer, topic,
        ace(user1, host1, READ, ALLOW), ace(user1, host2, READ, ALLOW),  # READ from host1 and host2
        ace(user1, host1, READ, DENY),  # but not from host1
        ace(user1, host1, WRITE, ALLOW),  # WRITE from host1 only
        ace(user1, WILDCARD_HOST, DESCRIBE, ALLOW),
        ace(user2, WILDCARD_HOST, READ, ALLOW),
        ace(user3, WILDCARD_HOST, WRITE, ALLOW))
    assert allowed(authorizer, user1, host2, READ, topic) is True
    assert allowed(authorizer, user1, host1, READ, topic) is False
    assert allowed(authorizer, user1, host1, WRITE, topic) is True
    assert allowed(authorizer, user1, host2, WRITE, topic) is False
    assert allowed(authorizer, user1, host1, DESCRIBE, topic) is True
    assert allowed(authorizer, user1, host2, DESCRIBE, topic) is True
    assert allowed(authorizer, user1, host1, ALTER, topic) is False
    assert allowed(authorizer, user1, host2, ALTER, topic) is False
    # READ or WRITE implies DESCRIBE
    assert allowed(authorizer, user2, host1, DESCRIBE, topic) is True
    assert allowed(authorizer, user3, host1, DESCRIBE, topic) is True
    assert allowed(authorizer, user2, host1, READ, topic) is True
    assert allowed(authorizer, user3, host1, WRITE, topic) is True


def test_deny_takes_precedence(authorizer, topic):
    host = "192.168.2.1"
    add(authorizer, topic, ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, ALL, ALLOW), ace(ALICE, host, ALL, DENY))
    assert allowed(authorizer, ALICE, host, READ, topic) is False


def test_allow_all_access(authorizer, topic):
    add(authorizer, topic, ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, ALL, ALLOW))
    assert allowed(authorizer, "User:random", "192.0.4.4", READ, topic) is True


def test_super_user_has_access(authorizer, topic):
    add(authorizer, topic, ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, ALL, DENY))
    assert allowed(authorizer, "User:superuser1", "192.0.4.4", READ, topic) is True
    assert allowed(authorizer, "User:superuser2", "192.0.4.4", READ, topic) is True
    assert allowed(authorizer, "User:superuser3", "192.0.4.4", READ, topic) is False
    # a principal type is part of the principal
    assert allowed(authorizer, "Group:superuser1", "192.0.4.4", READ, topic) is False


def test_wildcard_acls(authorizer, topic):
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is False  # no ACLs: fail closed
    host1 = "192.168.3.1"
    add(authorizer, WILDCARD_TOPIC, ace(ALICE, host1, READ, ALLOW))
    assert allowed(authorizer, ALICE, host1, READ, topic) is True
    add(authorizer, topic, ace(ALICE, host1, WRITE, ALLOW))  # WRITE allowed on the topic itself...
    add(authorizer, WILDCARD_TOPIC, ace(ALICE, host1, WRITE, DENY))  # ...denied on every topic
    assert allowed(authorizer, ALICE, host1, WRITE, topic) is False


def test_no_acl_found(authorizer, topic):
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is False


@pytest.mark.parametrize("value", ["true", " true", "TRUE ", True])
def test_no_acl_found_override(topic, value):
    authorizer = Authorizer(AuthorizerSettings.from_properties(" " + SUPER_USERS + " ", value))
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is True
    # ...but only while the resource has no ACLs at all
    add(authorizer, topic, ace("User:bob", WILDCARD_HOST, READ, ALLOW))
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is False
    assert allowed(authorizer, "User:superuser2", ALICE_HOST, READ, topic) is True


VALID_OPS = [op for op in AclOperation if op not in (AclOperation.ANY, AclOperation.UNKNOWN)]


@pytest.mark.parametrize("parent, implied", [
    (ALL, set(VALID_OPS)),
    (READ, {DESCRIBE}),
    (WRITE, {DESCRIBE}),
    (DELETE, {DESCRIBE}),
    (ALTER, {DESCRIBE}),
    (AclOperation.ALTER_CONFIGS, {AclOperation.DESCRIBE_CONFIGS}),
    (DESCRIBE, set()),
    (AclOperation.DESCRIBE_CONFIGS, set()),
    (AclOperation.CREATE, set()),
])
def test_implications_of_allow(authorizer, parent, implied):
    add(authorizer, CLUSTER_RESOURCE, ace(ALICE, WILDCARD_HOST, parent, ALLOW))
    for op in VALID_OPS:
        expected = op in implied or op is parent
        assert allowed(authorizer, ALICE, "192.168.3.1", op, CLUSTER_RESOURCE) is expected, op


@pytest.mark.parametrize("parent, denied", [
    (ALL, set(VALID_OPS)),
    (DESCRIBE, set()),
    (AclOperation.DESCRIBE_CONFIGS, set()),
    (READ, set()),
])
def test_implications_of_deny(authorizer, parent, denied):
    add(authorizer, CLUSTER_RESOURCE, ace(ALICE, WILDCARD_HOST, parent, DENY), ace(ALICE, WILDCARD_HOST, ALL, ALLOW))
    for op in VALID_OPS:
        expected = not (op in denied or op is parent)
        assert allowed(authorizer, ALICE, "192.168.3.1", op, CLUSTER_RESOURCE) is expected, op


def test_access_allowed_by_wildcard_resource(authorizer, topic):
    add(authorizer, WILDCARD_TOPIC, ALLOW_READ)
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is True


def test_access_allowed_by_prefixed_resource(authorizer, topic):
    add(authorizer, PREFIXED_FOO, ALLOW_READ)
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is True


def test_delete_acl_on_wildcard_and_prefixed_resource(authorizer):
    for pattern in (WILDCARD_TOPIC, PREFIXED_FOO):
        add(authorizer, pattern, ALLOW_READ, ALLOW_WRITE)
        remove(authorizer, pattern, ALLOW_READ)
        assert authorizer.acls(pattern) == {ALLOW_WRITE}
        remove(authorizer, pattern)
        assert authorizer.acls(pattern) == frozenset()
    assert authorizer.snapshot() == {}
    assert authorizer.resource_count == 0


def test_add_acls_is_additive_and_per_pattern(authorizer, topic):
    for pattern in (topic, WILDCARD_TOPIC, PREFIXED_FOO):
        add(authorizer, pattern, ALLOW_READ, ALLOW_WRITE)
        add(authorizer, pattern, ALLOW_WRITE, DENY_READ)
        assert authorizer.acls(pattern) == {ALLOW_READ, ALLOW_WRITE, DENY_READ}
        others = {topic, WILDCARD_TOPIC, PREFIXED_FOO} - {pattern}
        assert all(authorizer.acls(other) == frozenset() for other in others)
        remove(authorizer, pattern)


def test_authorize_with_prefixed_resource(authorizer, topic):
    for name, pattern_type in [("a_other", LITERAL), ("a_other", PREFIXED), (f"foo-{uuid.uuid4()}", PREFIXED),
                               (f"foo-{uuid.uuid4()}", PREFIXED), (f"foo-{uuid.uuid4()}-zzz", PREFIXED),
                               (f"fooo-{uuid.uuid4()}", PREFIXED), (f"fo-{uuid.uuid4()}", PREFIXED),
                               (f"fop-{uuid.uuid4()}", PREFIXED), (f"fon-{uuid.uuid4()}", PREFIXED),
                               ("fon-", PREFIXED), ("z_other", PREFIXED), ("z_other", LITERAL)]:
        add(authorizer, ResourcePattern(TOPIC, name, pattern_type), DENY_READ)
    add(authorizer, PREFIXED_FOO, ALLOW_READ)
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is True


def test_single_character_resource_acls(authorizer):
    add(authorizer, ResourcePattern(TOPIC, "f", LITERAL), ALLOW_READ)
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, ResourcePattern(TOPIC, "f", LITERAL)) is True
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, ResourcePattern(TOPIC, "foo", LITERAL)) is False
    add(authorizer, ResourcePattern(TOPIC, "_", PREFIXED), ALLOW_READ)
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, ResourcePattern(TOPIC, "_foo", LITERAL)) is True
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, ResourcePattern(TOPIC, "_", LITERAL)) is True
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, ResourcePattern(TOPIC, "foo_", LITERAL)) is False


def test_prefixed_deny_beats_literal_allow(authorizer):
    add(authorizer, ResourcePattern(GROUP, "alice-g", LITERAL), ace(ALICE, WILDCARD_HOST, READ, ALLOW))
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, ResourcePattern(GROUP, "alice-g", LITERAL)) is True
    add(authorizer, ResourcePattern(GROUP, "alice", PREFIXED), ace(WILDCARD_PRINCIPAL, ALICE_HOST, READ, DENY))
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, ResourcePattern(GROUP, "alice-g", LITERAL)) is False
    assert allowed(authorizer, ALICE, "10.0.0.9", READ, ResourcePattern(GROUP, "alice-g", LITERAL)) is True
    # resource types are separate: a group ACL says nothing about a topic of that name
    assert allowed(authorizer, ALICE, "10.0.0.9", READ, ResourcePattern(TOPIC, "alice-g", LITERAL)) is False


def test_unknown_operation_counts_as_an_acl_but_never_matches(topic):
    """AclEntry.fromBytes keeps an entry with an operation it does not know
    as UNKNOWN: the resource has ACLs, so allow.everyone does not apply."""
    authorizer = Authorizer(AuthorizerSettings(allow_everyone_if_no_acl_found=True))
    acls = parse_acls_json(b'{"version":1,"acls":[{"principal":"User:*","permissionType":"Allow",'
                           b'"operation":"Teleport","host":"*"}]}')
    assert acls == {AclEntry(WILDCARD_PRINCIPAL, "*", AclOperation.UNKNOWN, ALLOW)}
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is True
    authorizer.update(topic, acls)
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is False


def test_authorize_refuses_filter_operations_and_types(authorizer):
    with pytest.raises(ValueError, match="operation ANY"):
        authorizer.authorize(ALICE, ALICE_HOST, AclOperation.ANY, TOPIC, "t")
    with pytest.raises(ValueError, match="resource type UNKNOWN"):
        authorizer.authorize_by_resource_type(ALICE, ALICE_HOST, READ, ResourceType.UNKNOWN)
    with pytest.raises(ValueError, match="must not be MATCH"):
        ResourcePattern(TOPIC, "t", PatternType.MATCH)
    with pytest.raises(ValueError, match="unknown"):
        authorizer.update(ResourcePattern(ResourceType.UNKNOWN, "t", LITERAL), [ALLOW_READ])


# ----------------------------------------- BaseAuthorizerTest: by resource type
USER1, USER2 = "User:user1", "User:user2"
HOST1, HOST2 = "192.168.1.1", "192.168.1.2"


def by_type(authorizer: Authorizer, principal: str, host: str, operation: AclOperation,
            resource_type: ResourceType) -> bool:
    return authorizer.authorize_by_resource_type(principal, host, operation, resource_type)


def test_by_type_multiple_add_and_remove(authorizer):
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    deny_read, allow_read = ace(USER1, HOST1, READ, DENY), ace(USER1, HOST1, READ, ALLOW)
    for _ in range(10):
        assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False
        add(authorizer, resource1, allow_read)
        assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is True
        for _ in range(10):
            add(authorizer, resource1, deny_read)
            assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False
            remove(authorizer, resource1, deny_read)
            add(authorizer, resource1, allow_read)
            assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is True
        remove(authorizer, resource1, allow_read)
        assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False


def test_by_type_unrelated_deny_does_not_dominate_allow(authorizer):
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    resource2 = ResourcePattern(TOPIC, f"sb2{uuid.uuid4()}", LITERAL)
    resource3 = ResourcePattern(GROUP, "s", PREFIXED)
    add(authorizer, resource1, ace(USER1, HOST1, READ, DENY), ace(USER2, HOST1, READ, DENY),
        ace(USER1, HOST2, WRITE, DENY), ace(USER2, HOST2, READ, DENY), ace(USER1, HOST2, READ, ALLOW))
    add(authorizer, resource2, ace(USER1, HOST2, READ, DENY))
    add(authorizer, resource3, ace(USER1, HOST2, READ, DENY))
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False
    assert by_type(authorizer, USER1, HOST1, READ, GROUP) is False
    assert by_type(authorizer, USER1, HOST1, READ, TRANSACTIONAL_ID) is False
    assert by_type(authorizer, USER1, HOST1, READ, CLUSTER) is False
    assert by_type(authorizer, USER1, HOST2, READ, TOPIC) is True


def test_by_type_deny_takes_precedence(authorizer):
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    add(authorizer, resource1, ace(USER1, HOST1, WRITE, ALLOW))
    assert by_type(authorizer, USER1, HOST1, WRITE, TOPIC) is True
    add(authorizer, resource1, ace(USER1, HOST1, WRITE, DENY))
    assert by_type(authorizer, USER1, HOST1, WRITE, TOPIC) is False


def test_by_type_prefixed_deny_dominates(authorizer):
    allow, deny = ace(USER1, HOST1, READ, ALLOW), ace(USER1, HOST1, READ, DENY)
    steps = [("abcde", allow, True), ("abcd", deny, False), ("abc", allow, True), ("a", deny, False),
             ("ab", allow, False)]
    for name, entry, expected in steps:
        add(authorizer, ResourcePattern(GROUP, name, PREFIXED), entry)
        assert by_type(authorizer, USER1, HOST1, READ, GROUP) is expected, name


def test_by_type_wildcard_deny_dominates(authorizer):
    allow, deny = ace(USER1, HOST1, WRITE, ALLOW), ace(USER1, HOST1, WRITE, DENY)
    wildcard = ResourcePattern(GROUP, "*", LITERAL)
    add(authorizer, ResourcePattern(GROUP, "hello", PREFIXED), allow)
    assert by_type(authorizer, USER1, HOST1, WRITE, GROUP) is True
    add(authorizer, wildcard, deny)
    assert by_type(authorizer, USER1, HOST1, WRITE, GROUP) is False
    add(authorizer, wildcard, allow)
    assert by_type(authorizer, USER1, HOST1, WRITE, GROUP) is False
    add(authorizer, ResourcePattern(GROUP, "aloha", LITERAL), allow)
    assert by_type(authorizer, USER1, HOST1, WRITE, GROUP) is False


def test_by_type_with_all_operation(authorizer):
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False
    add(authorizer, resource1, ace(USER1, HOST1, WRITE, DENY), ace(USER1, HOST1, ALL, ALLOW))
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is True
    add(authorizer, resource1, ace(USER1, HOST1, ALL, DENY))
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False


def test_by_type_with_all_hosts(authorizer):
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    resource2 = ResourcePattern(TOPIC, f"sb2{uuid.uuid4()}", LITERAL)
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False
    add(authorizer, resource1, ace(USER1, HOST1, READ, ALLOW))
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is True
    add(authorizer, resource1, ace(USER1, WILDCARD_HOST, READ, DENY))
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False
    add(authorizer, resource2, ace(USER1, HOST1, READ, DENY))
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False
    assert by_type(authorizer, USER1, HOST2, READ, TOPIC) is False
    add(authorizer, resource2, ace(USER1, WILDCARD_HOST, READ, ALLOW))
    assert by_type(authorizer, USER1, HOST2, READ, TOPIC) is True
    add(authorizer, resource2, ace(USER1, WILDCARD_HOST, READ, DENY))
    assert by_type(authorizer, USER1, HOST2, READ, TOPIC) is False


def test_by_type_with_all_principals(authorizer):
    resource1 = ResourcePattern(TOPIC, f"sb1{uuid.uuid4()}", LITERAL)
    resource2 = ResourcePattern(TOPIC, f"sb2{uuid.uuid4()}", LITERAL)
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False
    add(authorizer, resource1, ace(USER1, HOST1, READ, ALLOW))
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is True
    add(authorizer, resource1, ace(WILDCARD_PRINCIPAL, HOST1, READ, DENY))
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False
    add(authorizer, resource2, ace(USER1, HOST1, READ, DENY))
    assert by_type(authorizer, USER1, HOST1, READ, TOPIC) is False
    assert by_type(authorizer, USER2, HOST1, READ, TOPIC) is False
    add(authorizer, resource2, ace(WILDCARD_PRINCIPAL, HOST1, READ, ALLOW))
    assert by_type(authorizer, USER2, HOST1, READ, TOPIC) is True
    add(authorizer, resource2, ace(WILDCARD_PRINCIPAL, HOST1, READ, DENY))
    assert by_type(authorizer, USER2, HOST1, READ, TOPIC) is False


def test_by_type_super_user_has_access(authorizer):
    deny_all = ace(WILDCARD_PRINCIPAL, WILDCARD_HOST, ALL, DENY)
    for resource_type in (TOPIC, CLUSTER, GROUP, TRANSACTIONAL_ID):
        add(authorizer, ResourcePattern(resource_type, "*", LITERAL), deny_all)
    for resource_type in (TOPIC, CLUSTER, GROUP, TRANSACTIONAL_ID):
        assert by_type(authorizer, "User:superuser1", "192.0.4.4", READ, resource_type) is True
        assert by_type(authorizer, ALICE, "192.0.4.4", READ, resource_type) is False


def test_by_type_no_acl_found_override():
    authorizer = Authorizer(AuthorizerSettings.from_properties(SUPER_USERS, "true"))
    assert by_type(authorizer, ALICE, ALICE_HOST, READ, TOPIC) is True
    assert by_type(authorizer, ALICE, ALICE_HOST, WRITE, TOPIC) is True
    # only a DENY on the wildcard resource refuses then
    add(authorizer, WILDCARD_TOPIC, ace(ALICE, WILDCARD_HOST, READ, DENY))
    assert by_type(authorizer, ALICE, ALICE_HOST, READ, TOPIC) is False
    assert by_type(authorizer, ALICE, ALICE_HOST, WRITE, TOPIC) is True


def test_by_type_counts_no_implied_operation(authorizer):
    """authorizeByResourceType matches the operation itself or All: READ on
    some group does not make DESCRIBE by type true (authorize() says yes)."""
    add(authorizer, ResourcePattern(GROUP, "alice-", PREFIXED), ace(ALICE, WILDCARD_HOST, READ, ALLOW))
    assert by_type(authorizer, ALICE, ALICE_HOST, READ, GROUP) is True
    assert by_type(authorizer, ALICE, ALICE_HOST, DESCRIBE, GROUP) is False
    assert authorizer.authorize(ALICE, ALICE_HOST, DESCRIBE, GROUP, "alice-g") is True


# --------------------------------------------------------- cache and version
def test_cache_follows_every_change(authorizer, topic):
    start = authorizer.version
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is False
    assert authorizer.update(topic, [ALLOW_READ]) is True
    assert authorizer.version == start + 1
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is True
    assert authorizer.update(topic, [ALLOW_READ]) is False  # same ACLs: no change
    assert authorizer.version == start + 1
    authorizer.configure(AuthorizerSettings(frozenset({ALICE})))
    assert authorizer.version == start + 2
    authorizer.update(topic, [DENY_READ])
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is True  # now a super user
    authorizer.configure(AuthorizerSettings())
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is False
    assert authorizer.replace_all({}) is True
    assert authorizer.version == start + 5
    assert allowed(authorizer, ALICE, ALICE_HOST, READ, topic) is False


def test_cache_is_bounded(topic):
    authorizer = Authorizer(cache_max_entries=3)
    authorizer.update(WILDCARD_TOPIC, [ALLOW_READ])
    for i in range(10):
        assert authorizer.authorize(f"User:u{i}", ALICE_HOST, READ, TOPIC, topic.name) is True
        assert len(authorizer._cache) <= 3


def test_replace_all_swaps_everything(authorizer):
    group = ResourcePattern(GROUP, "alice-", PREFIXED)
    authorizer.update(WILDCARD_TOPIC, [ALLOW_READ])
    version = authorizer.version
    assert authorizer.replace_all({group: [ace(ALICE, WILDCARD_HOST, READ, ALLOW)], PREFIXED_FOO: []}) is True
    assert authorizer.snapshot() == {group: {ace(ALICE, WILDCARD_HOST, READ, ALLOW)}}
    assert (authorizer.resource_count, authorizer.acl_count) == (1, 1)
    assert authorizer.authorize(ALICE, ALICE_HOST, READ, TOPIC, "t") is False
    assert authorizer.authorize(ALICE, ALICE_HOST, READ, GROUP, "alice-1") is True
    assert authorizer.authorize_by_resource_type(ALICE, ALICE_HOST, READ, TOPIC) is False
    assert authorizer.authorize_by_resource_type(ALICE, ALICE_HOST, READ, GROUP) is True
    assert authorizer.replace_all({group: [ace(ALICE, WILDCARD_HOST, READ, ALLOW)]}) is False
    assert authorizer.version == version + 1


def test_prefix_lengths_follow_removals(authorizer):
    short, long = ResourcePattern(GROUP, "a", PREFIXED), ResourcePattern(GROUP, "abc", PREFIXED)
    authorizer.update(short, [ALLOW_READ])
    authorizer.update(long, [DENY_READ])
    assert authorizer.authorize(ALICE, ALICE_HOST, READ, GROUP, "abcd") is False
    assert authorizer.authorize(ALICE, ALICE_HOST, READ, GROUP, "abx") is True
    authorizer.update(long, [])
    assert authorizer.authorize(ALICE, ALICE_HOST, READ, GROUP, "abcd") is True
    authorizer.update(short, [])
    assert authorizer.authorize(ALICE, ALICE_HOST, READ, GROUP, "abcd") is False
    assert authorizer._probe_lengths[GROUP] == ()


# ------------------------------------------------------------------ formats
ACL_JSON = b"""{"version": 1, "acls": [{"host": "host1","permissionType": "Deny","operation": "READ",
    "principal": "User:alice"  },
    {  "host":  "*" ,  "permissionType": "Allow",  "operation":  "Read", "principal": "User:bob"  },
    {  "host": "host1",  "permissionType": "Deny",  "operation":   "Read" ,  "principal": "User:bob"}]}"""


def test_acl_json_conversion():
    expected = {ace("User:alice", "host1", READ, DENY), ace("User:bob", "*", READ, ALLOW),
                ace("User:bob", "host1", READ, DENY)}
    assert parse_acls_json(ACL_JSON) == expected
    assert parse_acls_json(acls_to_json(expected)) == expected
    assert acls_to_json([ace("User:alice", "*", AclOperation.DESCRIBE_CONFIGS, ALLOW)]) == (
        b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
        b'"operation":"DescribeConfigs","host":"*"}]}')
    assert parse_acls_json(b"") == frozenset()


@pytest.mark.parametrize("data, message", [
    (b"{not json", "/kafka-acl/Group/g is not valid JSON"),
    (b"[]", "/kafka-acl/Group/g is not a JSON object"),
    (b'{"version":2,"acls":[]}', "/kafka-acl/Group/g has version 2; Kafka's ACL format is version 1"),
    (b'{"version":"1","acls":[]}', "has version '1'"),
    (b'{"version":1}', 'has no "acls" array'),
    (b'{"version":1,"acls":[{"principal":"alice","permissionType":"Allow","operation":"Read","host":"*"}]}',
     "ACL #0 of /kafka-acl/Group/g: expected a principal in the format principalType:principalName"),
    (b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Read"}]}',
     "ACL #0 of /kafka-acl/Group/g has no text field 'host'"),
])
def test_malformed_acl_json(data, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_acls_json(data, "/kafka-acl/Group/g")


def test_unknown_names_become_unknown():
    acls = parse_acls_json(b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Maybe",'
                           b'"operation":"read","host":"*"},{"principal":"User:a","permissionType":"ALLOW",'
                           b'"operation":"CLUSTERACTION","host":"*"}]}')
    assert acls == {ace("User:a", "*", READ, AclPermissionType.UNKNOWN),
                    ace("User:a", "*", AclOperation.CLUSTER_ACTION, ALLOW)}


def test_kafka_names():
    assert [str(op) for op in VALID_OPS] == [
        "All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
        "AlterConfigs", "IdempotentWrite", "CreateTokens", "DescribeTokens"]
    assert [str(t) for t in ResourceType] == ["Unknown", "Any", "Topic", "Group", "Cluster", "TransactionalId",
                                              "DelegationToken", "User"]
    assert [str(p) for p in PatternType] == ["UNKNOWN", "ANY", "MATCH", "LITERAL", "PREFIXED"]
    assert [op.code for op in AclOperation] == list(range(15))
    assert ResourceType.parse("TransactionalId") is TRANSACTIONAL_ID
    assert ResourceType.parse("TRANSACTIONALID") is TRANSACTIONAL_ID
    assert ResourceType.parse("transactional_id") is ResourceType.UNKNOWN
    assert ResourceType.from_enum_name("transactional_id") is TRANSACTIONAL_ID
    assert ResourceType.from_enum_name("TransactionalId") is ResourceType.UNKNOWN
    assert PatternType.parse("PREFIXED") is PREFIXED
    assert PatternType.parse("Prefixed") is PatternType.UNKNOWN
    assert str(ace("User:alice", "*", READ, ALLOW)) == (
        "User:alice has ALLOW permission for operations: READ from hosts: *")
    assert str(ResourcePattern(GROUP, "g", LITERAL)) == (
        "ResourcePattern(resourceType=GROUP, name=g, patternType=LITERAL)")


def test_change_notifications():
    # LiteralAclChangeStore.encode writes the enum name: GROUP:alice-g
    assert parse_literal_change(b"GROUP:alice-g") == ResourcePattern(GROUP, "alice-g", LITERAL)
    assert parse_literal_change(b"Group:a:b") == ResourcePattern(GROUP, "a:b", LITERAL)
    assert parse_literal_change(b"Topic:") == ResourcePattern(TOPIC, "", LITERAL)
    assert parse_literal_change(b"Nonsense:x") == ResourcePattern(ResourceType.UNKNOWN, "x", LITERAL)
    with pytest.raises(ValueError, match="literal ACL change notification 'GROUP' is not ResourceType:ResourceName"):
        parse_literal_change(b"GROUP")
    assert parse_extended_change(
        b'{"version":1,"resourceType":"GROUP","name":"alice-","patternType":"PREFIXED"}'
    ) == ResourcePattern(GROUP, "alice-", PREFIXED)
    assert parse_extended_change(
        b'{"version":1,"resourceType":"TOPIC","name":"t","patternType":"Prefixed"}'
    ) == ResourcePattern(TOPIC, "t", PatternType.UNKNOWN)
    with pytest.raises(ValueError, match="has version 2"):
        parse_extended_change(b'{"version":2,"resourceType":"GROUP","name":"a","patternType":"PREFIXED"}')
    with pytest.raises(ValueError, match="must not be MATCH"):
        parse_extended_change(b'{"version":1,"resourceType":"GROUP","name":"a","patternType":"MATCH"}')
    with pytest.raises(ValueError, match="has no text field 'name'"):
        parse_extended_change(b'{"version":1,"resourceType":"GROUP","patternType":"PREFIXED"}')
    with pytest.raises(ValueError, match="is not valid JSON"):
        parse_extended_change(b"GROUP:x")


def test_super_users_text():
    assert parse_super_users("User:a;User:b;") == {"User:a", "User:b"}
    assert parse_super_users(" User:superuser1; User:superuser2 ") == {"User:superuser1", "User:superuser2"}
    assert parse_super_users("") == frozenset()
    assert parse_super_users(None) == frozenset()
    with pytest.raises(ConfigError, match=r"super.users: 'admin' is not a principal"):
        parse_super_users("User:a;admin")
    with pytest.raises(ConfigError, match=r"super.users: '' is not a principal"):
        parse_super_users("User:a;;User:b")
    with pytest.raises(ConfigError, match="allow.everyone.if.no.acl.found: 'yes' is not true or false"):
        AuthorizerSettings.from_properties(allow_everyone_if_no_acl_found="yes")


def test_java_host_address():
    assert java_host_address("192.168.0.1") == "192.168.0.1"
    assert java_host_address("::1") == "0:0:0:0:0:0:0:1"
    assert java_host_address("2001:db8::ff00:42:8329") == "2001:db8:0:0:0:ff00:42:8329"
    assert java_host_address("::ffff:10.1.2.3") == "10.1.2.3"
    assert java_host_address("fe80::1%eth0") == "fe80:0:0:0:0:0:0:1%eth0"


def test_authorization_errors():
    assert authorization_error(GROUP) is ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert authorization_error(TOPIC) is ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert authorization_error(CLUSTER) is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(ValueError):
        authorization_error(ResourceType.USER)
