"""Security adapters shared by the daemon, the gateway and the commands.

* :mod:`.properties`: Java ``.properties`` files and JAAS configurations,
  the formats Kafka operators already have.
* :mod:`.tls`: ``ssl.SSLContext`` from Kafka's ``ssl.*`` settings (PEM and
  PKCS12 stores), and the principal of a client certificate.
* :mod:`.plain_users`: the users file SASL/PLAIN logins are checked against.

:class:`~zkcoord.password.Password`, the secret that never prints, is a
value of the ground floor (:mod:`zkcoord.password`), so the core may hold
one too. The pure parts (SCRAM, the SASL server exchange, the ACL authorizer) live in
:mod:`zkcoord.core`; what reads Kafka's credentials and ACLs in ZooKeeper
lives in :mod:`zkcoord.zk`.
"""
