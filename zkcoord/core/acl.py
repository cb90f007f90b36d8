"""Kafka's ACL model and AclAuthorizer's decision, pure.

This module owns what Kafka 3.9's ``AclAuthorizer`` (ZooKeeper mode,
``core/src/main/scala/kafka/security/authorizer/AclAuthorizer.scala``)
decides, on ACLs handed to it: the enums of operations, permission types,
resource types and pattern types with Kafka's names; :class:`AclEntry` and
:class:`ResourcePattern`; and :class:`Authorizer`, the decision. What
Kafka writes in ZooKeeper is decoded by :mod:`zkcoord.core.acl_records`;
:mod:`zkcoord.zk.kafka_acls` feeds the result here.

Rules of the decision (:meth:`Authorizer.authorize`, ``authorizeAction``):

1. A super user (``super.users``) is allowed everything.
2. The ACLs that apply to resource (type T, name N) are those of the
   literal pattern (T, N), of the wildcard literal (T, ``*``) and of every
   prefixed pattern (T, P) where N starts with P. None at all: allowed iff
   ``allow.everyone.if.no.acl.found``.
3. An ACL matches when its principal is the caller's or ``User:*``, its
   host the caller's IP text or ``*``, and its operation the one asked or
   ``All``. Any matching DENY refuses.
4. Otherwise a matching ALLOW allows. ALLOW of Read, Write, Delete or
   Alter also allows Describe; ALLOW of AlterConfigs allows
   DescribeConfigs. DENY implies nothing.

:meth:`Authorizer.authorize_by_resource_type` is ``authorizeByResourceType``
(used to filter lists): whether the caller may do the operation on at least
one resource of the type, where no implied operations count.

Kafka's details kept on purpose:

* Principals are ``Type:name`` text (split on the first ``:``), compared as
  text, which is what comparing KafkaPrincipal type and name amounts to.
  Hosts are compared as text: the caller's host is its IP address as Java's
  ``InetAddress.getHostAddress()`` prints it (:func:`java_host_address`).
* An ACL whose operation or permission type Kafka does not know is kept
  as ``UNKNOWN`` (``AclEntry.fromBytes`` does): it never matches, but the
  resource still has ACLs, so rule 2's "none at all" does not apply.
* Invalid JSON in an ACL znode is a ValueError here, where Kafka's
  ``fromBytes`` reads it as "no ACLs"; the watcher keeps the resource's last
  good ACLs instead, as Kafka does for every other unreadable znode.

Speed: :meth:`Authorizer.authorize` answers from a bounded cache keyed by
its arguments; the cache is emptied whenever ACLs or settings change
(:attr:`Authorizer.version` counts the changes). A miss probes only the
prefix lengths that prefixed ACLs of the type have, not every prefix.
The class is not thread-safe: update and ask from one thread (the event
loop).
"""

from __future__ import annotations

import enum
import ipaddress
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from zkcoord.core.errors import ErrorCode
from zkcoord.errors import ConfigError

__all__ = [
    "AclOperation", "AclPermissionType", "ResourceType", "PatternType", "AclEntry", "ResourcePattern",
    "AuthorizerSettings", "Authorizer", "WILDCARD_PRINCIPAL", "WILDCARD_HOST", "WILDCARD_RESOURCE",
    "parse_principal", "parse_super_users", "java_host_address", "authorization_error",
]

WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
WILDCARD_RESOURCE = "*"
DEFAULT_CACHE_MAX_ENTRIES = 100_000


def _pascal(enum_name: str) -> str:
    """Kafka's ``SecurityUtils.toPascalCase``: ``DESCRIBE_CONFIGS`` -> ``DescribeConfigs``."""
    return "".join(part[:1].upper() + part[1:].lower() for part in enum_name.split("_"))


