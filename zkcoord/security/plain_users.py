"""The users SASL/PLAIN logins are checked against: a file, re-read when it changes.

Owns :class:`PlainUsers`. The file is one of:

* a JAAS file, the one a Kafka broker already has: the ``PlainLoginModule``
  of its ``KafkaServer`` section (or of the one section that has one, or of
  the section named), whose ``user_<name>="<password>"`` options are the
  users;
* a properties file of ``<name>=<password>`` lines.

Rules:

* Passwords are never kept, logged or put in a message: only a SHA-256 digest
  of each, compared with :func:`hmac.compare_digest`. An unknown user is
  compared against a digest of its own, so it costs what a wrong password
  costs.
* :meth:`PlainUsers.load` (at start) raises ConfigError naming the file. Later,
  :meth:`PlainUsers.check` re-reads the file when its size, modification or
  change time or inode differ (a ``stat`` at most every
  ``stat_interval_s``); a file that became unreadable or malformed keeps the
  last good users and is logged once per bad version.
* Reads are small and synchronous: callers on an event loop accept one
  ``stat`` per check interval and a read per change.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from zkcoord.errors import ConfigError
from zkcoord.password import Password
from zkcoord.security.properties import parse_jaas_file, parse_properties

__all__ = ["PlainUsers", "parse_plain_users", "PLAIN_LOGIN_MODULE"]

log = logging.getLogger(__name__)

PLAIN_LOGIN_MODULE = "PlainLoginModule"
SERVER_SECTION = "KafkaServer"
_NO_USER = hashlib.sha256(b"zkcoord: no such user").digest()


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode("utf-8")).digest()


_JAAS_START = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/)*[^\s=:{}#!]+\s*\{", re.DOTALL)


def _looks_like_jaas(text: str) -> bool:
    """A JAAS file opens a section (``Name {``) before anything else; a
    properties file starts with a ``#`` comment or a ``name=`` line."""
    return _JAAS_START.match(text) is not None


def _jaas_users(text: str, where: str, section: str | None) -> dict[str, str]:
    sections = parse_jaas_file(text, where=where)
    with_plain = {name: modules for name, modules in sections.items()
                  if any(m.simple_name == PLAIN_LOGIN_MODULE for m in modules)}
    if section is not None:
        if section not in with_plain:
            raise ConfigError(f"{where}: section {section} has no {PLAIN_LOGIN_MODULE} "
                              f"(sections with one: {', '.join(sorted(with_plain)) or 'none'})")
        chosen = section
    elif SERVER_SECTION in with_plain:
        chosen = SERVER_SECTION
    elif len(with_plain) == 1:
        chosen = next(iter(with_plain))
    elif not with_plain:
        raise ConfigError(f"{where}: no section has a {PLAIN_LOGIN_MODULE} with user_<name>=\"<password>\" "
                          f"options; PLAIN users come from one")
    else:
        raise ConfigError(f"{where}: sections {', '.join(sorted(with_plain))} each have a {PLAIN_LOGIN_MODULE}; "
                          f"name the one to use")
    users: dict[str, str] = {}
    for module in with_plain[chosen]:
        if module.simple_name == PLAIN_LOGIN_MODULE:
            users.update({k[len("user_"):]: v for k, v in module.options.items() if k.startswith("user_")})
    if not users:
        raise ConfigError(f"{where}: the {PLAIN_LOGIN_MODULE} of section {chosen} has no user_<name>=\"<password>\" "
                          f"options")
    return users


def parse_plain_users(text: str, where: str, section: str | None = None) -> dict[str, bytes]:
    """``{user: SHA-256 of the password}`` from a JAAS or properties text."""
    if _looks_like_jaas(text):
        users = _jaas_users(text, where, section)
    else:
        users = parse_properties(text, where=where)
        if not users:
            raise ConfigError(f"{where}: no users; write one <name>=<password> line per user, or point at "
                              f"a JAAS file with a {PLAIN_LOGIN_MODULE}")
    empty = sorted(name for name, password in users.items() if not password)
    if empty:
        raise ConfigError(f"{where}: user(s) {', '.join(empty)} have an empty password; give each a password "
                          f"or remove it")
    if "" in users:
        raise ConfigError(f"{where}: a user with an empty name")
    return {name: _digest(password) for name, password in users.items()}


class PlainUsers:
    """Checks PLAIN logins against the users of ``path``."""

    def __init__(self, path: str | Path, *, section: str | None = None, stat_interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.section = section
        self.stat_interval_s = stat_interval_s
        self._clock = clock
        self._users: dict[str, bytes] | None = None
        self._version: tuple | None = None  # stat of the file the users came from
        self._failed_version: tuple | None = None  # the bad version already logged
        self._next_stat = float("-inf")

    def _stat(self) -> tuple:
        st = os.stat(self.path)
        return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns

    def _read(self) -> tuple[tuple, dict[str, bytes]]:
        where = f"users file {self.path}"
        try:
            version = self._stat()
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{where} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
        return version, parse_plain_users(text, where, self.section)

    def load(self) -> None:
        """Read the file now; ConfigError naming it when it cannot be used."""
        self._version, self._users = self._read()
        self._failed_version = None
        self._next_stat = self._clock() + self.stat_interval_s

    def _refresh(self) -> None:
        now = self._clock()
        if now < self._next_stat:
            return
        self._next_stat = now + self.stat_interval_s
        try:
            version = self._stat()
        except OSError as exc:
            self._keep(("missing", exc.errno), f"users file {self.path} cannot be read ({exc.strerror})")
            return
        if version == self._version or version == self._failed_version:
            return
        try:
            self._version, self._users = self._read()
        except ConfigError as exc:
            self._keep(version, str(exc))
            return
        self._failed_version = None
        log.info("users file %s re-read: %d users", self.path, len(self._users))

    def _keep(self, version: tuple, problem: str) -> None:
        if version != self._failed_version:
            log.warning("%s; keeping the %d users read before", problem, len(self._users or {}))
        self._failed_version = version

    def check(self, username: str, password: Password | str) -> bool:
        """Whether ``password`` is ``username``'s; the same work for an unknown user."""
        if self._users is None:
            self.load()
        self._refresh()
        text = password.value if isinstance(password, Password) else password
        expected = self._users.get(username, _NO_USER)
        matches = hmac.compare_digest(_digest(text), expected)
        return matches and username in self._users

    @property
    def usernames(self) -> list[str]:
        return sorted(self._users or ())

    def __repr__(self) -> str:
        return f"PlainUsers({str(self.path)!r}, {len(self._users or {})} users)"
