"""``zkcoord burrow-config``: write a Burrow 1.2 configuration that monitors
zkcoord's groups in every offset storage mode.

It connects to nothing: the configuration is built by the pure
:mod:`zkcoord.monitor.burrow` from the flags, then written to stdout or,
with ``--output FILE``, to FILE (through a temporary file beside it and a
rename, so Burrow never reads half a file). Bad input is one ``error:``
line naming it, exit 2.

With ``--command-config`` (Kafka client properties) Burrow logs in to the
brokers as they say, where Burrow 1.2 can (:func:`burrow_login`): TLS with
PEM files, SASL/PLAIN. What it cannot do (SCRAM, PKCS12 or inline stores,
an encrypted key, a CA file without a client certificate) is refused,
naming the setting. The SASL password is written only with
``--include-password`` (the file is then 0600); otherwise Burrow reads it
from ``BURROW_SASL_ZKCOORD_PASSWORD``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from pathlib import Path

import click

from zkcoord.cli.kafka_login import kafka_login_options
from zkcoord.errors import ConfigError, UsageError
from zkcoord.monitor.burrow import LOG_LEVELS, NUMBERS, PASSWORD_ENV, BurrowKafkaLogin, BurrowSettings, burrow_toml

CONFIG_NAME = "burrow.toml"  # the name Burrow looks for in its -config-dir
_DEFAULTS = {field.name: field.default for field in dataclasses.fields(BurrowSettings)}


def _number_options(func):
    """One ``--<name>`` option per whole number Burrow takes; their ranges are
    checked by :class:`BurrowSettings`, so the error names the range."""
    for number in reversed(NUMBERS):
        func = click.option(number.flag, number.field, type=int, default=_DEFAULTS[number.field],
                            show_default=True, help=f"Burrow's {number.meaning} ({number.low} to {number.high}).")(func)
    return func


@click.command("burrow-config")
@click.option("--zookeeper", envvar="ZKCOORD_ZOOKEEPER", show_envvar=True, required=True,
              help="zkcoord's ZooKeeper connection string HOST:PORT[,HOST:PORT...][/chroot].")
@click.option("--bootstrap-servers", envvar="ZKCOORD_BOOTSTRAP_SERVERS", show_envvar=True, required=True,
              help="Kafka brokers HOST:PORT[,HOST:PORT...] (Burrow reads __consumer_offsets and log end offsets).")
@click.option("--cluster", default="local", show_default=True,
              help="Burrow's name for the cluster, as in /v3/kafka/<cluster>/consumer/<group>/status.")
@click.option("--zk-root", envvar="ZKCOORD_OFFSETS_ZK_ROOT", show_envvar=True, default="/consumers",
              show_default=True, help="The daemons' --offsets-zk-root (inside the chroot); must end in /consumers.")
@click.option("--http-listen", default=":8000", show_default=True,
              help="[HOST]:PORT of Burrow's HTTP server (no host: every interface; port 0: any free port).")
@click.option("--output", "output", default="-", show_default=True, metavar="FILE",
              help=f"Where to write the configuration (Burrow reads {CONFIG_NAME} in its -config-dir); - is stdout.")
@_number_options
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default="info", show_default=True)
@click.option("--log-file", default="", help="Burrow's log file (default: its stdout).")
@click.option("--pidfile", default="", help="Burrow's pid file (default: burrow.pid in its working directory).")
@kafka_login_options
@click.option("--include-password", is_flag=True,
              help=f"Write the SASL password into the configuration (else Burrow reads it from {PASSWORD_ENV}).")
def burrow_config(zookeeper: str, bootstrap_servers: str, cluster: str, zk_root: str, http_listen: str,
                  output: str, log_level: str, log_file: str, pidfile: str, kafka_security, include_password: bool,
                  **numbers: int) -> None:
    """Write a Burrow configuration monitoring zkcoord's consumer groups.

    Groups in zookeeper storage are read from the legacy layout through
    Burrow's ZooKeeper module, groups in dual and kafka storage from
    __consumer_offsets through its Kafka module, both into one Burrow
    cluster: a group in dual storage is one group there. Changes nothing
    and connects to nothing. --command-config: Burrow logs in to the
    brokers as the file says (TLS with PEM files, SASL/PLAIN: what Burrow
    1.2 can do; anything else is refused).
    """
    login = burrow_login(kafka_security, include_password)
    settings = BurrowSettings(zookeeper=zookeeper, bootstrap_servers=bootstrap_servers, cluster=cluster,
                              zk_root=zk_root, http_listen=http_listen, log_level=log_level, log_file=log_file,
                              pidfile=pidfile, kafka_login=login, **numbers)
    text = burrow_toml(settings)
    if login is not None and login.sasl_username and not include_password:
        click.echo(f"note: the SASL password is not in the configuration: set {PASSWORD_ENV} where Burrow runs "
                   f"(or pass --include-password)", err=True)
    if output == "-":
        click.echo(text, nl=False)
        return
    path = Path(output)
    _write_atomically(path, text, private=include_password)
    click.echo(f"wrote {path}; start Burrow with: Burrow -config-dir {path.parent.resolve()}", err=True)
    if path.name != CONFIG_NAME:
        click.echo(f"note: Burrow reads only {CONFIG_NAME} from its -config-dir: rename {path.name} to it",
                   err=True)


def burrow_login(security, include_password: bool = False) -> BurrowKafkaLogin | None:
    """Burrow 1.2's login of a :class:`~zkcoord.kafka.client_security.KafkaClientSecurity`
    (None: none); ConfigError naming what Burrow 1.2 cannot do. Reads the
    stores' first bytes (their kind) when no type is given."""
    if security is None or not (security.uses_tls or security.uses_sasl):
        if include_password:
            raise UsageError("--include-password: there is no SASL password (no --command-config with SASL)")
        return None
    where = f"--command-config ({security.describe()})"
    if security.uses_sasl and security.sasl_mechanism != "PLAIN":
        raise ConfigError(f"{where}: Burrow 1.2 logs in with SASL/PLAIN only (its sasl profile has no mechanism; "
                          f"SCRAM came with Burrow 1.3.4), not {security.sasl_mechanism}; use a PLAIN user or "
                          f"another monitor")
    if include_password and not security.uses_sasl:
        raise UsageError(f"--include-password: {where} has no SASL password")
    cafile = certfile = ""
    if security.uses_tls:
        cafile, certfile = _burrow_tls_files(security.ssl, where)
    return BurrowKafkaLogin(tls=security.uses_tls, cafile=cafile, certfile=certfile,
                            sasl_username=security.sasl_username or "", sasl_password=security.sasl_password,
                            write_password=include_password)


