"""Kafka's API keys: the one place zkcoord names them.

Every module that compares, routes or tables requests by api key takes the
number from here (the wire codec, the daemon's handlers, the gateway's
routes, the SASL login, the Kafka client login). The names are Kafka's
(``ApiKeys.java``) in upper case; the numbers are the protocol's and never
change.

This module is pure (no kafka-python): the core imports it, and so does
everything above the core. kafka-python's ``ApiKey`` enum is used only where
a key's display name is needed (log lines, metrics labels), in the wire
codec.
"""

from __future__ import annotations

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
ADD_OFFSETS_TO_TXN = 25
TXN_OFFSET_COMMIT = 28
SASL_AUTHENTICATE = 36
DELETE_GROUPS = 42
OFFSET_DELETE = 47
DESCRIBE_QUORUM = 55
DESCRIBE_CLUSTER = 60
# KIP-848's consumer groups
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
# KIP-932's share groups
SHARE_GROUP_HEARTBEAT = 76
SHARE_GROUP_DESCRIBE = 77
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
INITIALIZE_SHARE_GROUP_STATE = 83
READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85
DELETE_SHARE_GROUP_STATE = 86
READ_SHARE_GROUP_STATE_SUMMARY = 87
# KIP-1071's streams groups
STREAMS_GROUP_HEARTBEAT = 88
STREAMS_GROUP_DESCRIBE = 89
# KIP-932 again: share-group offsets
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92

# What a SASL listener reads before a connection's login is done (Kafka's
# SaslServerAuthenticator): the version handshake and the login itself.
LOGIN_APIS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})
BEFORE_LOGIN_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
