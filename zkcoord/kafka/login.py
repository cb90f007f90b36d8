"""Logging in to Kafka brokers (and zkcoord daemons) before kafka-python's clients are built.

This module owns two things every zkcoord client of Kafka needs on top of
:class:`~zkcoord.kafka.client_security.KafkaClientSecurity`:

* :func:`check_login`: one connection to the first bootstrap server that
  accepts one, with TLS and the SASL login done by
  :func:`~zkcoord.kafka.client_security.open_kafka_connection`, then
  closed. kafka-python 3.0.12 retries every failed bootstrap connection
  until its bootstrap time-out, whatever the reason: a refused SCRAM login
  (SaslAuthenticationFailedError on a broker's answer), an untrusted
  certificate, TLS or SASL against a PLAINTEXT listener (ILLEGAL_SASL_STATE,
  or a reset during the handshake) all end as ``KafkaTimeoutError('Unable
  to bootstrap from ...')`` after ``bootstrap_timeout_ms``. The check
  fails at the first answer instead, as one
  :class:`~zkcoord.errors.AuthenticationError` naming the servers, the
  protocol, the mechanism and the user.
* :func:`portable`: the same settings with the stores' contents held inline
  (PEM text in Passwords), for a process on another machine (a Spark
  executor) that cannot read the files this one read.

Rules: PLAINTEXT settings (or none) are not checked (nothing can be refused;
kafka-python reports an unreachable cluster itself). No secret in any message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from cryptography.hazmat.primitives import serialization

from zkcoord.errors import AuthenticationError, ServiceUnavailableError
from zkcoord.kafka.client_security import KafkaClientSecurity, open_kafka_connection
from zkcoord.password import Password

__all__ = ["check_login", "probe_login", "portable", "split_servers", "SETTINGS_HINT"]

log = logging.getLogger(__name__)
T = TypeVar("T")
SETTINGS_HINT = "check the client properties (--command-config, ZKCOORD_KAFKA_CLIENT_CONFIG) and the user's password"
DEFAULT_KAFKA_PORT = 9092


def split_servers(servers: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (a bare host: port 9092) as (host, port) pairs."""
    found = []
    for item in (s.strip() for s in servers.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            host, port = item, str(DEFAULT_KAFKA_PORT)
        found.append((host.strip("[]"), int(port)))
    return found


async def probe_login(servers: str, security: KafkaClientSecurity | None, *, timeout_s: float,
                      what: str = "Kafka", client_id: str = "zkcoord") -> None:
    """Log in to the first of ``servers`` that answers (within ``timeout_s`` in all).
    AuthenticationError when one refuses the login (the others are not tried: a
    cluster's listeners share their settings); ServiceUnavailableError when none answers."""
    if security is None or not (security.uses_tls or security.uses_sasl):
        return
    reasons = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    for host, port in split_servers(servers):
        try:
            connection = await open_kafka_connection(host, port, security, client_id=client_id,
                                                     timeout_s=max(0.1, deadline - loop.time()))
        except AuthenticationError as exc:
            raise AuthenticationError(f"{what} at {servers} refused the login ({security.describe()}): {exc}; "
                                      f"{SETTINGS_HINT}") from None
        except ServiceUnavailableError as exc:
            reasons.append(str(exc))
            if loop.time() < deadline:
                continue
            break
        await connection.close()
        log.debug("logged in to %s at %s:%s (%s)", what, host, port, security.describe())
        return
    raise ServiceUnavailableError(f"no server of {what} at {servers} answered a {security.security_protocol} "
                                  f"connection within {timeout_s:g} s: {'; '.join(reasons)}")


def check_login(servers: str, security: KafkaClientSecurity | None, *, timeout_s: float, what: str = "Kafka",
                client_id: str = "zkcoord") -> None:
    """Blocking :func:`probe_login` (for kafka-python's callers, which block too)."""
    if security is None or not (security.uses_tls or security.uses_sasl):
        return
    _run_blocking(probe_login(servers, security, timeout_s=timeout_s, what=what, client_id=client_id))


def _run_blocking(coroutine) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # called from a coroutine (a blocking call in async code): its loop cannot run another
    with ThreadPoolExecutor(1, thread_name_prefix="zkcoord-login-check") as pool:
        return pool.submit(asyncio.run, coroutine).result()


def portable(security: KafkaClientSecurity | None) -> KafkaClientSecurity | None:
    """``security`` with its trust store and key store read now and held inline
    (``ssl.truststore.certificates``, ``ssl.keystore.key`` +
    ``ssl.keystore.certificate.chain``, PEM text in Passwords): it pickles and
    works where the files do not exist. The key stays encrypted with
    ``ssl.key.password`` when there is one."""
    if security is None or not security.uses_tls:
        return security
    tls = security.ssl
    changes: dict[str, object] = {}
    if tls.truststore_location:
        changes.update(truststore_location=None, truststore_type=None, truststore_password=None,
                       truststore_certificates=Password(tls.trusted_certificates_pem()))
    if tls.keystore_location:
        key, chain = tls.key_material()
        password = tls.key_password
        encryption = (serialization.BestAvailableEncryption(password.value.encode()) if password
                      else serialization.NoEncryption())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        chain_pem = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in chain)
        changes.update(keystore_location=None, keystore_type=None, keystore_password=None,
                       keystore_key=Password(key_pem.decode()), keystore_certificate_chain=Password(chain_pem),
                       key_password=password if password else None)
    if not changes:
        return security
    return dataclasses.replace(security, ssl=dataclasses.replace(tls, **changes))
