"""The Kafka wire, as both zkcoord listeners speak it: the daemon's
(:mod:`zkcoord.server`) and the gateway's (:mod:`zkcoord.gateway`).

Modules, from the bytes up:

* :mod:`.errors`: the wire's exception tree (a bad frame closes its connection).
* :mod:`.framing`: the size prefix, request prefixes, whole frames cut from a stream.
* :mod:`.registry`: which APIs and versions a listener serves.
* :mod:`.messages`: kafka-python messages built from plain values.
* :mod:`.requests`: request frames decoded (:class:`~.requests.DecodedRequest`).
* :mod:`.responses`: responses encoded (and cached), response frames decoded.
* :mod:`.response_errors`: the error an answer carries, for the metrics.
* :mod:`.connections`: who is on a connection, and the idle sweep.
* :mod:`.listener_security`: TLS and the SASL login gate of a listener.
* :mod:`.authentication`: SASL logins checked by zkcoord itself.

The wire sits beside :mod:`zkcoord.zk` and :mod:`zkcoord.kafka`: it imports
the core (API keys, the SASL exchange, limits) and nothing above it. What
only the daemon's listener does (its asyncio server) stays in
:mod:`zkcoord.server.transport`; what only the gateway does, in
:mod:`zkcoord.gateway`.
"""
