"""The ZooKeeper login options every command with ``--zookeeper`` takes.

This module owns one click decorator, :func:`zookeeper_login_options`: the
flags ``--zookeeper-sasl-jaas-file``, ``--zookeeper-sasl-client-section``,
``--zookeeper-digest`` and ``--zookeeper-set-acl``, each also a ``ZKCOORD_``
environment variable, as the daemon's settings of the same names
(:mod:`zkcoord.config`). The decorated command receives them as one
keyword argument, ``zk_security``: a :class:`~zkcoord.zk.auth.ZkSecurity`,
or None when none is given (no login, open ACLs).

The digest is a :class:`~zkcoord.password.Password` from the moment
click hands it over; its help says to prefer the environment variable (a
command line shows in ``ps``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from zkcoord.password import Password
from zkcoord.zk.auth import DEFAULT_CLIENT_SECTION, zk_security

__all__ = ["zookeeper_login_options", "LOGIN_PARAMS"]

LOGIN_PARAMS = ("zookeeper_sasl_jaas_file", "zookeeper_sasl_client_section", "zookeeper_digest", "zookeeper_set_acl")

_OPTIONS = [
    click.option("--zookeeper-sasl-jaas-file", envvar="ZKCOORD_ZOOKEEPER_SASL_JAAS_FILE", show_envvar=True,
                 default=None, metavar="FILE",
                 help="JAAS file whose Client section logs in to ZooKeeper with SASL (DigestLoginModule: "
                      "DIGEST-MD5; Krb5LoginModule: GSSAPI).", type=click.Path(dir_okay=False)),
    click.option("--zookeeper-sasl-client-section", envvar="ZKCOORD_ZOOKEEPER_SASL_CLIENT_SECTION",
                 show_envvar=True, default=DEFAULT_CLIENT_SECTION, show_default=True, metavar="NAME",
                 help="The JAAS file's section to log in with (ZooKeeper's zookeeper.sasl.clientconfig)."),
    click.option("--zookeeper-digest", envvar="ZKCOORD_ZOOKEEPER_DIGEST", show_envvar=True, default=None,
                 metavar="USER:PASSWORD",
                 help="A ZooKeeper digest login. Prefer the environment variable: a command line shows in ps."),
    click.option("--zookeeper-set-acl", envvar="ZKCOORD_ZOOKEEPER_SET_ACL", show_envvar=True, is_flag=True,
                 default=False,
                 help="Create znodes so that only this ZooKeeper login writes them and everybody reads them, as "
                      "the daemons do with zookeeper_set_acl (Kafka's zookeeper.set.acl); needs a login."),
]


def zookeeper_login_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the login options to a click command; it gets ``zk_security``."""

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> Any:
        digest = kwargs.pop("zookeeper_digest")
        kwargs["zk_security"] = zk_security(kwargs.pop("zookeeper_sasl_jaas_file"),
                                            kwargs.pop("zookeeper_sasl_client_section"),
                                            Password(digest) if digest else None, kwargs.pop("zookeeper_set_acl"))
        return func(*args, **kwargs)

    for option in reversed(_OPTIONS):
        command = option(command)
    return command
