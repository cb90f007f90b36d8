"""The two configuration formats Kafka operators already have: Java
``.properties`` files and JAAS login configurations.

Owns reading them, nothing about what the keys mean:

* :func:`read_properties` / :func:`parse_properties`: Java's
  ``Properties.load`` format (``key=value``, ``key: value``, ``key value``;
  ``#`` and ``!`` comments; a trailing backslash continues a line; ``\\t``,
  ``\\n``, ``\\uXXXX`` and escaped separators), as Kafka's tools read a
  ``--command-config`` file. A later key overrides an earlier one.
* :func:`parse_jaas_config`: a ``sasl.jaas.config`` value, one or more
  ``<LoginModule class> <flag> [key=value ...];`` entries.
* :func:`read_jaas_file` / :func:`parse_jaas_file`: a JAAS file of named
  sections (``Client { ... };``, ``KafkaServer { ... };``), with ``//`` and
  ``/* */`` comments, as ``java.security.auth.login.config`` names.

Values may be quoted (``"..."``, with ``\\"`` and ``\\\\`` escapes) or bare
tokens. A JAAS text holds passwords, so error messages quote the position,
never the text; :class:`LoginModule` keeps its options in a mapping whose
repr is hidden.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from zkcoord.errors import ConfigError
from zkcoord.password import HIDDEN

__all__ = ["LoginModule", "parse_properties", "read_properties", "parse_jaas_config", "parse_jaas_file",
           "read_jaas_file", "FLAGS"]

FLAGS = ("required", "requisite", "sufficient", "optional")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class _HiddenOptions(dict):
    """A login module's options: values are secrets as often as not."""

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {HIDDEN}" for k in self) + "}"


@dataclass(frozen=True)
class LoginModule:
    """One ``<class> <flag> key=value ...;`` entry of a JAAS configuration."""

    class_name: str
    flag: str
    options: Mapping[str, str] = field(default_factory=_HiddenOptions)

    @property
    def simple_name(self) -> str:
        """``ScramLoginModule`` for ``org.apache.kafka.common.security.scram.ScramLoginModule``."""
        return self.class_name.rsplit(".", 1)[-1]


# -- .properties ---------------------------------------------------------------------------


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java ``.properties`` file's keys and values; ConfigError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"properties file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"properties file {path} cannot be read: {exc}") from None
    return parse_properties(text, where=str(path))


def parse_properties(text: str, where: str = "properties") -> dict[str, str]:
    """Java's ``Properties.load`` on ``text``."""
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split_property(line)
        try:
            result[_unescape(key)] = _unescape(value)
        except ValueError as exc:
            raise ConfigError(f"{where}, line {number}: {exc}") from None
    return result


def _logical_lines(text: str):
    """(first line number, text) of each logical line: comments and blank lines
    dropped, backslash continuations joined (leading blanks of the next line go)."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(" \t\f")
        if not pending:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes: the line continues
            pending.append(line[:-1])
            continue
        pending.append(line)
        yield start, "".join(pending)
        pending = []
    if pending:
        yield start, "".join(pending)


def _split_property(line: str) -> tuple[str, str]:
    """Key and raw value: the key ends at the first unescaped ``=``, ``:`` or blank."""
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t\f":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(text):
            i += 1  # a lone trailing backslash is dropped, as Java does
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError("malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


# -- JAAS ---------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<quoted>"(?:[^"\\]|\\.)*")
  | (?P<punct>[{};=])
  | (?P<word>[^\s{};="]+)
""", re.VERBOSE | re.DOTALL)


def _tokens(text: str, where: str) -> list[tuple[str, str, int]]:
    """(kind, value, line) of each token; quoted values unescaped."""
    tokens = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            line = text.count("\n", 0, pos) + 1
            raise ConfigError(f"{where}: line {line}: an unterminated quoted value or a stray character")
        kind = match.lastgroup
        value = match.group()
        if kind == "quoted":
            value = re.sub(r"\\(.)", r"\1", value[1:-1], flags=re.DOTALL)
        if kind not in ("space", "comment"):
            tokens.append((kind, value, text.count("\n", 0, pos) + 1))
        pos = match.end()
    return tokens


def _modules(tokens: list, i: int, where: str, until: str | None) -> tuple[list[LoginModule], int]:
    """Login module entries from tokens[i:] up to ``until`` ('}' or the end)."""
    modules: list[LoginModule] = []
    while i < len(tokens) and not (until and tokens[i][1] == until and tokens[i][0] == "punct"):
        kind, class_name, line = tokens[i]
        if kind != "word":
            raise ConfigError(f"{where}: line {line}: expected a login module class name")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word" or tokens[i + 1][1].lower() not in FLAGS:
            raise ConfigError(f"{where}: line {line}: login module {class_name} needs a flag, one of "
                              f"{', '.join(FLAGS)}")
        flag = tokens[i + 1][1].lower()
        i += 2
        options = _HiddenOptions()
        while i < len(tokens) and tokens[i][1] != ";":
            if (i + 2 >= len(tokens) or tokens[i][0] not in ("word", "quoted") or tokens[i + 1][1] != "="
                    or tokens[i + 2][0] not in ("word", "quoted")):
                raise ConfigError(f"{where}: line {tokens[i][2]}: expected key=value in the options of "
                                  f"{class_name} (or a ';' to end them)")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ConfigError(f"{where}: the options of {class_name} do not end with ';'")
        i += 1  # the ';'
        modules.append(LoginModule(class_name, flag, options))
    return modules, i


def parse_jaas_config(text: str, where: str = "sasl.jaas.config") -> list[LoginModule]:
    """The login modules of a ``sasl.jaas.config`` value (at least one)."""
    modules, _ = _modules(_tokens(text, where), 0, where, None)
    if not modules:
        raise ConfigError(f"{where} is empty; expected '<LoginModule class> required key=\"value\" ...;'")
    return modules


def read_jaas_file(path: str | Path) -> dict[str, list[LoginModule]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"JAAS file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"JAAS file {path} cannot be read: {exc}") from None
    return parse_jaas_file(text, where=f"JAAS file {path}")


def parse_jaas_file(text: str, where: str = "JAAS file") -> dict[str, list[LoginModule]]:
    """``{section name: login modules}`` of a JAAS file."""
    tokens = _tokens(text, where)
    sections: dict[str, list[LoginModule]] = {}
    i = 0
    while i < len(tokens):
        kind, name, line = tokens[i]
        if kind != "word" or i + 1 >= len(tokens) or tokens[i + 1][1] != "{":
            raise ConfigError(f"{where}: line {line}: expected '<section name> {{'")
        modules, i = _modules(tokens, i + 2, f"{where}, section {name}", "}")
        if i >= len(tokens):
            raise ConfigError(f"{where}: section {name} is not closed with '}};'")
        i += 1  # the '}'
        if i < len(tokens) and tokens[i][1] == ";":
            i += 1
        sections[name] = modules
    return sections
