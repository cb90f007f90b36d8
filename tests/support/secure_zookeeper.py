"""A private ZooKeeper 3.8 that takes SASL logins, for the ZooKeeper security tests
(and one with a connection limit, for the commits' session).

This module owns starting one ZooKeeper server (the sandbox's cached jars,
:mod:`zkcoord.local.jars`) with SASL DIGEST-MD5 users in its JAAS ``Server``
section (:mod:`zkcoord.local.config_files`), on a free loopback port, in a
directory of its own; writing client JAAS files for its users; and stopping
it (:meth:`SecureZooKeeper.stop`, which the fixture always calls).

Its command line carries ``-Dzkcoord-test-process=$ZKCOORD_TEST_STATE_DIR``
(:func:`tests.support.daemons.process_marker`), so ``.ci/run``'s ``pkill -f``
finds it if a run is killed before the fixture's teardown. The server also
takes digest logins (ZooKeeper always does) and, unless ``require_auth``,
clients that do not log in.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.daemons import process_marker
from zkcoord.local import config_files, jars, procs
from zkcoord.local.sandbox import zk_four_letter
from zkcoord.password import Password

__all__ = ["SecureZooKeeper", "start_secure_zookeeper"]

START_TIMEOUT_S = 60.0


@dataclass
class SecureZooKeeper:
    """A started server: ``hosts`` is ``127.0.0.1:<port>``."""

    home: Path
    port: int
    pid: int
    users: dict[str, Password] = field(default_factory=dict)

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.home / "zookeeper.log"

    def client_jaas(self, user: str, password: Password | str | None = None, section: str = "Client",
                    name: str | None = None) -> Path:
        """A client JAAS file logging in as ``user`` (with its own password
        unless one is given: a wrong one, say)."""
        secret = password if password is not None else self.users.get(user, Password("no-such-user"))
        path = self.home / (name or f"client-{user}-{section}.jaas")
        path.write_text(config_files.zookeeper_client_jaas(user, secret, section).value)
        return path

    def stop(self) -> None:
        procs.stop(self.pid, process_marker(), grace_s=10)


def start_secure_zookeeper(home: Path, users: Mapping[str, str], require_auth: bool = False,
                           max_client_cnxns: int = 0) -> SecureZooKeeper:
    """Start the server in ``home`` with these SASL users (name -> password;
    none: a server without SASL, to see a SASL login go unanswered), taking
    at most ``max_client_cnxns`` connections from one address (0: any
    number); wait until it answers ``ruok``. Stops it again if it does not
    come up."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "data").mkdir(exist_ok=True)
    port = procs.free_port()
    secrets = {name: Password(value) for name, value in users.items()}
    jaas = home / "server.jaas"
    if secrets:
        jaas.write_text(config_files.zookeeper_server_jaas(secrets).value)
    (home / "zoo.cfg").write_text(config_files.zoo_cfg(home / "data", port, sasl=bool(secrets),
                                                       require_auth=require_auth,
                                                       max_client_cnxns=max_client_cnxns))
    (home / "logback.xml").write_text(config_files.LOGBACK_XML)
    dist = jars.zookeeper_distribution()
    login = [f"-Djava.security.auth.login.config={jaas}"] if secrets else []
    cmd = [jars.find_java(), "-Xms32m", "-Xmx256m", *config_files.JVM_COMMON, f"-D{process_marker()}",
           *login, f"-Dlogback.configurationFile={home / 'logback.xml'}",
           "-Dzookeeper.admin.enableServer=false", "-cp", dist.classpath,
           "org.apache.zookeeper.server.ZooKeeperServerMain", str(home / "zoo.cfg")]
    server = SecureZooKeeper(home, port, procs.spawn(cmd, home / "zookeeper.log", cwd=home), secrets)
    deadline = time.monotonic() + START_TIMEOUT_S
    while zk_four_letter(port) != "imok":
        if time.monotonic() > deadline or not procs.alive(server.pid, process_marker()):
            server.stop()
            raise RuntimeError(f"the SASL ZooKeeper did not start; last lines of {server.log_file}:\n"
                               f"{procs.tail(server.log_file)}")
        time.sleep(0.2)
    return server
