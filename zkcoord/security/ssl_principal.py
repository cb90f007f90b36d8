"""The principal of a TLS client, as Kafka names it.

Owns :func:`peer_principal`, :class:`SslPrincipalMapper` (a port of Kafka's
``SslPrincipalMapper``: ``ssl.principal.mapping.rules``, Java's regex
replacement rules included) and :func:`java_x500_name`, a certificate's
subject as ``javax.security.auth.x500.X500Principal.getName()`` prints it.

Rules:

* The text must be Java's, byte for byte: ACLs name principals as Kafka
  prints them. RFC 2253 with Java's quirks: attribute types outside CN, C,
  L, ST, O, OU, STREET, DC, UID print as OIDs with the hex DER value; '='
  and '#' are escaped anywhere; every string type's bytes are read as UTF-8
  (BMPString included). Checked against Java 17 in the tests.
* A rule's pattern is a Java regex; Python's ``re`` compiles the common
  subset (named groups are translated); one it cannot compile is a
  ConfigError naming the rule.
* No clock, no I/O.
"""

from __future__ import annotations

import re

from cryptography import x509

from zkcoord.errors import AuthenticationError, ConfigError

__all__ = ["ANONYMOUS", "SslPrincipalMapper", "peer_principal", "java_x500_name"]

ANONYMOUS = "User:ANONYMOUS"

_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)", re.ASCII)
_RULE_PARSER = re.compile(_RULE, re.ASCII)
_BACK_REFERENCE = re.compile(r"\$(\d+)", re.ASCII)


class _Rule:
    def __init__(self, pattern: str | None = None, replacement: str | None = None, case: str = "") -> None:
        self.is_default = pattern is None
        self.source, self.replacement, self.case = pattern, replacement, case
        self.pattern = None
        if pattern is not None:
            try:  # Java's named groups (?<name>...) are Python's (?P<name>...)
                self.pattern = re.compile(re.sub(r"\(\?<([A-Za-z][A-Za-z0-9]*)>", r"(?P<\1>", pattern), re.ASCII)
            except re.error as exc:
                raise ConfigError(f"ssl.principal.mapping.rules: the pattern of RULE:{pattern}/... cannot be "
                                  f"compiled: {exc}") from None

    def apply(self, dn: str) -> str | None:
        if self.is_default:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        replacement = _escape_literal_back_references(self.replacement, self.pattern.groups)
        result = self.pattern.sub(lambda m: _java_replacement(replacement, m), dn)
        if self.case == "L":
            return result.lower()
        return result.upper() if self.case == "U" else result

    def __str__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        text = "RULE:" + self.source
        if self.replacement is not None:
            text += "/" + self.replacement
        return text + ({"L": "/L", "U": "/U"}.get(self.case, ""))


def _escape_literal_back_references(replacement: str, groups: int) -> str:
    """Kafka's (Apache NiFi's) rule: ``$n`` past the last group is a literal ``$n``.
    The positions come from the original text, as in Kafka."""
    if groups == 0:
        return replacement
    value = replacement
    for match in _BACK_REFERENCE.finditer(replacement):
        number = match.group(1)
        if number.startswith("0"):
            continue
        index = int(number)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = match.start(1)
            value = value[:start - 1] + "\\" + value[start - 1:]
    return value