def _burrow_tls_files(tls, where: str) -> tuple[str, str]:
    """(cafile, certfile) for Burrow's tls profile: PEM files, the key unencrypted, both or neither."""
    if tls.truststore_certificates is not None or tls.keystore_key is not None:
        raise ConfigError(f"{where}: Burrow 1.2 reads PEM files; ssl.truststore.certificates and ssl.keystore.key "
                          f"(PEM text in the properties) cannot be given to it: put them in files")
    for setting, location, kind in (("ssl.truststore.location", tls.truststore_location, tls.truststore_kind),
                                    ("ssl.keystore.location", tls.keystore_location, tls.keystore_kind)):
        if location and kind() != "PEM":
            raise ConfigError(f"{where}: {setting} {location} is {kind()}; Burrow 1.2 reads PEM files only "
                              f"(openssl pkcs12 -in {location} -nodes converts it)")
    if tls.keystore_location and tls.key_password is not None:
        raise ConfigError(f"{where}: the key in ssl.keystore.location {tls.keystore_location} is encrypted "
                          f"(ssl.key.password); Burrow 1.2 has no key password: it needs an unencrypted key file")
    if bool(tls.truststore_location) != bool(tls.keystore_location):
        raise ConfigError(f"{where}: Burrow 1.2 uses a CA file only together with a client certificate and key "
                          f"(its tls profile's cafile, certfile, keyfile: all or none, and none trusts the system's "
                          f"CAs); give both ssl.truststore.location and ssl.keystore.location, or neither")
    return tls.truststore_location or "", tls.keystore_location or ""


def _write_atomically(path: Path, text: str, private: bool = False) -> None:
    """Write ``text`` to ``path`` through a temporary file in its directory and a
    rename; 0600 when it holds a secret (``private``), else 0644."""
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise UsageError(f"cannot write --output {str(path)!r}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(temporary, 0o600 if private else 0o644)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise UsageError(f"cannot write --output {str(path)!r}: {exc.strerror or exc}") from None
