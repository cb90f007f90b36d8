"""A daemon's security, built from its settings and kept running beside it.

Owns turning :class:`~zkcoord.config.DaemonConfig`'s security settings into
what the listeners and handlers use, and the watchers that keep it current:

* the daemon listener's and the gateway's :class:`ListenerSecurity` (TLS
  context, client-certificate principals, SASL logins);
* the :class:`Credentials` logins are checked against: SCRAM from
  ZooKeeper (``/config/users``, cached and watched), PLAIN from a file;
* the :class:`GroupAccess` of the API handlers: Kafka's ACLs from
  ZooKeeper through :class:`~zkcoord.zk.kafka_acls.KafkaAclWatcher`, or
  none (everything allowed) without ``authorizer_class_name``;
* the daemon's own Kafka login (``kafka_client_config``), and what the
  gateway needs to reach the brokers: TLS to them, and whether a client's
  SASL login passes through to its broker (the brokers speak SASL too) or
  is checked by the gateway alone (they do not).

Loading a key store or a users file reads files: :meth:`DaemonSecurity.start`
does it in a worker thread. Every problem is a ConfigError naming the
setting, raised before the daemon serves anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from zkcoord.config import DaemonConfig
from zkcoord.errors import ConfigError
from zkcoord.server.authorization import OPEN, GroupAccess
from zkcoord.wire.authentication import Credentials, SaslLogin
from zkcoord.wire.connections import ConnectionInfo
from zkcoord.wire.listener_security import PLAINTEXT_LISTENER, ListenerSecurity, Login

__all__ = ["DaemonSecurity"]

log = logging.getLogger(__name__)

_SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# (mechanisms, credentials, connection) -> the connection's login
LoginFactory = Callable[[tuple[str, ...], Credentials, ConnectionInfo], Login]


def ssl_settings(config: DaemonConfig):
    """The listeners' TLS settings (Kafka's ssl.* names)."""
    from zkcoord.security.tls import SslSettings

    return SslSettings(
        keystore_type=config.ssl_keystore_type or None, keystore_location=config.ssl_keystore_location or None,
        keystore_password=config.ssl_keystore_password, key_password=config.ssl_key_password,
        truststore_type=config.ssl_truststore_type or None,
        truststore_location=config.ssl_truststore_location or None,
        truststore_password=config.ssl_truststore_password, client_auth=config.ssl_client_auth,
        enabled_protocols=config.ssl_enabled_protocols, cipher_suites=config.ssl_cipher_suites,
        principal_mapping_rules=config.ssl_principal_mapping_rules)


@dataclass
class DaemonSecurity:
    """:meth:`load` reads the files (key stores, users file, Kafka client
    settings) before anything connects, so a local mistake fails at once;
    :meth:`start` starts the ZooKeeper watchers and builds what the
    listeners use; :meth:`stop` stops the watchers."""

    config: DaemonConfig
    listener: ListenerSecurity = PLAINTEXT_LISTENER
    gateway: dict = field(default_factory=dict)  # GatewaySettings' security fields
    access: GroupAccess = OPEN
    kafka_client: object = None  # KafkaClientSecurity of the daemon's own Kafka connections; None: PLAINTEXT
    _server_context: object = None
    _mapper: object = None
    _plain: object = None
    credentials: Credentials | None = None  # what SASL logins are checked against (its on_login: metrics)
    # The gateway's login when the brokers speak SASL: a client's login passed through to its broker
    # (zkcoord.gateway.login.PassthroughLogin, given by the daemon, which composes the two)
    passthrough_login: LoginFactory | None = None
    _watchers: list = field(default_factory=list)

    @classmethod
    async def load(cls, config: DaemonConfig, *, passthrough_login: LoginFactory | None = None) -> DaemonSecurity:
        security = cls(config, passthrough_login=passthrough_login)
        if config.kafka_client_config:
            from zkcoord.kafka.client_security import KafkaClientSecurity

            security.kafka_client = await asyncio.to_thread(KafkaClientSecurity.from_file, config.kafka_client_config)
        if any(p.endswith("SSL") for p in security._protocols):
            settings = ssl_settings(config)
            security._server_context = await asyncio.to_thread(settings.server_context)
            security._mapper = settings.principal_mapper()
        if "PLAIN" in config.sasl_mechanisms and any(p.startswith("SASL") for p in security._protocols):
            from zkcoord.security.plain_users import PlainUsers

            security._plain = PlainUsers(config.sasl_plain_users_file)
            await asyncio.to_thread(security._plain.load)
        if config.gateway_listen:
            security._check_gateway()
        return security

    @property
    def _protocols(self) -> set[str]:
        config = self.config
        return {config.listener_protocol} | ({config.gateway_protocol} if config.gateway_listen else set())

    async def start(self, conn) -> None:
        try:
            await self._build(conn)
        except BaseException:
            await self.stop()
            raise

    async def _build(self, conn) -> None:
        config = self.config
        credentials = self.credentials = Credentials(plain=self._plain)
        if any(p.startswith("SASL") for p in self._protocols) and any(m in _SCRAM for m in config.sasl_mechanisms):
            from zkcoord.zk.scram_credentials import ScramCredentialStore

            credentials.scram_store = ScramCredentialStore(conn)
            await credentials.scram_store.start()
            self._watchers.append(credentials.scram_store)
        self.listener = _listener(config.listener_protocol, config, self._server_context, self._mapper, credentials,
                                  SaslLogin)
        if config.gateway_listen:
            self.gateway = self._gateway(config, self._server_context, self._mapper, credentials)
        if config.authorizer_class_name:
            self.access = GroupAccess(await self._authorizer(config, conn))

    def _check_gateway(self) -> None:
        client, config = self.kafka_client, self.config
        if client is not None and client.uses_sasl and not config.gateway_protocol.startswith("SASL"):
            raise ConfigError(
                f"the brokers speak {client.security_protocol} (kafka_client_config) but the gateway listens "
                f"{config.gateway_protocol}: the gateway passes each client's SASL login through to its broker, "
                "so its clients must log in too; make gateway_listen SASL_SSL:// or SASL_PLAINTEXT://")

    def _gateway(self, config: DaemonConfig, server_context, mapper, credentials: Credentials) -> dict:
        client = self.kafka_client
        brokers_sasl = client is not None and client.uses_sasl
        if brokers_sasl and self.passthrough_login is None:
            raise RuntimeError("the brokers speak SASL: DaemonSecurity.load needs the gateway's passthrough_login")
        return {
            "security": _listener(config.gateway_protocol, config, server_context, mapper, credentials,
                                  self.passthrough_login if brokers_sasl else SaslLogin),
            "upstream_ssl": client.ssl.client_context() if client is not None and client.uses_tls else None,
            "client_security": client,
            "passthrough": brokers_sasl,
        }

    async def _authorizer(self, config: DaemonConfig, conn):
        from zkcoord.core.acl import Authorizer, AuthorizerSettings
        from zkcoord.zk.kafka_acls import KafkaAclWatcher

        authorizer = Authorizer(AuthorizerSettings.from_properties(config.super_users,
                                                                   config.allow_everyone_if_no_acl_found))
        watcher = KafkaAclWatcher(conn, authorizer)
        await watcher.start()
        self._watchers.append(watcher)
        log.info("enforcing Kafka's ACLs from ZooKeeper: %d ACLs on %d resources, super users %s",
                 authorizer.acl_count, authorizer.resource_count, config.super_users or "none")
        return authorizer

    async def stop(self) -> None:
        for watcher in reversed(self._watchers):
            try:
                await watcher.stop()
            except Exception as exc:  # keep stopping the others
                log.warning("stopping %s: %s", type(watcher).__name__, exc)
        self._watchers.clear()


def _listener(protocol: str, config: DaemonConfig, server_context, mapper, credentials: Credentials,
              login: LoginFactory) -> ListenerSecurity:
    """A listener's security; on SASL listeners each new connection's login is ``login``'s: checked
    here (SaslLogin), or passed through to the broker (the gateway's, when the brokers speak SASL)."""
    tls = protocol.endswith("SSL")
    mechanisms = config.sasl_mechanisms
    new_login = (lambda info: login(mechanisms, credentials, info)) if protocol.startswith("SASL") else None
    return ListenerSecurity(protocol, server_context if tls else None,
                            _certificate_principal(mapper) if protocol == "SSL" else None, new_login)


def _certificate_principal(mapper):
    from zkcoord.security.ssl_principal import peer_principal

    return lambda der: peer_principal(der, mapper)