def _java_replacement(replacement: str, match: re.Match) -> str:
    """``Matcher.appendReplacement``'s reading of ``$n``, ``${name}`` and ``\\x``."""
    out, i, groups = [], 0, match.re.groups
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\":
            if i + 1 >= len(replacement):
                raise ValueError("character to be escaped is missing")
            out.append(replacement[i + 1])
            i += 2
        elif ch == "$":
            i += 1
            if i < len(replacement) and replacement[i] == "{":
                end = replacement.find("}", i)
                if end < 0:
                    raise ValueError("named capturing group is missing trailing '}'")
                out.append(match.group(replacement[i + 1:end]) or "")
                i = end + 1
                continue
            if i >= len(replacement) or not replacement[i].isdigit() or not replacement[i].isascii():
                raise ValueError("Illegal group reference")
            number = int(replacement[i])
            i += 1
            while i < len(replacement) and replacement[i].isascii() and replacement[i].isdigit():
                longer = number * 10 + int(replacement[i])
                if longer > groups:
                    break
                number, i = longer, i + 1
            if number > groups:
                raise ValueError(f"No group {number}")
            out.append(match.group(number) or "")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: the first rule that matches a
    distinguished name gives the principal's name (``DEFAULT``: the name itself)."""

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        text = "DEFAULT" if rules is None else rules
        self.rules = [r for r in (self._parse(part) for part in self._split(text)) if r is not None]

    @staticmethod
    def _split(text: str) -> list[str]:
        return [m.group(1) for m in _RULE_SPLITTER.finditer(text.strip())]

    @staticmethod
    def _parse(rule: str) -> _Rule | None:
        match = _RULE_PARSER.match(rule)
        if match is None or match.end() != len(rule):
            raise ConfigError(f"ssl.principal.mapping.rules: {rule!r} is not a rule; write DEFAULT or "
                              f"RULE:<pattern>/<replacement>/[L|U], separated by commas")
        if match.group(1) is not None:
            return _Rule()
        if match.group(2) is not None:
            return _Rule(match.group(2), match.group(4), match.group(6) or "")
        return None  # an empty rule

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            try:
                found = rule.apply(distinguished_name)
            except (ValueError, IndexError, re.error) as exc:
                raise AuthenticationError(f"ssl.principal.mapping.rules: {rule} cannot make a name of "
                                          f"{distinguished_name!r}: {exc}") from None
            if found is not None:
                return found
        raise AuthenticationError(f"no rule of ssl.principal.mapping.rules applies to {distinguished_name!r} "
                                  f"(rules {self}); add one, or DEFAULT at the end")

    def __str__(self) -> str:
        return "[" + ", ".join(str(r) for r in self.rules) + "]"

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = {self})"


def peer_principal(der_certificate: bytes | None, mapper: SslPrincipalMapper) -> str:
    """Kafka's principal of a TLS client: ``User:<mapped subject>``, or
    ``User:ANONYMOUS`` without a certificate (``ssl.client.auth`` none or requested)."""
    if not der_certificate:
        return ANONYMOUS
    certificate = x509.load_der_x509_certificate(der_certificate)
    return "User:" + mapper.name(java_x500_name(certificate.subject.public_bytes()))


# -- Java's RFC 2253 text of a DER Name -------------------------------------------------------

_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
             "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
             "0.9.2342.19200300.100.1.1": "UID"}
_STRING_TAGS = {0x0C, 0x13, 0x14, 0x16, 0x1B, 0x1E}  # UTF8, Printable, T61, IA5, General, BMP
_ESCAPED = ',=+<>#;"\\'


def _der_item(data: bytes, pos: int) -> tuple[int, int, int, int]:
    """(tag, start of content, end of content, end of item) of the DER item at ``pos``."""
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    return tag, pos, pos + length, pos + length


def _oid_text(content: bytes) -> str:
    numbers, value = [], 0
    for byte in content:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            numbers.append(value)
            value = 0
    first = min(numbers[0] // 40, 2)
    return ".".join(str(n) for n in [first, numbers[0] - 40 * first, *numbers[1:]])


def _java_value(text: str) -> str:
    escaped = []
    for ch in text:
        escaped.append("\\" + ch if ch in _ESCAPED else "\\00" if ch == "\0" else ch)
    chars = "".join(escaped)
    lead = len(chars) - len(chars.lstrip(" \r"))
    trail = len(chars.rstrip(" \r"))
    return "".join("\\" + c if (i < lead or i >= trail) else c for i, c in enumerate(chars))


def java_x500_name(name_der: bytes) -> str:
    """A DER Name as ``javax.security.auth.x500.X500Principal.getName()`` prints it."""
    rdns = []
    _, pos, end, _ = _der_item(name_der, 0)
    while pos < end:
        _, set_pos, set_end, pos = _der_item(name_der, pos)
        avas = []
        while set_pos < set_end:
            _, ava_pos, _, set_pos = _der_item(name_der, set_pos)
            _, oid_start, oid_end, value_pos = _der_item(name_der, ava_pos)
            oid = _oid_text(name_der[oid_start:oid_end])
            tag, value_start, value_end, value_end_item = _der_item(name_der, value_pos)
            keyword = _KEYWORDS.get(oid)
            if keyword is None or tag not in _STRING_TAGS:
                # Java prints the whole DER value in hex (it does not decode what it cannot name)
                avas.append(f"{keyword or oid}=#{name_der[value_pos:value_end_item].hex()}")
            else:
                # Java decodes every string type's bytes as UTF-8 here (BMPString included)
                text = name_der[value_start:value_end].decode("utf-8", errors="replace")
                avas.append(f"{keyword}={_java_value(text)}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))
