"""A password, key password or other secret that never prints.

:class:`Password` holds the text of a secret and shows ``[hidden]`` in every
``str()``, ``repr()`` and f-string, as Kafka's ``Password`` type does, so a
config dataclass, a log line or an error message that happens to include one
leaks nothing. Code that needs the text asks for it by name:
``password.value``. It pickles (Spark ships task settings to workers) and
compares by value.
"""

from __future__ import annotations

__all__ = ["Password", "HIDDEN", "reveal"]

HIDDEN = "[hidden]"


class Password:
    """A secret string; ``.value`` is the text, everything else is ``[hidden]``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if isinstance(value, Password):
            value = value.value
        if not isinstance(value, str):
            raise TypeError(f"a Password holds text, got {type(value).__name__}")
        self._value = value

    @property
    def value(self) -> str:
        return self._value

    def __str__(self) -> str:
        return HIDDEN

    def __repr__(self) -> str:
        return HIDDEN

    def __format__(self, spec: str) -> str:
        return format(HIDDEN, spec)

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Password, self._value))

    def __getstate__(self) -> str:
        return self._value

    def __setstate__(self, state: str) -> None:
        self._value = state


def reveal(secret: Password | str | None) -> str | None:
    """The text of ``secret`` (a Password or plain text), None for None."""
    if secret is None:
        return None
    return secret.value if isinstance(secret, Password) else secret
