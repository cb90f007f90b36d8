"""zkcoord's ZooKeeper login, and the ACLs of the znodes it creates.

This module owns :class:`ZkSecurity`, the ZooKeeper side of issue 17: who
zkcoord logs in to ZooKeeper as, and which ACL what it creates gets. It
turns the settings into kazoo's client options and names a refused login.

Logins (either or both, as kazoo supports them):

* **SASL**, from a JAAS file's ``Client`` section (another section with
  ``sasl_client_section``, as ZooKeeper's ``zookeeper.sasl.clientconfig``
  names it), read the way ZooKeeper's and Kafka's Java clients read it:
  ``org.apache.zookeeper.server.auth.DigestLoginModule`` with ``username``
  and ``password`` is SASL DIGEST-MD5; ``com.sun.security.auth.module.
  Krb5LoginModule`` is GSSAPI with the Kerberos credentials of the process
  (kazoo and pure-sasl use the ticket cache: ``kinit -kt <keyTab>
  <principal>`` first), its ``principal`` passed on.
* **digest**: ``USER:PASSWORD``, ZooKeeper's ``digest`` scheme (kazoo's
  ``auth_data``). ZooKeeper accepts any digest login; the identity is
  ``digest:USER:<base64 sha1>`` of the password, so a wrong password is only
  another identity: :func:`digest_mismatch` tells it from zkcoord's root
  znode's ACL.

ACLs: with ``set_acl`` (Kafka's ``zookeeper.set.acl``) every znode zkcoord
creates gets Kafka's secure default, ``CREATOR_ALL_ACL + READ_ACL_UNSAFE``
(``defaultAcls`` in Kafka's ``ZkData.scala``): ZooKeeper gives every right to
the identities the creating session logged in as, and READ to everybody.
kazoo applies a client's ``default_acl`` to ``create``, ``ensure_path`` and
transaction creates, so this one option covers every create of
:mod:`zkcoord.zk`. Without ``set_acl`` znodes are open, as before.

Rules:

1. The legacy offsets root (``/consumers``) and each ``/consumers/<group>``
   stay open whatever ``set_acl`` says, as Kafka keeps ``/consumers`` open:
   legacy ZooKeeper consumers register ``ids`` and ``owners`` under them.
   Their creators pass :data:`OPEN_ACL` explicitly.
2. ``set_acl`` without a login is a ConfigError: ZooKeeper refuses a create
   with an ``auth`` ACL from a session that has no authenticated identity,
   and Kafka refuses ``zookeeper.set.acl`` without a JAAS login.
3. No secret in any message or repr: passwords are
   :class:`~zkcoord.password.Password`; messages name the file,
   the section, the mechanism and the user.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, Id, Permissions

from zkcoord.errors import ConfigError
from zkcoord.password import Password
from zkcoord.security.properties import LoginModule, read_jaas_file

__all__ = ["ZkSecurity", "SaslLogin", "zk_security", "SECURE_ACL", "OPEN_ACL", "DIGEST_LOGIN_MODULE",
           "KRB5_LOGIN_MODULE", "DEFAULT_CLIENT_SECTION", "acl_kind", "acl_text", "digest_id", "digest_mismatch"]

DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
KRB5_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
DEFAULT_CLIENT_SECTION = "Client"  # ZooKeeper's zookeeper.sasl.clientconfig default
SASL_SERVICE = "zookeeper"  # ZooKeeper's zookeeper.sasl.client.username default
SECURE_ACL: list[ACL] = [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]
OPEN_ACL: list[ACL] = list(OPEN_ACL_UNSAFE)


@dataclass(frozen=True)
class SaslLogin:
    """The SASL login of a JAAS section: ``DIGEST-MD5`` (username, password)
    or ``GSSAPI`` (principal, None for the ticket cache's default)."""

    mechanism: str
    source: str  # "JAAS file <path>, section Client": for messages
    username: str = ""
    password: Password | None = None
    principal: str | None = None

    def sasl_options(self) -> dict[str, Any]:
        """kazoo's ``sasl_options`` (a new dict: kazoo adds to it)."""
        if self.mechanism == "DIGEST-MD5":
            return {"mechanism": "DIGEST-MD5", "username": self.username, "password": self.password.value,
                    "service": SASL_SERVICE}
        options = {"mechanism": "GSSAPI", "service": SASL_SERVICE}
        if self.principal:
            options["principal"] = self.principal
        return options

    @property
    def user(self) -> str:
        return self.username if self.mechanism == "DIGEST-MD5" else (self.principal or "the ticket cache's principal")


@dataclass(frozen=True)
class ZkSecurity:
    """How zkcoord logs in to ZooKeeper and which ACL its znodes get.

    ``sasl_jaas_file``: a JAAS file whose ``sasl_client_section`` logs in
    with SASL; ``digest``: ``USER:PASSWORD`` (a str becomes a Password);
    ``set_acl``: create znodes with :data:`SECURE_ACL`. ``sasl`` is the JAAS
    section already read (:meth:`loaded`), for processes that cannot read the
    file (Spark executors). Validated on construction, without I/O.
    """

    sasl_jaas_file: str = ""
    sasl_client_section: str = DEFAULT_CLIENT_SECTION
    digest: Password | None = None
    set_acl: bool = False
    sasl: SaslLogin | None = None

    def __post_init__(self) -> None:
        if isinstance(self.digest, str):
            object.__setattr__(self, "digest", Password(self.digest))
        if self.digest is not None and not isinstance(self.digest, Password):
            raise ConfigError(f"zookeeper_digest must be text USER:PASSWORD, got a {type(self.digest).__name__}")
        if self.digest is not None:
            user, colon, _ = self.digest.value.partition(":")
            if not colon or not user:
                raise ConfigError("zookeeper_digest (--zookeeper-digest, ZKCOORD_ZOOKEEPER_DIGEST) is not "
                                  "USER:PASSWORD: it needs a user name, then ':', then the password (its value "
                                  "is not shown)")
        if not isinstance(self.sasl_jaas_file, str):
            raise ConfigError(f"zookeeper_sasl_jaas_file must be a path, got {self.sasl_jaas_file!r}")
        if not isinstance(self.sasl_client_section, str) or not self.sasl_client_section.strip():
            raise ConfigError("zookeeper_sasl_client_section (--zookeeper-sasl-client-section) is empty; give "
                              "the JAAS file's section to log in with (ZooKeeper's default: Client)")
        if not isinstance(self.set_acl, bool):
            raise ConfigError(f"zookeeper_set_acl must be true or false, got {self.set_acl!r}")
        if self.set_acl and not self.logs_in:
            raise ConfigError(
                "zookeeper_set_acl (--zookeeper-set-acl, ZKCOORD_ZOOKEEPER_SET_ACL) needs a ZooKeeper login: "
                "ZooKeeper refuses to create a znode only its creator may write from a session that has not "
                "logged in (Kafka refuses zookeeper.set.acl without a JAAS login too); give "
                "zookeeper_sasl_jaas_file (a JAAS file with a Client section) or zookeeper_digest "
                "(USER:PASSWORD, best from ZKCOORD_ZOOKEEPER_DIGEST)")

    @property
    def logs_in(self) -> bool:
        return bool(self.sasl_jaas_file) or self.sasl is not None or self.digest is not None

    @property
    def digest_user(self) -> str | None:
        return self.digest.value.partition(":")[0] if self.digest is not None else None

    def login(self) -> SaslLogin | None:
        """The SASL login: :attr:`sasl`, else the JAAS file's section (read
        now), else None. ConfigError naming the file and section."""
        if self.sasl is not None:
            return self.sasl
        if not self.sasl_jaas_file:
            return None
        sections = read_jaas_file(self.sasl_jaas_file)
        return sasl_login_of(sections, self.sasl_client_section, self.sasl_jaas_file)

    def loaded(self) -> ZkSecurity:
        """This, with the JAAS section read into :attr:`sasl` (the file is not
        needed any more: what a Spark task receives)."""
        return dataclasses.replace(self, sasl=self.login())

    @property
    def default_acl(self) -> list[ACL] | None:
        """kazoo's ``default_acl``: :data:`SECURE_ACL` with ``set_acl``, else None (open)."""
        return list(SECURE_ACL) if self.set_acl else None

    def kazoo_options(self) -> dict[str, Any]:
        """``auth_data``, ``sasl_options`` and ``default_acl`` for a KazooClient."""
        options: dict[str, Any] = {"default_acl": self.default_acl}
        sasl = self.login()
        if sasl is not None:
            options["sasl_options"] = sasl.sasl_options()
        if self.digest is not None:
            options["auth_data"] = {("digest", self.digest.value)}
        return options

    def identities(self) -> frozenset[Id] | None:
        """The ZooKeeper identities this login gets (what :data:`SECURE_ACL`
        gives every right to); None when ZooKeeper's name for it is not known
        here (GSSAPI: the server maps the Kerberos principal)."""
        found = set()
        sasl = self.login()
        if sasl is not None and sasl.mechanism != "DIGEST-MD5":
            return None
        if sasl is not None:
            found.add(Id("sasl", sasl.username))
        if self.digest is not None:
            found.add(Id("digest", digest_id(self.digest_user, self.digest.value.partition(":")[2])))
        return frozenset(found)

    def describe(self) -> str:
        """The login for messages: ``SASL DIGEST-MD5 as user 'zkcoord' (JAAS file
        /etc/zk.jaas, section Client)``; never a password."""
        parts = []
        try:
            sasl = self.login()
        except ConfigError:  # a file that cannot be read any more: name it at least
            sasl = None
            parts.append(f"SASL (JAAS file {self.sasl_jaas_file}, section {self.sasl_client_section})")
        if sasl is not None:
            parts.append(f"SASL {sasl.mechanism} as user {sasl.user!r} ({sasl.source})")
        if self.digest is not None:
            parts.append(f"digest as user {self.digest_user!r}")
        return " and ".join(parts) or "no login"


def zk_security(sasl_jaas_file: str | None = None, sasl_client_section: str | None = None,
                digest: Password | str | None = None, set_acl: bool | None = False) -> ZkSecurity | None:
    """The ZkSecurity of these settings; None when they ask for nothing
    (no login, no ACLs: how zkcoord talked to ZooKeeper before)."""
    if not sasl_jaas_file and not digest and not set_acl:
        return None
    return ZkSecurity(sasl_jaas_file or "", sasl_client_section or DEFAULT_CLIENT_SECTION,
                      digest or None, bool(set_acl))


def sasl_login_of(sections: dict[str, list[LoginModule]], section: str, path: str) -> SaslLogin:
    """The SASL login of ``section`` of the JAAS file at ``path``."""
    where = f"JAAS file {path}, section {section}"
    if section not in sections:
        known = ", ".join(sorted(sections)) or "none"
        raise ConfigError(f"JAAS file {path} has no section {section!r} (its sections: {known}); add one, or name "
                          "another with zookeeper_sasl_client_section")
    modules = sections[section]
    if len(modules) != 1:
        raise ConfigError(f"{where}: expected one login module, found {len(modules)}; ZooKeeper's client logs "
                          f"in with {DIGEST_LOGIN_MODULE} or {KRB5_LOGIN_MODULE}")
    module = modules[0]
    if module.class_name == DIGEST_LOGIN_MODULE:
        missing = [key for key in ("username", "password") if not module.options.get(key)]
        if missing:
            raise ConfigError(f"{where}: DigestLoginModule needs the options username and password "
                              f"({' and '.join(missing)} missing or empty)")
        return SaslLogin("DIGEST-MD5", where, username=module.options["username"],
                         password=Password(module.options["password"]))
    if module.class_name == KRB5_LOGIN_MODULE:
        from puresasl.mechanisms import have_kerberos  # kazoo's SASL library: GSSAPI needs its kerberos module

        if not have_kerberos:
            raise ConfigError(f"{where}: Krb5LoginModule (GSSAPI) needs the Python package kerberos "
                              "(pip install kerberos), which kazoo's SASL library uses; it is not installed")
        return SaslLogin("GSSAPI", where, principal=module.options.get("principal") or None)
    raise ConfigError(f"{where}: login module {module.class_name} is not one ZooKeeper's client uses; use "
                      f"{DIGEST_LOGIN_MODULE} (username, password) or {KRB5_LOGIN_MODULE}")


# -- reading ACLs ------------------------------------------------------------------------------


def digest_id(user: str, password: str) -> str:
    """ZooKeeper's digest identity: ``user:base64(sha1("user:password"))``."""
    digest = base64.b64encode(hashlib.sha1(f"{user}:{password}".encode()).digest()).decode()
    return f"{user}:{digest}"


def acl_text(acl: ACL) -> str:
    """``sasl:zkcoord=ALL``, ``world:anyone=READ``; a digest's hash is cut
    short (it stands for a password)."""
    ident = acl.id.id
    if acl.id.scheme == "digest" and ":" in ident:
        user, _, digest = ident.partition(":")
        ident = f"{user}:{digest[:6]}..."
    return f"{acl.id.scheme}:{ident}={','.join(acl.acl_list)}"


def acl_kind(acls: list[ACL]) -> str:
    """``open`` (everybody may do everything), ``secure`` (everybody reads,
    only logged-in identities do more: what ``set_acl`` creates) or ``other``."""
    anyone = Id("world", "anyone")
    world = [a for a in acls if a.id == anyone]
    if len(acls) == 1 and world and world[0].perms == Permissions.ALL:
        return "open"
    others = [a for a in acls if a.id != anyone]
    if (len(world) == 1 and world[0].perms == Permissions.READ and others
            and all(a.id.scheme not in ("world", "ip") and a.perms == Permissions.ALL for a in others)):
        return "secure"
    return "other"


def digest_mismatch(acls: list[ACL], security: ZkSecurity) -> str | None:
    """When ``acls`` give rights to the digest user of ``security`` under
    another password only: which user (a wrong password), else None."""
    user = security.digest_user
    if user is None:
        return None
    ours = digest_id(user, security.digest.value.partition(":")[2])
    theirs = [a.id.id for a in acls if a.id.scheme == "digest" and a.id.id.partition(":")[0] == user]
    return user if theirs and ours not in theirs else None