class _KafkaEnum(enum.Enum):
    """An enum of Kafka's: the value is Kafka's code, ``str()`` the name
    Kafka writes in ZooKeeper JSON and paths and prints in its tools."""

    # Members are singletons, so identity hashing is right, and it is C code:
    # Enum's own __hash__ (hash of the name) in Python took 4/5 of a cached
    # authorize() decision's time.
    __hash__ = object.__hash__

    @property
    def code(self) -> int:
        return self.value

    @property
    def kafka_name(self) -> str:
        return _pascal(self.name)

    def __str__(self) -> str:
        return self.kafka_name

    @classmethod
    def parse(cls, text: str):
        """Kafka's ``SecurityUtils`` lookup: the Pascal-case name, or it
        upper-cased without underscores in any case (``Read``, ``READ``,
        ``read``, ``ClusterAction``, ``CLUSTERACTION``); UNKNOWN if none."""
        table = _LOOKUPS[cls]
        found = table.get(text)
        if found is None:
            found = table.get(text.upper())
        return cls.UNKNOWN if found is None else found  # type: ignore[attr-defined]


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1  # a filter's, never an ACL's
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @classmethod
    def from_enum_name(cls, text: str) -> ResourceType:
        """Kafka's ``ResourceType.fromString``: the enum name in any case
        (``GROUP``, ``group``, ``TRANSACTIONAL_ID``); UNKNOWN if none. The
        literal change notification is read this way."""
        return cls.__members__.get(text.upper(), cls.UNKNOWN)


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    def __str__(self) -> str:
        return self.name  # Kafka writes and prints pattern types by enum name

    @classmethod
    def parse(cls, text: str) -> PatternType:
        """Kafka's ``PatternType.fromString``: the exact enum name; UNKNOWN if none."""
        return cls.__members__.get(text, cls.UNKNOWN)


_LOOKUPS: dict[type, dict[str, enum.Enum]] = {
    kind: {**{_pascal(m.name): m for m in kind}, **{_pascal(m.name).upper(): m for m in kind}}
    for kind in (AclOperation, AclPermissionType, ResourceType, PatternType)
}

# Rule 4: what an ALLOW of another operation also grants (AclAuthorizer.authorizeAction).
_ALLOWED_BY: dict[AclOperation, tuple[AclOperation, ...]] = {
    AclOperation.DESCRIBE: (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                            AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
}

_AUTHORIZATION_ERRORS = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
}


def authorization_error(resource_type: ResourceType) -> ErrorCode:
    """The error a broker answers when this resource type refuses
    (``AclEntry.authorizationError``), for the types zkcoord checks."""
    try:
        return _AUTHORIZATION_ERRORS[resource_type]
    except KeyError:
        raise ValueError(f"zkcoord answers no authorization error for resource type {resource_type}") from None


