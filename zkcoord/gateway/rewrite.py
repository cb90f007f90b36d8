"""The address filter: every broker address in an answer the gateway passes
on becomes the gateway address that stands for that broker.

One function, :func:`rewrite_addresses`, applied to every decoded answer that
can carry addresses (:func:`zkcoord.core.gateway.needs_rewrite` and
FindCoordinator for non-group keys): Metadata and DescribeCluster broker
lists, FindCoordinator's coordinator (one, or one per key from v4), and the
node endpoints of Fetch (v16+) and Produce (v10+) answers. Metadata and
DescribeCluster also gain one node per zkcoord daemon that runs a gateway,
so that clients (the Java admin client in particular) find the node a
group's FindCoordinator names.

A broker the gateway has no port for (its id is outside the configured
range) is left out of broker lists and endpoints, and its coordinator
answers become COORDINATOR_NOT_AVAILABLE: never its real address, which
would take the client past the gateway. The :class:`AddressBook` says what
stands for what; the filter never does I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kafka.protocol.admin.cluster import DescribeClusterResponse
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse
from kafka.protocol.producer import ProduceResponse

from zkcoord.core.api_keys import DESCRIBE_CLUSTER, FETCH, FIND_COORDINATOR, METADATA, PRODUCE

__all__ = ["AddressBook", "GatewayNode", "rewrite_addresses", "RESPONSE_CLASSES"]

log = logging.getLogger(__name__)
COORDINATOR_NOT_AVAILABLE = 15

RESPONSE_CLASSES = {METADATA: MetadataResponse, DESCRIBE_CLUSTER: DescribeClusterResponse,
                    FIND_COORDINATOR: FindCoordinatorResponse, FETCH: FetchResponse,
                    PRODUCE: ProduceResponse}


@dataclass(frozen=True)
class GatewayNode:
    """A zkcoord daemon's gateway as clients see it: a node of the cluster."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class AddressBook:
    """What the filter needs to know.

    ``broker_address(id)``: this gateway's (host, port) for broker ``id``, or
    None when it has none. ``gateway_nodes``: the daemons' gateways to list.
    ``observe_brokers``: called with the real (id, host, port, rack) of every
    Metadata / DescribeCluster broker list before it is rewritten, so the
    gateway learns of new brokers from its clients' own lookups.
    """

    broker_address: Callable[[int], tuple[str, int] | None]
    gateway_nodes: Sequence[GatewayNode] = ()
    observe_brokers: Callable[[list[tuple[int, str, int, str | None]]], None] | None = None


def rewrite_addresses(api_key: int, message, book: AddressBook) -> None:
    """Rewrite ``message`` (a decoded answer of ``api_key``) in place."""
    if api_key == METADATA:
        _broker_list(message, "node_id", book, MetadataResponse.fields["brokers"].data_class)
    elif api_key == DESCRIBE_CLUSTER:
        _broker_list(message, "broker_id", book, DescribeClusterResponse.fields["brokers"].data_class)
    elif api_key == FIND_COORDINATOR:
        _coordinators(message, book)
    elif api_key in (FETCH, PRODUCE):
        endpoints = getattr(message, "node_endpoints", None)
        if endpoints:
            message.node_endpoints = [e for e in endpoints if _moved(e, e.node_id, book)]
    else:
        raise ValueError(f"api key {api_key} answers carry no broker address")


def _broker_list(message, id_field: str, book: AddressBook, entry_class) -> None:
    brokers = message.brokers or []
    if book.observe_brokers is not None:
        book.observe_brokers([(getattr(b, id_field), b.host, b.port, getattr(b, "rack", None)) for b in brokers])
    kept = [b for b in brokers if _moved(b, getattr(b, id_field), book)]
    version = message.version
    listed = {getattr(b, id_field) for b in kept}
    for node in book.gateway_nodes:
        if node.node_id in listed:
            log.error("broker id %d is also the node id of a zkcoord gateway; clients will confuse them: "
                      "give the broker another id", node.node_id)
            continue
        fields = {id_field: node.node_id, "host": node.host, "port": node.port}
        if entry_class.fields.get("rack") is not None and entry_class.fields["rack"].for_version_q(version):
            fields["rack"] = None
        kept.append(entry_class(version=version, **fields))
    message.brokers = kept


def _coordinators(message, book: AddressBook) -> None:
    if message.version >= 4:
        for coordinator in message.coordinators or []:
            if coordinator.error_code == 0 and not _moved(coordinator, coordinator.node_id, book):
                _unavailable(coordinator)
    elif message.error_code == 0 and not _moved(message, message.node_id, book):
        _unavailable(message)


def _unavailable(entry) -> None:
    entry.error_code = COORDINATOR_NOT_AVAILABLE
    entry.error_message = (f"broker {entry.node_id} has no gateway port (see --gateway-broker-ids)")
    entry.node_id, entry.host, entry.port = -1, "", -1


def _moved(entry, broker_id: int, book: AddressBook) -> bool:
    """Point ``entry`` (host, port fields) at the gateway; False when it has no port for it."""
    address = book.broker_address(broker_id)
    if address is None:
        return False
    entry.host, entry.port = address
    return True
