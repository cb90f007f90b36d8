"""The gateway of one daemon: its listeners, its connections, and what it
tells clients about the cluster (docs/gateway.md).

Modules, from a client's connection outward:

* :mod:`.connection`: one client connection, composed of the parts below.
* :mod:`.routing`: where each request goes (the routing decision).
* :mod:`.answer_order`: the answers owed, written in request order.
* :mod:`.upstream`: the pipe to the client's broker, and its events.
* :mod:`.versions`: the gateway's ApiVersions answer.
* :mod:`.login`: a client's SASL login passed through to its broker.
* :mod:`.rewrite`: broker addresses in answers become gateway addresses.
* :mod:`.cluster`: the brokers behind the gateway and their versions.
* :mod:`.gateway`: the listeners, every connection, the idle sweep.

The gateway speaks the wire through :mod:`zkcoord.wire` and never imports
the daemon's server (:mod:`zkcoord.server`): the daemon composes the two
(:mod:`zkcoord.server.daemon`) and hands the gateway its API handler.
"""
