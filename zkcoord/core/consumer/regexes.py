"""Subscriptions by regular expression (KIP-848's ``SubscribedTopicRegex``).

A member may subscribe with a regular expression in RE2J's syntax (Kafka
uses RE2J; google-re2 is the same engine), matched against the whole topic
name. The group keeps each expression's resolution (the topics it matched,
on which topics image, when) as a record; members subscribing with the same
expression share it.

As in Kafka 4.4 (``maybeUpdateRegularExpressions`` /
``handleRegularExpressionsResult``), resolution happens after the heartbeat
that needs it, not in it: the heartbeat schedules it (timer
:data:`~.messages.REGEX_KEY`), the resolution then records the new topics
and moves the group epoch on when they changed, and the members get their
new assignment from their next heartbeats. An expression is resolved again:

* when a member first subscribes with it;
* when the group's expressions were last resolved on an image older than
  the last one where topics appeared, or longer ago than
  ``group.consumer.regex.refresh.interval.ms``;

and never more often than every 10 s. An expression RE2J cannot compile is
refused at the heartbeat that sends it: INVALID_REGULAR_EXPRESSION.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from functools import lru_cache

import re2

from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.model import ConsumerGroup, ConsumerMember, ResolvedRegex
from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.topics_image import TopicsImage
from zkcoord.errors import GroupRequestError

__all__ = ["Status", "RegexUpdate", "update_status", "resolve", "without_unused", "compiled", "MIN_REFRESH_MS"]

MIN_REFRESH_MS = 10_000  # Kafka resolves a group's expressions at most this often
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a bad expression is answered, not logged by the engine


class Status(Enum):
    NO_CHANGE = "no-change"
    UPDATED = "updated"  # the member's expression changed; its topics are not known yet
    UPDATED_AND_RESOLVED = "updated-and-resolved"  # ... and known: the group epoch moves on now


@dataclass(frozen=True)
class RegexUpdate:
    status: Status
    group: ConsumerGroup  # with a resolution no member uses any more dropped
    resolve_later: bool  # schedule a resolution (REGEX_KEY)


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


def _re2j_description(detail: str) -> str:
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


def _re2j_refusal(regex: str) -> tuple[int, str] | None:
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


def _re2_error_at(regex: str, detail: str) -> int:
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


def _re2j_literal_escapes(regex: str) -> str:
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


@lru_cache(maxsize=1024)
def compiled(regex: str):
    """The compiled expression; GroupRequestError INVALID_REGULAR_EXPRESSION
    with Kafka's message: RE2J's description of the first error RE2J's
    parser meets (RE2's error, or a rule of RE2J's own, whichever comes
    first in the expression)."""
    quirk = _re2j_refusal(regex)
    try:
        pattern = re2.compile(_re2j_literal_escapes(regex), _OPTIONS)
    except Exception as exc:  # re2.error; its text names the construct
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        error = (_re2_error_at(regex, detail), _re2j_description(detail))
        refusal = quirk[1] if quirk is not None and quirk[0] < error[0] else error[1]
    else:
        if quirk is None:
            return pattern
        refusal = quirk[1]
    raise GroupRequestError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {refusal}.")


def update_status(group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember, now_ms: int,
                  image: TopicsImage, c: ConsumerGroupConfig) -> RegexUpdate:
    """What the member's (possibly changed) expression means for the group
    (Kafka's ``maybeUpdateRegularExpressions``)."""
    old, new = member.regex, updated.regex
    status = Status.NO_CHANGE
    require_refresh = False
    if old != new:
        status = Status.UPDATED
        if old and group.regex_subscribers.get(old, 0) == 1:
            group = group.with_regex(old, None)
        if new:
            if group.regex_subscribers.get(new, 0) == 0:
                compiled(new)
                require_refresh = True
            elif new in group.resolved_regexes:
                status = Status.UPDATED_AND_RESOLVED
        elif old:
            status = Status.UPDATED_AND_RESOLVED
    subscribed = dict(group.regex_subscribers)
    if not require_refresh and not subscribed:
        return RegexUpdate(status, group, False)
    if group.regex_resolution_pending:
        return RegexUpdate(status, group, False)
    last = _last_refresh_ms(group)
    if now_ms <= last + MIN_REFRESH_MS:
        return RegexUpdate(status, group, False)
    if old:
        subscribed[old] = subscribed.get(old, 0) - 1
        if subscribed[old] <= 0:
            del subscribed[old]
    if new:
        subscribed[new] = subscribed.get(new, 0) + 1
    require_refresh |= len(subscribed) != len(group.resolved_regexes)
    require_refresh |= _last_version(group) < image.added_version
    require_refresh |= now_ms > last + c.regex_refresh_interval_ms
    if require_refresh and subscribed:
        return RegexUpdate(status, replace(group, regex_resolution_pending=True), True)
    return RegexUpdate(status, group, False)


def _last_refresh_ms(group: ConsumerGroup) -> int:
    """When the group's expressions were last resolved (Kafka takes the first one's)."""
    for resolved in group.resolved_regexes.values():
        return resolved.timestamp_ms
    return -(2**63)


def _last_version(group: ConsumerGroup) -> int:
    for resolved in group.resolved_regexes.values():
        return resolved.version
    return 0


def resolve(group: ConsumerGroup, image: TopicsImage, now_ms: int) -> tuple[ConsumerGroup, bool]:
    """Resolve every expression members subscribe with against ``image``
    (Kafka's ``TopicRegexResolver`` then ``handleRegularExpressionsResult``):
    the group with the new resolutions, and whether the group epoch must move
    on (some expression's topics changed: the caller bumps it)."""
    bump = False
    regexes = dict(group.resolved_regexes)
    for regex in group.regex_subscribers:
        try:
            pattern = compiled(regex)
        except GroupRequestError:
            continue  # refused when it was sent; Kafka logs and ignores it here
        topics = frozenset(name for name in image.by_name if pattern.fullmatch(name) is not None)
        old = regexes.get(regex)
        if old is None or old.topics != topics:
            bump = True
        regexes[regex] = ResolvedRegex(topics, image.version, now_ms)
    return replace(group, resolved_regexes=FrozenMap(regexes), regex_resolution_pending=False), bump


def without_unused(group: ConsumerGroup) -> ConsumerGroup:
    """The group without the resolutions of expressions no member uses any
    more (Kafka's ``maybeDeleteResolvedRegularExpressions``)."""
    unused = [r for r in group.resolved_regexes if group.regex_subscribers.get(r, 0) == 0]
    for regex in unused:
        group = group.with_regex(regex, None)
    return group
