"""Kafka messages built from plain Python values.

This module owns turning plain values (ints, strings, lists, mappings for
nested structs) into kafka-python 3.0.12's generated message objects at a
given version (:func:`build_message`), the response of a served API
(:func:`build_response`) and the ApiVersions answer listing a registry
(:func:`api_versions_response`). Nothing here encodes bytes
(:mod:`.responses` does).

What depends only on (schema, version), which fields a version carries and
which are structs, is worked out once and cached: a daemon builds an answer
for every request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsResponse

from zkcoord.wire.errors import MessageBuildError
from zkcoord.wire.registry import COORDINATOR_APIS, ApiRegistry

__all__ = ["build_message", "build_response", "api_versions_response"]


def api_versions_response(version: int, apis: ApiRegistry = COORDINATOR_APIS, *,
                          error_code: int = 0, throttle_time_ms: int = 0,
                          supported_features: list[dict] | None = None) -> ApiMessage:
    """An ApiVersionsResponse at `version` listing every API in `apis`, and
    from v3 on the `supported_features` given ({name, min_version,
    max_version}; a tagged field older versions do not carry)."""
    entries = [{"api_key": s.api_key, "min_version": s.min_version, "max_version": s.max_version}
               for s in apis]
    extra = {"supported_features": supported_features} if supported_features and version >= 3 else {}
    return build_message(ApiVersionsResponse, version, error_code=error_code,
                         api_keys=entries, throttle_time_ms=throttle_time_ms, **extra)


def build_response(api_key: int, version: int, /, *, apis: ApiRegistry = COORDINATOR_APIS,
                   **fields: Any) -> ApiMessage:
    """The response message of `api_key` at `version`, built from plain values."""
    spec = apis.get(api_key)
    if spec is None or not spec.supports(version):
        raise MessageBuildError(f"api key {api_key} v{version} is not served by this registry")
    return build_message(spec.response_class, version, **fields)


def build_message(message_class: type[ApiMessage], version: int, **fields: Any) -> ApiMessage:
    """Build a generated message at `version` from plain Python values.

    Nested structs may be given as mappings (converted to the generated nested
    classes) or as instances of those classes. Fields the schema knows but
    `version` does not carry are dropped, so one set of values can serve every
    version; names the schema does not know raise `MessageBuildError`.
    Unset fields take the schema default.
    """
    if not 0 <= version <= message_class.max_version:
        raise MessageBuildError(
            f"{message_class.__name__} has no v{version} (max v{message_class.max_version})")
    kwargs = _struct_kwargs(message_class.fields, fields, version, message_class.__name__)
    return message_class(version=version, **kwargs)


# (kind, field) per field name, per (schema, version); kind: None when the
# version lacks the field, else _PLAIN, _STRUCT or _STRUCT_ARRAY.
_PLAIN, _STRUCT, _STRUCT_ARRAY = 0, 1, 2
_FIELD_TABLES: dict[tuple[int, int], tuple[Mapping[str, Any], dict[str, tuple[int | None, Any]]]] = {}


def _field_table(schema: Mapping[str, Any], version: int) -> dict[str, tuple[int | None, Any]]:
    key = (id(schema), version)
    found = _FIELD_TABLES.get(key)
    if found is None or found[0] is not schema:
        table = {}
        for name, field in schema.items():
            kind = None
            if field.for_version_q(version):
                kind = _STRUCT if field.is_struct() else _STRUCT_ARRAY if field.is_struct_array() else _PLAIN
            table[name] = (kind, field)
        found = _FIELD_TABLES[key] = (schema, table)  # the schema is kept so its id is not reused
    return found[1]


def _struct_kwargs(schema: Mapping[str, Any], values: Mapping[str, Any], version: int,
                   where: str) -> dict[str, Any]:
    table = _field_table(schema, version)
    kwargs = {}
    for name, value in values.items():
        entry = table.get(name)
        if entry is None:
            raise MessageBuildError(
                f"{where} has no field {name!r}; known fields: {', '.join(schema)}")
        kind, field = entry
        if kind is None:
            continue
        if value is None or kind == _PLAIN:
            kwargs[name] = value
        elif kind == _STRUCT:
            kwargs[name] = _nested(field, value, version, f"{where}.{name}")
        else:
            kwargs[name] = [_nested(field, item, version, f"{where}.{name}[{i}]")
                            for i, item in enumerate(value)]
    return kwargs


def _nested(field: Any, value: Any, version: int, where: str) -> Any:
    if not isinstance(value, Mapping):
        return value
    return field.data_class(version=version, **_struct_kwargs(field.fields, value, version, where))