def parse_principal(text: str) -> str:
    """A principal as Kafka's ``SecurityUtils.parseKafkaPrincipal`` accepts
    it (``Type:name``, split on the first ``:``), returned as its text."""
    if not isinstance(text, str) or ":" not in text:
        raise ValueError(f"expected a principal in the format principalType:principalName (such as User:alice), "
                         f"got {text!r}")
    return text


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One access control entry: who (``principal``, ``Type:name`` or
    ``User:*``), from where (``host``, an IP address or ``*``), what and
    whether it is allowed."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:  # AclEntry.toString, for logs in Kafka's words
        return (f"{self.principal} has {self.permission.name} permission for operations: "
                f"{self.operation.name} from hosts: {self.host}")


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """Which resources a set of ACLs applies to: the literal name (``*``:
    every resource of the type) or, PREFIXED, every name starting with it."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __post_init__(self) -> None:
        if self.resource_type is ResourceType.ANY:
            raise ValueError("a resource pattern's resource type must not be ANY")
        if self.pattern_type in (PatternType.ANY, PatternType.MATCH):
            raise ValueError(f"a resource pattern's pattern type must not be {self.pattern_type.name}")
        if not isinstance(self.name, str):
            raise ValueError(f"a resource pattern's name must be text, got {type(self.name).__name__}")

    @property
    def is_unknown(self) -> bool:
        return self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN

    def __str__(self) -> str:  # ResourcePattern.toString
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


def java_host_address(address: str) -> str:
    """A peer's IP address as Java's ``InetAddress.getHostAddress()`` prints
    it, which is what ACL hosts are compared with: IPv4 as is, an
    IPv4-mapped IPv6 address as its IPv4 address (Java makes it an
    Inet4Address), other IPv6 addresses as eight hex groups without
    leading zeros or ``::`` (``::1`` is ``0:0:0:0:0:0:0:1``)."""
    text, sep, scope = address.partition("%")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return address  # not an IP (a Unix socket's peer): nothing in Kafka matches it but "*"
    if isinstance(ip, ipaddress.IPv4Address):
        return str(ip)
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    groups = ip.packed
    shown = ":".join(f"{(groups[i] << 8) | groups[i + 1]:x}" for i in range(0, 16, 2))
    return shown + sep + scope


# ----------------------------------------------------------------- settings
def parse_super_users(text: str | None) -> frozenset[str]:
    """Kafka's ``super.users``: principals separated by ``;``
    (``User:admin;User:ops``), each trimmed. ConfigError naming the one
    that is not ``Type:name``."""
    if not text:
        return frozenset()
    parts = text.split(";")
    while parts and parts[-1] == "":  # Java's String.split drops trailing empty strings
        parts.pop()
    found = set()
    for part in parts:
        try:
            found.add(parse_principal(part.strip()))
        except ValueError:
            raise ConfigError(f"super.users: {part.strip()!r} is not a principal; expected principals like "
                              "User:admin separated by ';'") from None
    return frozenset(found)


def _parse_bool(value: str | bool | None, setting: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"{setting}: {value!r} is not true or false")
    return text == "true"


@dataclass(frozen=True)
class AuthorizerSettings:
    """AclAuthorizer's settings: ``super.users`` and ``allow.everyone.if.no.acl.found``."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    def __post_init__(self) -> None:
        for principal in self.super_users:
            try:
                parse_principal(principal)
            except ValueError as exc:
                raise ConfigError(f"super.users: {exc}") from None

    @classmethod
    def from_properties(cls, super_users: str | None = None,
                        allow_everyone_if_no_acl_found: str | bool | None = None) -> AuthorizerSettings:
        """From the text of Kafka's properties of these names."""
        return cls(parse_super_users(super_users),
                   _parse_bool(allow_everyone_if_no_acl_found, "allow.everyone.if.no.acl.found"))


# --------------------------------------------------------------- authorizer
_Entries = frozenset[AclEntry]
# authorize_by_resource_type's index (AclAuthorizer's resourceCache): for
# (principal, host, operation, permission, resource type, pattern type), the
# names of the patterns with that exact entry.
_EntryKey = tuple[str, str, AclOperation, AclPermissionType, ResourceType, PatternType]


