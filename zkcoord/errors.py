"""The one exception tree of zkcoord.

Every error zkcoord raises on purpose derives from :class:`ZkcoordError`.
Adapters translate the exceptions of kazoo, kafka-python, PySpark and the OS
into these at their boundary, so the CLI can print one clear line and exit
with the error's ``exit_code`` instead of a traceback::

    ZkcoordError                 exit 1  (generic)
    ├── ConfigError              exit 2  a flag, variable or config key is wrong
    ├── UsageError               exit 2  bad input named by the message
    ├── ServiceUnavailableError  exit 2  ZooKeeper / Kafka cannot be reached
    ├── AuthenticationError      exit 2  ZooKeeper / Kafka / a daemon refused our login
    ├── AuthorizationError       exit 2  logged in, but an ACL refuses what we asked
    ├── SandboxError             exit 1  the local sandbox could not do its job
    │   └── MissingToolError     exit 3  Java / Maven / an install is missing
    ├── NotFoundError            exit 1  a named group, topic or znode is absent
    ├── StateError               exit 1  stored state is corrupt or too large
    │   └── StateTooLargeError           a group's state over --max-state-bytes
    ├── GroupRequestError        exit 1  a group refuses a request: its Kafka error
    │                                    code goes in the answer (zkcoord.core.consumer)
    └── WireProtocolError        exit 1  a Kafka frame that cannot be read or
                                         written (zkcoord.wire.errors: its
                                         subclasses close that connection)

Each message says what was wrong and, where there is one, what to do.
"""

from __future__ import annotations


class ZkcoordError(Exception):
    """Base of every error zkcoord raises on purpose."""

    exit_code = 1


class ConfigError(ZkcoordError):
    exit_code = 2


class UsageError(ZkcoordError):
    exit_code = 2


class ServiceUnavailableError(ZkcoordError):
    exit_code = 2


class AuthenticationError(ZkcoordError):
    """A server refused our credentials (SASL, TLS client certificate,
    ZooKeeper auth). The message names the server, the mechanism and the
    user, never a password."""

    exit_code = 2


class AuthorizationError(ZkcoordError):
    """Logged in, but the server's ACLs refuse what we asked (Kafka's
    *_AUTHORIZATION_FAILED, ZooKeeper's NoAuth)."""

    exit_code = 2


class SandboxError(ZkcoordError):
    exit_code = 1


class MissingToolError(SandboxError):
    exit_code = 3


class NotFoundError(ZkcoordError):
    exit_code = 1


class StateError(ZkcoordError):
    exit_code = 1


class StateTooLargeError(StateError):
    """A group's state would be over the size limit; nothing was written. The
    daemon answers GROUP_MAX_SIZE_REACHED, as Kafka does for a group that
    cannot take another member."""


class GroupRequestError(ZkcoordError):
    """A group refuses a request with a Kafka error code (``code``, an
    :class:`~zkcoord.core.errors.ErrorCode`), as Kafka's coordinator throws an
    ApiException; the handler that decides the request answers with it."""

    def __init__(self, code, message: str = ""):
        super().__init__(message or code.name)
        self.code = code


class NotOwnerError(ZkcoordError):
    """This daemon no longer owns the group (deposed, expired, or someone else
    wrote its state); nothing was written. Retriable: the client should look
    the coordinator up again (Kafka's NOT_COORDINATOR)."""

    exit_code = 1
    retriable = True

    def __init__(self, message: str, group: str | None = None) -> None:
        super().__init__(message)
        self.group = group


class NodeIdInUseError(ConfigError):
    """Another live daemon is registered with this node id."""

    exit_code = 2


class ConflictError(ZkcoordError):
    """Another process changed what this command was changing (a versioned
    write lost the race); nothing of ours was written. Re-run the command."""

    exit_code = 1
