"""What the thin consumer raises, and the translation of kafka-python's
exceptions into it (done once, at the :class:`~zkcoord.client.Consumer`
boundary)::

    ZkcoordError (zkcoord.errors)
    ├── ConfigError               a setting is wrong (also kafka-python's KafkaConfigurationError)
    ├── UsageError                a call the consumer's state does not allow
    ├── ServiceUnavailableError   no Kafka broker answered in bootstrap_timeout_ms
    ├── AuthenticationError       a broker or daemon refused the login (SASL, TLS)
    ├── AuthorizationError        an ACL refused the group or a topic (*_AUTHORIZATION_FAILED)
    └── ConsumerError             anything else Kafka or zkcoord reported; ``retriable``
        ├── CommitFailedError     the group rebalanced or dropped this member; poll() rejoins
        ├── FencedInstanceError   another consumer runs with this group_instance_id (or still holds it)
        ├── RebalanceListenerError  the rebalance listener raised (the cause is chained)
        └── ConsumerTimeoutError  a blocking call ran out of its timeout_ms
"""

from __future__ import annotations

import kafka.errors as kerr

from zkcoord.errors import AuthenticationError, AuthorizationError, ConfigError, UsageError, ZkcoordError


class ConsumerError(ZkcoordError):
    """A failure reported by Kafka or zkcoord; ``retriable`` as Kafka says."""

    exit_code = 1

    def __init__(self, message: str, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class CommitFailedError(ConsumerError):
    pass


class FencedInstanceError(ConsumerError):
    pass


class RebalanceListenerError(ConsumerError):
    pass


class ConsumerTimeoutError(ConsumerError):
    pass


def translate(exc: BaseException, doing: str, who: str = "") -> ZkcoordError | None:
    """The zkcoord error for a kafka-python (or argument) error raised while
    ``doing``, or None when ``exc`` is not ours to translate; ``who``: the
    login, for refusals (``SASL_SSL, SCRAM-SHA-512 as alice``)."""
    if isinstance(exc, ZkcoordError):
        return exc
    as_who = f" ({who})" if who else ""
    if isinstance(exc, (kerr.SaslAuthenticationFailedError, kerr.IllegalSaslStateError,
                        kerr.UnsupportedSaslMechanismError)):
        return AuthenticationError(f"{doing}: a broker or zkcoord daemon refused the login{as_who}: "
                                   f"{exc or _name(exc)}; check the consumer's security settings (--command-config)")
    if isinstance(exc, kerr.AuthorizationError):  # GROUP_, TOPIC_, CLUSTER_AUTHORIZATION_FAILED
        return AuthorizationError(f"{doing}: not authorized{as_who}: {exc or _name(exc)}; an ACL must allow READ on "
                                  "the group and the topics")
    if isinstance(exc, kerr.KafkaConfigurationError):
        return ConfigError(f"{doing}: {exc}")
    if isinstance(exc, kerr.IllegalStateError):
        return UsageError(f"{doing}: {exc}")
    if isinstance(exc, ValueError):
        return UsageError(f"{doing}: {exc}")
    if isinstance(exc, (kerr.CommitFailedError, kerr.RebalanceInProgressError, kerr.UnknownMemberIdError,
                        kerr.IllegalGenerationError, kerr.StaleMemberEpochError, kerr.FencedMemberEpochError)):
        return CommitFailedError(
            f"{doing}: the group rebalanced or no longer counts this consumer as a member ({_name(exc)}); "
            "call poll() to rejoin, then commit what you consume next", retriable=True)
    if isinstance(exc, kerr.UnreleasedInstanceIdError):
        return FencedInstanceError(f"{doing}: the group_instance_id is still held by a member that did not leave "
                                   "(another consumer runs with it, or an earlier one was fenced and its session "
                                   "has not expired); give each running consumer its own, or wait out the session "
                                   "timeout")
    if isinstance(exc, kerr.FencedInstanceIdError):
        return FencedInstanceError(f"{doing}: another consumer uses this group_instance_id; give each "
                                   "running consumer its own")
    if isinstance(exc, kerr.KafkaTimeoutError):
        return ConsumerTimeoutError(f"{doing}: timed out ({exc}); is a zkcoord daemon or Kafka broker "
                                    "reachable?", retriable=True)
    if isinstance(exc, kerr.KafkaError):
        cause = exc.__cause__
        if cause is not None and "rebalance callback" in str(exc):
            return RebalanceListenerError(f"{doing}: the rebalance listener raised {cause!r}")
        return ConsumerError(f"{doing}: {_name(exc)}", retriable=bool(getattr(exc, "retriable", False)))
    return None


def _name(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