class Authorizer:
    """AclAuthorizer's decision over the ACLs it is given (:meth:`update`)."""

    def __init__(self, settings: AuthorizerSettings | None = None, *,
                 cache_max_entries: int = DEFAULT_CACHE_MAX_ENTRIES) -> None:
        if cache_max_entries < 1:
            raise ValueError("cache_max_entries must be at least 1")
        self._settings = settings or AuthorizerSettings()
        self._cache_max = cache_max_entries
        self._version = 0
        self._cache: dict[tuple, bool] = {}
        self._reset()

    def _reset(self) -> None:
        self._acls: dict[ResourcePattern, _Entries] = {}
        self._literal: dict[tuple[ResourceType, str], _Entries] = {}
        self._prefixed: dict[ResourceType, dict[str, _Entries]] = {}
        self._prefix_lengths: dict[ResourceType, Counter[int]] = {}
        self._probe_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._by_entry: dict[_EntryKey, set[str]] = {}

    # ------------------------------------------------------------ state
    @property
    def settings(self) -> AuthorizerSettings:
        return self._settings

    @property
    def version(self) -> int:
        """Changes on every change of ACLs or settings."""
        return self._version

    @property
    def resource_count(self) -> int:
        """Resource patterns that have ACLs."""
        return len(self._acls)

    @property
    def acl_count(self) -> int:
        return sum(len(entries) for entries in self._acls.values())

    def acls(self, pattern: ResourcePattern) -> _Entries:
        """The ACLs of exactly this pattern (empty if none)."""
        return self._acls.get(pattern, frozenset())

    def snapshot(self) -> dict[ResourcePattern, _Entries]:
        return dict(self._acls)

    def configure(self, settings: AuthorizerSettings) -> None:
        if settings != self._settings:
            self._settings = settings
            self._changed()

    def update(self, pattern: ResourcePattern, acls: Iterable[AclEntry]) -> bool:
        """Replace the ACLs of ``pattern`` (none: it has no ACLs any more);
        whether anything changed."""
        if pattern.is_unknown:
            raise ValueError(f"cannot keep ACLs of {pattern}: its resource or pattern type is unknown")
        new = frozenset(acls)
        if new == self._acls.get(pattern, frozenset()):
            return False
        self._put(pattern, new)
        self._changed()
        return True

    def replace_all(self, acls_by_pattern: Mapping[ResourcePattern, Iterable[AclEntry]]) -> bool:
        """Replace every ACL at once (a full load); whether anything changed."""
        wanted = {p: frozenset(a) for p, a in acls_by_pattern.items()}
        wanted = {p: a for p, a in wanted.items() if a}
        for pattern in wanted:
            if pattern.is_unknown:
                raise ValueError(f"cannot keep ACLs of {pattern}: its resource or pattern type is unknown")
        if wanted == self._acls:
            return False
        self._reset()
        for pattern, entries in wanted.items():
            self._put(pattern, entries)
        self._changed()
        return True

    def _changed(self) -> None:
        self._version += 1
        self._cache.clear()

    def _put(self, pattern: ResourcePattern, new: _Entries) -> None:
        old = self._acls.get(pattern, frozenset())
        rtype, ptype, name = pattern.resource_type, pattern.pattern_type, pattern.name
        for entry in new - old:
            self._by_entry.setdefault((entry.principal, entry.host, entry.operation, entry.permission, rtype, ptype),
                                      set()).add(name)
        for entry in old - new:
            key = (entry.principal, entry.host, entry.operation, entry.permission, rtype, ptype)
            names = self._by_entry.get(key)
            if names is not None:
                names.discard(name)
                if not names:
                    del self._by_entry[key]
        if ptype is PatternType.LITERAL:
            self._put_literal(rtype, name, new)
        else:
            self._put_prefixed(rtype, name, new, had=bool(old))
        if new:
            self._acls[pattern] = new
        else:
            self._acls.pop(pattern, None)

    def _put_literal(self, rtype: ResourceType, name: str, new: _Entries) -> None:
        if new:
            self._literal[(rtype, name)] = new
        else:
            self._literal.pop((rtype, name), None)

    def _put_prefixed(self, rtype: ResourceType, name: str, new: _Entries, *, had: bool) -> None:
        names = self._prefixed.setdefault(rtype, {})
        lengths = self._prefix_lengths.setdefault(rtype, Counter())
        if new:
            names[name] = new
            if not had:
                lengths[len(name)] += 1
        elif had:
            del names[name]
            lengths[len(name)] -= 1
            if not lengths[len(name)]:
                del lengths[len(name)]
        self._probe_lengths[rtype] = tuple(sorted(lengths))

    # --------------------------------------------------------- decisions
    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether ``principal`` (``Type:name``) connected from ``host``
        (:func:`java_host_address`) may do ``operation`` on the resource
        (``resource_type``, ``name``): AclAuthorizer.authorizeAction."""
        key = (principal, host, operation, resource_type, name)
        found = self._cache.get(key)
        if found is None:
            found = self._decide(principal, host, operation, resource_type, name)
            self._remember(key, found)
        return found

    def _remember(self, key: tuple, result: bool) -> None:
        if len(self._cache) >= self._cache_max:
            self._cache.clear()  # rarely full (a key per member and resource): start over
        self._cache[key] = result

    def _decide(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> bool:
        _check_concrete(operation, resource_type)
        if principal in self._settings.super_users:
            return True
        matching = self._matching(resource_type, name)
        if not matching:
            return self._settings.allow_everyone_if_no_acl_found
        if _exists(matching, principal, host, (operation,), AclPermissionType.DENY):
            return False
        return _exists(matching, principal, host, _ALLOWED_BY.get(operation, (operation,)),
                       AclPermissionType.ALLOW)

    def _matching(self, resource_type: ResourceType, name: str) -> list[_Entries]:
        """The non-empty ACL sets that apply to the resource (rule 2)."""
        found = []
        wildcard = self._literal.get((resource_type, WILDCARD_RESOURCE))
        if wildcard:
            found.append(wildcard)
        if name != WILDCARD_RESOURCE:
            literal = self._literal.get((resource_type, name))
            if literal:
                found.append(literal)
        lengths = self._probe_lengths.get(resource_type)
        if lengths:
            prefixed = self._prefixed[resource_type]
            for length in lengths:
                if length > len(name):
                    break
                if length == 0 and name:
                    continue  # Kafka's range lookup finds an empty prefix only for an empty name
                entries = prefixed.get(name[:length])
                if entries:
                    found.append(entries)
        return found

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one
        resource of ``resource_type``: AclAuthorizer.authorizeByResourceType
        (a DENY on the wildcard refuses all; a prefixed DENY dominates the
        ALLOWs under it; no implied operations)."""
        key = (principal, host, operation, resource_type)
        found = self._cache.get(key)
        if found is None:
            found = self._decide_by_type(principal, host, operation, resource_type)
            self._remember(key, found)
        return found

    def _decide_by_type(self, principal: str, host: str, operation: AclOperation,
                        resource_type: ResourceType) -> bool:
        _check_concrete(operation, resource_type)
        if principal in self._settings.super_users:
            return True
        ask = (principal, host, operation, resource_type)
        deny_literals = self._names(*ask, AclPermissionType.DENY, PatternType.LITERAL)
        if any(WILDCARD_RESOURCE in names for names in deny_literals):
            return False
        if self._settings.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = self._names(*ask, AclPermissionType.DENY, PatternType.PREFIXED)
        allow_prefixes = self._names(*ask, AclPermissionType.ALLOW, PatternType.PREFIXED)
        allow_literals = self._names(*ask, AclPermissionType.ALLOW, PatternType.LITERAL)
        if not deny_literals and not deny_prefixes:
            return bool(allow_prefixes or allow_literals)
        if any(not _dominant_prefix_deny(prefix, deny_prefixes) for names in allow_prefixes for prefix in names):
            return True
        return any(_literal_allowed(literal, deny_literals, deny_prefixes)
                   for names in allow_literals for literal in names)

    def _names(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
               permission: AclPermissionType, pattern_type: PatternType) -> list[set[str]]:
        """AclAuthorizer.matchingResources: the names of the patterns with an
        entry for the principal or ``User:*``, the host or ``*``, the
        operation or ``All``."""
        found = []
        for p in dict.fromkeys((principal, WILDCARD_PRINCIPAL)):
            for h in dict.fromkeys((host, WILDCARD_HOST)):
                for o in dict.fromkeys((operation, AclOperation.ALL)):
                    names = self._by_entry.get((p, h, o, permission, resource_type, pattern_type))
                    if names:
                        found.append(names)
        return found


