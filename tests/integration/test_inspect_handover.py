"""`zkcoord describe` and `zkcoord groups` on a group in a live handover (issue 26),
on a real ZooKeeper: a zkcoord group (its record written by a daemon, whose
member owns partitions 0 and 1) with a legacy consumer registered beside a
zkcoord-style registration, each holding owner znodes as Kafka's old consumer
and the owner daemon write them (stand-ins: kazoo sessions of their own, as in
test_zk_handover.py); and a legacy group with a whitelist consumer and a
registration no consumer can read. Daemons are stopped before the commands
run, so what is shown is what ZooKeeper holds."""

from __future__ import annotations

import pytest
from test_zk_handover import legacy, legacy_registration, topic_registration  # noqa: F401 (legacy: a fixture)

from tests.integration.test_client_support import ThreadDaemons
from tests.integration.test_inspect import row, run, run_json, stable_member
from zkcoord.core.handover.registration import encode_registration, thread_id, zkcoord_consumer_id

pytestmark = pytest.mark.integration


def test_a_group_in_handover_is_described_and_listed_as_mixed(zk_hosts, zk, legacy, unique_name):  # noqa: F811
    mixed, legacy_group, topic = unique_name("mixed"), unique_name("old"), unique_name("t")
    with ThreadDaemons(zk_hosts, 1) as daemons:  # the record: one stable member owning partitions 0 and 1
        client, member_id = daemons._run(stable_member(daemons, mixed, topic))
        daemons._run(client.close())
    zk.create(f"/brokers/topics/{topic}", topic_registration(4), makepath=True)
    old, zid = f"{mixed}_web-1-1700000000000-abcd1234", zkcoord_consumer_id(mixed, 1795315596682, "0a1b2c3d")
    consumer, daemon = legacy(), legacy()  # a legacy consumer's session and the owner daemon's
    consumer.create(f"/consumers/{mixed}/ids/{old}", legacy_registration({topic: 1}), ephemeral=True, makepath=True)
    consumer.create(f"/consumers/{mixed}/owners/{topic}/2", thread_id(old, 0).encode(), ephemeral=True,
                    makepath=True)
    daemon.create(f"/consumers/{mixed}/ids/{zid}", encode_registration({topic: 1}, 1795315596682), ephemeral=True)
    for p in (0, 1):
        daemon.create(f"/consumers/{mixed}/owners/{topic}/{p}", thread_id(zid, 0).encode(), ephemeral=True)
    zk.create(f"/consumers/{mixed}/offsets/{topic}/2", b"5", makepath=True)
    filtered, unreadable = f"{legacy_group}_etl-1-1700000000001-0000beef", f"{legacy_group}_odd-2-1700000000002-1"
    consumer.create(f"/consumers/{legacy_group}/ids/{filtered}", legacy_registration({"t-.*": 1}, "white_list"),
                    ephemeral=True, makepath=True)
    consumer.create(f"/consumers/{legacy_group}/ids/{unreadable}", b"*1*orders", ephemeral=True)
    env = {"ZKCOORD_ZOOKEEPER": zk_hosts}

    [view] = run_json("describe", mixed, env=env)["groups"]
    assert (view["sources"], view["state"], view["read_from"]) == (["zkcoord", "legacy"], "Stable", "zookeeper")
    assert [(m["member_id"], m["assignment"]) for m in view["members"]] == [(member_id, {topic: [0, 1]})]
    assert [(r["partition"], r["current_offset"], r["member_id"]) for r in view["offsets"]] == [
        (0, None, member_id), (1, None, member_id), (2, 5, thread_id(old, 0))]
    assert view["legacy_rebalance"] == {
        "ids_dir": f"/consumers/{mixed}/ids", "handover": "mixed",
        "consumers": [
            {"consumer_id": old, "kind": "legacy", "pattern": "static", "subscription": {topic: 1},
             "owned": {topic: [2]}, "problem": None, "member": None},
            {"consumer_id": zid, "kind": "zkcoord", "pattern": "static", "subscription": {topic: 1},
             "owned": {topic: [0, 1]}, "problem": None, "member": None}],
        "unowned": {topic: [3]}, "other_owners": []}

    table = run("describe", mixed, env=env)
    assert table.exit_code == 0
    assert f"Legacy rebalance under /consumers/{mixed}/ids: 1 legacy consumer(s) and 1 zkcoord member(s) " \
           "registered (mixed)" in table.stdout
    assert row(table.stdout, mixed, old) == [mixed, old, "legacy", "static", f"{topic}:1", f"{topic}(2)", "-"]
    assert row(table.stdout, mixed, zid) == [mixed, zid, "zkcoord", "static", f"{topic}:1", f"{topic}(0,1)", "-"]
    assert row(table.stdout, mixed, topic, "2")[:4] == [mixed, topic, "2", "5"]
    assert f"note: partitions of subscribed topics no owner znode holds: {topic}(3)" in table.stdout
    members = run("describe", mixed, "--members", env=env).stdout
    assert row(members, mixed, member_id)[1:2] == [member_id] and row(members, mixed, zid)[2] == "zkcoord"

    [other] = run_json("describe", legacy_group, env=env)["groups"]
    section = other["legacy_rebalance"]
    assert (section["handover"], [c["consumer_id"] for c in section["consumers"]]) == (None, [filtered, unreadable])
    assert section["consumers"][0] == {"consumer_id": filtered, "kind": "legacy", "pattern": "white_list",
                                       "subscription": {"t-.*": 1}, "owned": {}, "problem": None,
                                       "member": None}
    bad = section["consumers"][1]
    assert (bad["pattern"], bad["subscription"]) == (None, None)
    assert bad["problem"].startswith(f"/consumers/{legacy_group}/ids/{unreadable} cannot be read as a legacy "
                                     "consumer registration (not JSON")
    assert section["unowned"] == {topic: [0, 1, 2, 3]}  # the whitelist allows the topic; nobody holds it
    shown = run("describe", legacy_group, env=env)
    assert shown.exit_code == 0 and f"note: consumer {unreadable}: /consumers/{legacy_group}/ids/{unreadable} " \
                                    "cannot be read" in shown.stdout

    listed = {g["group"]: g for g in run_json("groups", env=env)["groups"]}
    assert (listed[mixed]["handover"], listed[mixed]["legacy_consumers"], listed[mixed]["sources"]) == \
        ("mixed", 1, ["zkcoord", "legacy"])
    assert (listed[legacy_group]["handover"], listed[legacy_group]["legacy_consumers"]) == (None, 2)
    lines = run("groups", env=env).stdout
    assert row(lines, "GROUP") == ["GROUP", "TYPE", "STATE", "OWNER", "MEMBERS", "STORAGE", "SOURCE", "HANDOVER"]
    assert row(lines, mixed) == [mixed, "Classic", "Stable", "-", "1", "zookeeper", "zkcoord+legacy", "mixed"]
    assert row(lines, legacy_group) == [legacy_group, "-", "Stable", "-", "2", "zookeeper", "legacy", "-"]
