"""``zkcoord run``: a coordinator daemon, configured by flags, ``ZKCOORD_...``
environment variables or a TOML config file (see :mod:`zkcoord.config`)."""

from __future__ import annotations

from pathlib import Path

import click

from zkcoord.config import DaemonConfig, build_config


def _options(func):
    """One click option per DaemonConfig field with a flag of its own."""
    specs = [
        ("--zookeeper", str, "ZooKeeper connection string HOST:PORT[,HOST:PORT...][/chroot]."),
        ("--listen", str, "[PROTOCOL://]HOST:PORT the Kafka-protocol server binds; PROTOCOL is PLAINTEXT, SSL, "
         "SASL_PLAINTEXT or SASL_SSL [default: PLAINTEXT://127.0.0.1:9300]."),
        ("--advertised", str, "HOST:PORT returned to clients by FindCoordinator [default: the bound address]."),
        ("--node-id", int, "This daemon's id, unique among daemons [default: allocate one]."),
        ("--bootstrap-servers", str, "Kafka brokers, for topic metadata without ZooKeeper and the kafka/dual offset modes."),
        ("--zk-session-timeout-ms", int, "ZooKeeper session timeout [default: 10000]."),
        ("--zk-connect-timeout-ms", int, "How long to wait for ZooKeeper at start [default: 15000]."),
        ("--group-min-session-timeout-ms", int, "Smallest session timeout a member may ask [default: 6000]."),
        ("--group-max-session-timeout-ms", int, "Largest session timeout a member may ask [default: 1800000]."),
        ("--group-initial-rebalance-delay-ms", int, "Wait for more members before the first rebalance of an empty group [default: 3000]."),
        ("--group-max-size", int, "Most members a group may have [default: unlimited]."),
        ("--offsets-zk-root", str, "Root of the legacy offsets layout [default: /consumers]."),
        ("--group-coordinator-rebalance-protocols", str, "Group protocols served: classic, and consumer "
         "(KIP-848's ConsumerGroupHeartbeat) [default: classic,consumer]."),
        ("--group-consumer-session-timeout-ms", int, "Session timeout of consumer-protocol members "
         "[default: 45000]."),
        ("--group-consumer-heartbeat-interval-ms", int, "Heartbeat interval given to consumer-protocol members "
         "[default: 5000]."),
        ("--group-consumer-max-size", int, "Most members a consumer group may have [default: unlimited]."),
        ("--group-consumer-assignors", str, "Server-side assignors offered, the first the default: uniform, "
         "range [default: uniform,range]."),
        ("--group-consumer-migration-policy", str, "Online conversion between classic and consumer groups: "
         "bidirectional, upgrade, downgrade or disabled [default: bidirectional]."),
        ("--group-consumer-regex-refresh-interval-ms", int, "How often subscriptions by regular expression are "
         "resolved again [default: 600000]."),
        ("--group-consumer-assignment-interval-ms", int, "Shortest time between two target assignments of a "
         "consumer group [default: 1000]."),
        ("--group-consumer-assignor-offload-enable", str, "true: a large consumer group's target assignment "
         "is computed in a worker thread, its members answered from the last one meanwhile; false: in the "
         "heartbeat that needs it [default: true]."),
        ("--group-consumer-assignor-offload-min-size", int, "Subscribed partitions plus 8 per member from which "
         "a consumer group's target assignment is offloaded [default: 2000]."),
        ("--socket-request-max-bytes", int, "Largest request frame accepted, Kafka's socket.request.max.bytes; "
         "the gateway forwards frames up to this size [default: 104857600]."),
        ("--max-frame-bytes", int, "Old name of --socket-request-max-bytes."),
        ("--group-request-max-bytes", int, "Largest OffsetCommit, OffsetFetch, JoinGroup or SyncGroup request "
         "read; a larger one closes the connection [default: 8388608]."),
        ("--group-admin-request-max-bytes", int, "Largest request of any other group API (DescribeGroups, "
         "DeleteGroups, ListGroups, Heartbeat, ...) read [default: 1048576]."),
        ("--offset-metadata-max-bytes", int, "Longest OffsetCommit metadata stored (Kafka's "
         "offset.metadata.max.bytes); longer gets OFFSET_METADATA_TOO_LARGE [default: 4096]."),
        ("--connections-max-idle-ms", int, "Close a daemon or gateway connection idle this long, or whose "
         "unfinished request started this long ago (Kafka's connections.max.idle.ms) [default: 600000]."),
        ("--partial-requests-max-bytes", int, "Most bytes of unanswered requests all connections of a listener "
         "hold; the connection going over it is closed [default: 67108864]."),
        ("--listen-backlog", int, "Connections the kernel queues for the Kafka listener until the daemon accepts "
         "them, capped by net.core.somaxconn; 0: that maximum [default: 0]."),
        ("--listen-sockets", int, "Sockets the Kafka listener and each gateway port bind (SO_REUSEPORT, Linux), each with "
         "its own queue of --listen-backlog connections, for the reconnect storm after a fail-over [default: 4]."),
        ("--max-state-bytes", int, "Largest znode of a group's state: its JSON record, or each part of a "
         "larger record, packed [default: 1000000]."),
        ("--max-group-state-bytes", int, "Most bytes a group's packed state may take in ZooKeeper, all its "
         "znodes together; a larger group gets GROUP_MAX_SIZE_REACHED [default: 8000000]."),
        ("--topic-metadata-refresh-ms", int, "How often to poll Kafka for partition counts when ZooKeeper has no broker metadata for this daemon [default: 5000]."),
        ("--metrics-listen", str, "HOST:PORT serving Prometheus /metrics and /health over HTTP [default: off]."),
        ("--member-disconnect-grace-ms", int, "Remove a dynamic member this long after its connection closes "
         "without LeaveGroup, instead of at its session timeout; -1: off, as Kafka [default: -1]."),
        ("--rebalance-notice-hold-ms", int, "Longest a heartbeat on a zkcoord client's notice connection is held "
         "waiting for its group to rebalance; 0: never hold, Kafka clients are never held [default: 5000]."),
        ("--offsets-retention-check-interval-ms", int, "How often a daemon removes the groups it owns that are "
         "Empty with no committed offsets, and their znodes [default: 600000]."),
        ("--gateway-listen", str, "[PROTOCOL://]HOST:PORT of the gateway stock Kafka clients bootstrap from; "
         "needs --bootstrap-servers [default: no gateway]."),
        ("--gateway-advertised", str, "HOST or HOST:PORT of the gateway as clients are told [default: the "
         "listen host and port]."),
        ("--gateway-broker-ids", str, "LOW-HIGH: broker B is served on the gateway port + 1 + (B - LOW) "
         "[default: 0-31]."),
        ("--gateway-leader-hints", str, "on: offer Fetch v16+/Produce v10+, decoding their answers to rewrite "
         "KIP-951 leader hints; off: offer the versions before, every answer streams [default: off]."),
        ("--ssl-keystore-location", str, "The listeners' certificate chain and key (Kafka's ssl.keystore.location)."),
        ("--ssl-keystore-type", str, "PEM or PKCS12 [default: from the file]."),
        ("--ssl-keystore-password", str, "The keystore's password; prefer ZKCOORD_SSL_KEYSTORE_PASSWORD or the "
         "config file (a command line shows in ps)."),
        ("--ssl-key-password", str, "The private key's password (ZKCOORD_SSL_KEY_PASSWORD)."),
        ("--ssl-truststore-location", str, "CAs that client certificates are checked against."),
        ("--ssl-truststore-type", str, "PEM or PKCS12 [default: from the file]."),
        ("--ssl-truststore-password", str, "The truststore's password (ZKCOORD_SSL_TRUSTSTORE_PASSWORD)."),
        ("--ssl-client-auth", str, "none, requested or required: client certificates [default: none]."),
        ("--ssl-enabled-protocols", str, "TLS versions offered [default: TLSv1.2,TLSv1.3]."),
        ("--ssl-cipher-suites", str, "Cipher suites offered [default: the TLS library's]."),
        ("--ssl-principal-mapping-rules", str, "Kafka's rules mapping a client certificate's DN to a principal "
         "[default: DEFAULT]."),
        ("--sasl-enabled-mechanisms", str, "SASL mechanisms the SASL listeners accept: SCRAM-SHA-256, "
         "SCRAM-SHA-512 (users from ZooKeeper's /config/users), PLAIN [default: SCRAM-SHA-256,SCRAM-SHA-512]."),
        ("--sasl-plain-users-file", str, "PLAIN's users: a JAAS file with user_NAME=\"PASSWORD\" options (a "
         "broker's KafkaServer section) or NAME=PASSWORD lines."),
        ("--authorizer-class-name", str, "kafka.security.authorizer.AclAuthorizer: enforce Kafka's ACLs from "
         "ZooKeeper [default: none]."),
        ("--super-users", str, "Principals allowed everything: User:admin;User:ops."),
        ("--allow-everyone-if-no-acl-found", str, "true: a resource without ACLs is open to all [default: false]."),
        ("--kafka-client-config", str, "Java client properties (security.protocol, sasl.mechanism, "
         "sasl.jaas.config, ssl.*) for the daemon's and gateway's connections to the brokers."),
        ("--peer-probe-interval-ms", int, "How often to probe the next daemon's listener: when its port refuses "
         "connections (the process is gone) its ZooKeeper session is ended at once, rather than at its expiry; "
         "0: off [default: 250]."),
        ("--shutdown-timeout-ms", int, "On SIGTERM, how long each step of the stop (closing the listener, unregistering, releasing the groups) may take [default: 5000]."),
        ("--workers", int, "Worker processes, each its own node in the group elections, behind the same listener, "
         "gateway and metrics addresses; 0: one per core [default: 0]."),
        ("--zookeeper-sasl-jaas-file", str, "JAAS file whose Client section logs in to ZooKeeper with SASL "
         "(DigestLoginModule: DIGEST-MD5; Krb5LoginModule: GSSAPI) [default: no SASL]."),
        ("--zookeeper-sasl-client-section", str, "The JAAS file's section to log in with, as ZooKeeper's "
         "zookeeper.sasl.clientconfig [default: Client]."),
        ("--zookeeper-digest", str, "USER:PASSWORD of a ZooKeeper digest login; prefer ZKCOORD_ZOOKEEPER_DIGEST or "
         "the config file: a command line shows in ps [default: none]."),
    ]
    for flag, kind, help_text in reversed(specs):
        func = click.option(flag, type=kind, default=None, help=help_text)(func)
    func = click.option("--zookeeper-set-acl/--no-zookeeper-set-acl", default=None,
                        help="Create zkcoord's znodes so that only its own ZooKeeper login writes them and everybody "
                             "reads them, as Kafka's zookeeper.set.acl; needs a ZooKeeper login [default: off].")(func)
    return func


@click.command()
@_options
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="TOML file whose keys are the settings' names (ZKCOORD_CONFIG).")
def run(config_file: Path | None, **flags) -> None:
    """Run a coordinator daemon beside ZooKeeper.

    Every option is also an environment variable (--node-id is
    ZKCOORD_NODE_ID) and a config-file key (node_id). SIGTERM or Ctrl-C stops
    it gracefully: owned groups are persisted and released at once. With
    several --workers (default: one per core) each worker is a node of its
    own behind the same addresses; the first has --node-id.
    """
    config: DaemonConfig = build_config(flags, config_file)
    count = config.worker_count
    if count > 1:
        from zkcoord.server.supervisor import run_supervisor

        run_supervisor(config, count)
        return
    from zkcoord.server.daemon import run_daemon

    run_daemon(config)
