"""The gateway's pure rules (zkcoord.core.gateway): routes, advertised
versions, broker ports and node ids."""

from __future__ import annotations

import pytest

from zkcoord.core import gateway as g


def test_routes_of_the_apis_that_matter():
    assert g.route_of(11) is g.Route.LOCAL  # JoinGroup
    assert g.route_of(8) is g.Route.LOCAL  # OffsetCommit
    assert g.route_of(16) is g.Route.LOCAL  # ListGroups
    assert g.route_of(18) is g.Route.VERSIONS
    assert g.route_of(10) is g.Route.COORDINATOR
    assert g.route_of(3) is g.Route.REWRITE  # Metadata
    assert g.route_of(1) is g.Route.REWRITE  # Fetch: from v16
    assert g.route_of(2) is g.Route.FORWARD  # ListOffsets
    assert g.route_of(22) is g.Route.FORWARD  # InitProducerId
    assert g.route_of(28) is g.Route.HIDDEN  # TxnOffsetCommit
    assert g.route_of(68) is g.Route.LOCAL  # ConsumerGroupHeartbeat (KIP-848)
    assert g.route_of(69) is g.Route.LOCAL  # ConsumerGroupDescribe
    assert g.route_of(47) is g.Route.HIDDEN  # OffsetDelete


@pytest.mark.parametrize("api_key, version, rewrite", [
    (3, 0, True), (3, 12, True), (60, 0, True), (1, 15, False), (1, 16, True), (1, 17, True),
    (0, 9, False), (0, 10, True), (2, 8, False), (11, 9, False)])
def test_which_answers_carry_addresses(api_key, version, rewrite):
    assert g.needs_rewrite(api_key, version) is rewrite


BROKER = {0: (0, 11), 1: (4, 17), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9), 10: (0, 5), 11: (0, 9),
          18: (0, 4), 22: (0, 5), 28: (0, 4), 47: (0, 0), 55: (0, 2), 60: (0, 1), 68: (0, 0), 12: (0, 4)}
ZKCOORD = {8: (2, 9), 9: (1, 9), 10: (0, 4), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5),
           16: (0, 5), 18: (0, 3), 42: (0, 2)}
DECODABLE = {3: (0, 13), 60: (0, 2), 1: (4, 18), 0: (3, 13)}


def test_advertised_versions_combine_broker_zkcoord_and_the_decoder():
    table = g.advertised_versions(BROKER, ZKCOORD, DECODABLE)
    assert table[0] == (0, 11) and table[1] == (4, 17) and table[3] == (0, 12)  # broker's, within the decoder
    assert table[2] == (0, 9) and table[22] == (0, 5)  # passed through as the broker says
    assert table[8] == (2, 9) and table[11] == (0, 9) and table[42] == (0, 2)  # zkcoord's own, even unlisted
    assert table[10] == (0, 4) and table[18] == (0, 3)  # both
    assert table[55] == (0, 1)  # controllers' addresses are not behind the gateway
    assert 28 not in table and 47 not in table
    assert 68 not in table  # a LOCAL API zkcoord does not serve now: never the broker's range
    served = g.advertised_versions(BROKER, {**ZKCOORD, 68: (0, 1), 69: (0, 1)}, DECODABLE)
    assert served[68] == (0, 1) and served[69] == (0, 1)  # zkcoord's, whatever the broker says


def test_rewritten_apis_are_capped_at_what_can_be_decoded():
    table = g.advertised_versions({3: (0, 14), 1: (4, 20), 18: (0, 4)}, ZKCOORD, {3: (0, 13), 1: (4, 18)})
    assert table[3] == (0, 13) and table[1] == (4, 18)
    without_decoder = g.advertised_versions({1: (4, 17), 18: (0, 4)}, ZKCOORD, {})
    assert without_decoder[1] == (4, 15)  # only the versions that never carry node endpoints


def test_with_no_broker_known_the_group_apis_alone():
    table = g.advertised_versions({}, ZKCOORD, DECODABLE)
    assert table == dict(sorted(ZKCOORD.items()))


def test_cluster_versions_are_what_every_broker_supports():
    assert g.cluster_versions([{1: (0, 17), 3: (0, 12), 5: (0, 1)}, {1: (4, 16), 3: (1, 13)}]) == {
        1: (4, 16), 3: (1, 12)}
    assert g.cluster_versions([{1: (0, 3)}, {1: (4, 5)}]) == {}
    assert g.cluster_versions([]) == {}


def test_broker_ports_follow_the_gateway_port():
    ports = g.BrokerPorts(*g.parse_broker_ids("1001-1003"))
    assert [ports.offset(b) for b in (1000, 1001, 1002, 1003, 1004)] == [None, 1, 2, 3, None]
    assert ports.count == 3
    assert g.parse_broker_ids("7") == (7, 7)


@pytest.mark.parametrize("text", ["", "a-b", "5-3", "-1-2", "0-5000", "0-1073741823"])
def test_bad_broker_id_ranges_are_refused(text):
    with pytest.raises(ValueError, match="gateway_broker_ids"):
        g.parse_broker_ids(text)


def test_gateway_node_ids_never_meet_broker_ids():
    assert g.gateway_node_id(1) == 2**30 + 1
    with pytest.raises(ValueError):
        g.gateway_node_id(2**20)
    gids = [g.gateway_node_id(1), g.gateway_node_id(1001)]
    assert g.colliding_broker_ids([0, 1, 1001, 2**31 - 1 - gids[0]], gids) == [2**31 - 1 - gids[0]]
    assert g.colliding_broker_ids([gids[1], 5], gids) == [gids[1]]
