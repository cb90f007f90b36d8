"""The Kafka error an answer carries, found without walking what cannot hold one.

This module owns one rule, used by the request metrics
(``zkcoord_requests_total{error}``): an answer's error is its top-level
``error_code``, else the first nonzero ``error_code`` of its nested entries
in order, else 0 (NONE).

Cost: what a message class can hold is read once from kafka-python's schema
(:func:`_error_fields`), so the walk only enters fields whose entries carry
an ``error_code`` somewhere below them. A DescribeGroups answer's members,
a JoinGroup answer's member list, a ListGroups answer's groups are never
entered; a walk visits at most the entries that have an error field, and
stops at the first nonzero one. Answers with more than a thousand such
entries are built in a worker thread (the daemon's ``apis._answer``),
which finds their error there too
(:func:`zkcoord.wire.responses.encoded_response`), so the event loop never
walks a big answer.
"""

from __future__ import annotations

from functools import cache

__all__ = ["first_error_code"]


def first_error_code(message) -> int:
    """The error code of an answer by the module's rule (0: none)."""
    if message is None:
        return 0
    has_top, nested = _error_fields(type(message))
    if has_top:
        top = message.error_code
        if isinstance(top, int) and top:
            return top
    for name in nested:
        value = getattr(message, name, None)
        if value is None:
            continue
        for item in value if isinstance(value, list) else (value,):
            code = first_error_code(item)
            if code:
                return code
    return 0


@cache
def _error_fields(cls) -> tuple[bool, tuple[str, ...]]:
    """(does ``cls`` have an ``error_code`` field, its struct fields whose
    entries can hold one), from the class's kafka-python schema."""
    fields = getattr(cls, "fields", None)
    if not isinstance(fields, dict):
        return False, ()
    nested = []
    for name, field in fields.items():
        data_class = getattr(field, "data_class", None)
        if isinstance(data_class, type) and _can_hold_error(data_class):
            nested.append(name)
    return "error_code" in fields, tuple(nested)


@cache
def _can_hold_error(cls) -> bool:
    has_top, nested = _error_fields(cls)
    return has_top or bool(nested)
