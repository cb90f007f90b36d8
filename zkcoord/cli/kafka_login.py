"""The Kafka login option every command with ``--bootstrap-servers`` takes.

This module owns one click decorator, :func:`kafka_login_options`: the flag
``--command-config FILE`` (the name Kafka's own tools give it, as in
``kafka-consumer-groups --command-config``), a Java client properties file
with Kafka's names (``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.truststore.location``, ...). Its default is the
environment variable ``ZKCOORD_KAFKA_CLIENT_CONFIG``, the same one the
daemon's ``kafka_client_config`` setting reads, so one export serves the
daemons and the commands.

The decorated command receives one keyword argument, ``kafka_security``: a
:class:`~zkcoord.kafka.client_security.KafkaClientSecurity` read from the
file (its stores loaded, so a wrong path or password fails before any
connection), or None without a file (PLAINTEXT). The same settings log in to
the zkcoord daemons where a command talks to them (``describe``, ``groups``,
``consume``): in a secured deployment daemons and brokers share the users.

A bad file is a :class:`~zkcoord.errors.ConfigError` (one line, exit 2)
naming the file and the setting, never a secret: every password is a
:class:`~zkcoord.password.Password` from the moment it is read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from zkcoord.config import KAFKA_CLIENT_CONFIG_ENV

if TYPE_CHECKING:
    from zkcoord.kafka.client_security import KafkaClientSecurity

__all__ = ["kafka_login_options", "read_command_config", "COMMAND_CONFIG_ENV", "LOGIN_PARAMS"]

COMMAND_CONFIG_ENV = KAFKA_CLIENT_CONFIG_ENV
LOGIN_PARAMS = ("command_config",)

_OPTION = click.option(
    "--command-config", envvar=COMMAND_CONFIG_ENV, show_envvar=True, default=None, metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Kafka client properties (security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location, "
         "...) for the brokers and the zkcoord daemons, as Kafka's tools take them [default: PLAINTEXT].")


def read_command_config(path: str | None) -> KafkaClientSecurity | None:
    """The settings in ``path`` (None or "" -> None); ConfigError naming the file."""
    if not path:
        return None
    from zkcoord.kafka.client_security import KafkaClientSecurity  # imported when used: TLS and SASL modules

    return KafkaClientSecurity.from_file(path)


def kafka_login_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--command-config`` to a click command; it gets ``kafka_security``."""

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> Any:
        kwargs["kafka_security"] = read_command_config(kwargs.pop("command_config"))
        return func(*args, **kwargs)

    return _OPTION(command)
