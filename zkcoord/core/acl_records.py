"""What Kafka writes in ZooKeeper about ACLs, decoded (and encoded), pure.

Owns the formats of Kafka 3.9's ``ZkData`` for ACLs: a resource's ACL JSON
(``/kafka-acl/<Type>/<name>``, ``/kafka-acl-extended/prefixed/<Type>/<name>``;
``AclEntry.fromBytes`` / ``toJsonCompatibleMap``), the literal change
notification (``/kafka-acl-changes``: ``Type:name``) and the extended one
(``/kafka-acl-extended-changes``: ``ExtendedAclChangeEvent`` JSON). The
values are :mod:`zkcoord.core.acl`'s. Malformed input is a ValueError
naming what was read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from zkcoord.core.acl import (
    AclEntry, AclOperation, AclPermissionType, PatternType, ResourcePattern, ResourceType, parse_principal,
)

__all__ = ["parse_acls_json", "acls_to_json", "parse_literal_change", "parse_extended_change"]


def _json(data: bytes | str, what: str) -> object:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{what} is not valid JSON ({exc})") from None


def _text_field(item: Mapping, key: str, what: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{what} has no text field {key!r}")
    return value


def parse_acls_json(data: bytes | str, what: str = "the ACL znode") -> frozenset[AclEntry]:
    """The ACLs of a resource as Kafka stores them in ZooKeeper
    (``AclEntry.fromBytes``)::

        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}]}

    Empty data: no ACLs. Anything else not of this shape (version other
    than 1, a missing field, a principal without ``:``) is a ValueError
    naming ``what``. Unknown operation or permission names become UNKNOWN
    (such an entry never matches)."""
    if not data:
        return frozenset()
    doc = _json(data, what)
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is not a JSON object")
    version = doc.get("version")
    if type(version) is not int or version != 1:
        raise ValueError(f"{what} has version {version!r}; Kafka's ACL format is version 1")
    items = doc.get("acls")
    if not isinstance(items, list):
        raise ValueError(f"{what} has no \"acls\" array")
    found = set()
    for index, item in enumerate(items):
        where = f"ACL #{index} of {what}"
        if not isinstance(item, dict):
            raise ValueError(f"{where} is not a JSON object")
        try:
            principal = parse_principal(_text_field(item, "principal", where))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        permission = AclPermissionType.parse(_text_field(item, "permissionType", where))
        host = _text_field(item, "host", where)
        operation = AclOperation.parse(_text_field(item, "operation", where))
        found.add(AclEntry(principal, host, operation, permission))
    return frozenset(found)


def acls_to_json(acls: Iterable[AclEntry]) -> bytes:
    """The ZooKeeper JSON of a resource's ACLs, as Kafka writes it."""
    entries = [{"principal": a.principal, "permissionType": a.permission.kafka_name,
                "operation": a.operation.kafka_name, "host": a.host}
               for a in sorted(acls, key=lambda a: (a.principal, a.host, a.operation.code, a.permission.code))]
    return json.dumps({"version": 1, "acls": entries}, separators=(",", ":")).encode()


def parse_literal_change(data: bytes | str) -> ResourcePattern:
    """A ``/kafka-acl-changes`` notification: ``Type:name`` (Kafka writes
    the enum name, ``GROUP:alice-g``), split on the first ``:``; a LITERAL
    pattern. An unknown type gives ResourceType.UNKNOWN, as in Kafka."""
    text = _decoded(data, "literal ACL change notification")
    resource_type, sep, name = text.partition(":")
    if not sep:
        raise ValueError(f"literal ACL change notification {text!r} is not ResourceType:ResourceName")
    return ResourcePattern(ResourceType.from_enum_name(resource_type), name, PatternType.LITERAL)


def parse_extended_change(data: bytes | str) -> ResourcePattern:
    """A ``/kafka-acl-extended-changes`` notification (Kafka's
    ``ExtendedAclChangeEvent``): ``{"version":1,"resourceType":"GROUP",
    "name":"alice-","patternType":"PREFIXED"}``."""
    what = "extended ACL change notification"
    doc = _json(data, what)
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is not a JSON object")
    version = doc.get("version", 0)
    if type(version) is not int or version > 1:
        raise ValueError(f"{what} has version {version!r}; Kafka 3.9 writes version 1")
    resource_type = ResourceType.from_enum_name(_text_field(doc, "resourceType", what))
    name = _text_field(doc, "name", what)
    pattern_type = PatternType.parse(_text_field(doc, "patternType", what))
    try:
        return ResourcePattern(resource_type, name, pattern_type)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _decoded(data: bytes | str, what: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} is not UTF-8 text ({exc})") from None
