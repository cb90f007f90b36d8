"""The test suite's own rules, checked over its sources (no servers).

No test sends a group request to a daemon or gateway picked by its place in
a list of several (:mod:`tests.support.suite_rules`): the group's owner is
asked (FindCoordinator), or the placement chosen, or the pick says
``# any-daemon: <why>``. The checker is tested here on snippets, first of
all on the code that made issue 23's test fail most runs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.suite_rules import picks_in, positional_picks

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("tests/integration", "tests/faults", "tests/support")


def _checked_files() -> list[Path]:
    files = [path for folder in CHECKED for path in sorted((ROOT / folder).rglob("*.py"))]
    return files + [ROOT / "tests" / "conftest.py"]


def test_no_test_picks_a_daemon_or_gateway_by_its_place_in_a_list():
    picks = picks_in(_checked_files(), ROOT)
    assert not picks, "\n\n".join(str(p) for p in picks)


def _lines(code: str) -> list[int]:
    return [pick.line for pick in positional_picks(textwrap.dedent(code), "snippet.py")]


def test_the_code_of_issue_23_is_caught():
    # tests/integration/test_secure_sandbox.py before the fix: DescribeGroups to the first gateway
    old = '''
    def test_mallory_cannot_evict_rewind_or_delete_alices_group(secured):
        sandbox, state, material = secured
        gateway = parse_address(sandbox.gateway_addresses(state).split(",")[0])
        mallory_password = _make_user(material, sandbox.bootstrap_servers(state), "mallory")

        async def attacks():
            admin = await _wire(gateway, material.client_security("admin"))
            described = await admin.call(DescribeGroupsRequest(version=5, groups=[group],
                                                               include_authorized_operations=False))
    '''
    [pick] = positional_picks(textwrap.dedent(old), "tests/integration/test_secure_sandbox.py")
    assert pick.line == 4
    message = str(pick)
    assert message.startswith("tests/integration/test_secure_sandbox.py:4: "
                              "gateway = parse_address(sandbox.gateway_addresses(state).split(\",\")[0])\n")
    assert "coordinator_client" in message and "placed_name" in message and "# any-daemon: <why>" in message


@pytest.mark.parametrize("code", [
    'first = os.environ["ZKCOORD_GATEWAY_SERVERS"].split(",")[0]',
    'last = os.environ.get("ZKCOORD_COORDINATORS", "").split(",")[-1]',
    'one = os.getenv("ZKCOORD_COORDINATORS").split(",")[1]',
    'admin = KafkaAdminClient(bootstrap_servers=env["ZKCOORD_GATEWAY_SERVERS"].split(",")[0])',
    'host, port = parse_address(daemons.addresses.split(",")[0])',
    'a, b = sandbox.daemon_addresses(state).split(",")',
    'first, *others = sandbox.daemon_addresses(state).split(",")',
    'first = next(iter(gateways(fleet).split(",")))',
    'first = sorted(sandbox.gateway_addresses(state).split(","))[0]',
    'first = [parse_address(a) for a in sandbox.daemon_addresses(state).split(",")][0]',
])
def test_positional_picks_are_caught(code):
    assert _lines(code) == [1]


def test_names_carry_the_list_through_the_module():
    code = '''
    GATEWAYS = None

    def helper(sandbox, state):
        listed = sandbox.gateway_addresses(state)
        both = f"{listed},127.0.0.1:1"
        addresses = both.split(",")
        return addresses

    def other(addresses):
        return addresses[0]
    '''
    assert _lines(code) == [11]


def test_a_pick_with_a_reason_is_allowed_and_one_without_is_not():
    code = '''
    first = env["ZKCOORD_GATEWAY_SERVERS"].split(",")[0]  # any-daemon: its own counters are read below
    second = env["ZKCOORD_GATEWAY_SERVERS"].split(",")[1]  # any-daemon:
    admin = KafkaAdminClient(
        bootstrap_servers=env["ZKCOORD_GATEWAY_SERVERS"].split(",")[0],
        client_id="t")  # any-daemon: a bootstrap list; the client asks FindCoordinator itself
    with connect(env["ZKCOORD_COORDINATORS"].split(",")[0]) as client:
        pass  # any-daemon: too far: only the statement's own lines count
    '''
    assert _lines(code) == [3, 7]


@pytest.mark.parametrize("code", [
    'client = await coordinator_client(sandbox.gateway_addresses(state), group)',
    'addresses = [parse_address(a) for a in sandbox.daemon_addresses(state).split(",")]\nfor a in addresses: check(a)',
    'records = java_tools.consume(sandbox.gateway_addresses(state), "t", group="g")\nfirst = records[0]',
    'broker = parse_address(services.bootstrap_servers.split(",")[0])',  # brokers are not this rule's
    'count = len(os.environ["ZKCOORD_COORDINATORS"].split(","))',
    'node = fleet.daemons[1]',
    '(only,) = daemons.addresses.split(",")',  # asserts a single daemon
])
def test_what_is_not_a_positional_pick(code):
    assert _lines(code) == []