def _check_concrete(operation: AclOperation, resource_type: ResourceType) -> None:
    if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise ValueError(f"cannot authorize operation {operation.name}: name a concrete operation")
    if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise ValueError(f"cannot authorize on resource type {resource_type.name}: name a concrete type")


def _exists(matching: list[_Entries], principal: str, host: str, operations: tuple[AclOperation, ...],
            permission: AclPermissionType) -> bool:
    """AclAuthorizer.matchingAclExists, for any of ``operations`` (rule 3)."""
    for entries in matching:
        for acl in entries:
            if (acl.permission is permission
                    and (acl.principal == principal or acl.principal == WILDCARD_PRINCIPAL)
                    and (acl.operation in operations or acl.operation is AclOperation.ALL)
                    and (acl.host == host or acl.host == WILDCARD_HOST)):
                return True
    return False


def _dominant_prefix_deny(name: str, deny_prefixes: list[set[str]]) -> bool:
    """A prefixed DENY on ``name`` or on any prefix of it (AclAuthorizer.hasDominantPrefixedDeny)."""
    return any(name[:end] in names for end in range(1, len(name) + 1) for names in deny_prefixes)


def _literal_allowed(name: str, deny_literals: list[set[str]], deny_prefixes: list[set[str]]) -> bool:
    """AclAuthorizer.allowLiteral: the wildcard always; a name unless denied literally or by a prefix."""
    if name == WILDCARD_RESOURCE:
        return True
    return not any(name in names for names in deny_literals) and not _dominant_prefix_deny(name, deny_prefixes)
