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
refused at the heartbeat that sends it: INVALID_REGULAR_EXPRESSION, in
RE2J's words (:mod:`.re2j`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from functools import lru_cache

import re2

from zkcoord.core.consumer import re2j
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


@lru_cache(maxsize=1024)
def compiled(regex: str):
    """The compiled expression; GroupRequestError INVALID_REGULAR_EXPRESSION
    with Kafka's message: RE2J's description of the first error RE2J's
    parser meets (RE2's error, or a rule of RE2J's own, whichever comes
    first in the expression)."""
    quirk = re2j.refusal(regex)
    try:
        pattern = re2.compile(re2j.as_re2(regex), _OPTIONS)
    except Exception as exc:  # re2.error; its text names the construct
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        error = (re2j.error_at(regex, detail), re2j.description(detail))
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
