"""TopicWatcher's topics image, without a source: reads replace it, watched
counts (newer than a read) are kept, and the manager hears which groups
track a topic that changed."""

from __future__ import annotations

import asyncio

from zkcoord.core.topics_image import TopicInfo
from zkcoord.server.topic_watcher import TopicWatcher

A = "AAAAAAAAAAAAAAAAAAAAAQ"
B = "AAAAAAAAAAAAAAAAAAAAAg"


def watcher():
    heard = []
    w = TopicWatcher(on_change=None, on_image=lambda image, groups: heard.append((image, groups)))
    return w, heard


def test_a_read_replaces_the_image_and_names_the_tracking_groups():
    async def scenario():
        w, heard = watcher()
        await w.track("g1", frozenset({"a"}))
        await w.track("g2", frozenset({"b", "c"}))
        await w._set_image({"a": (A, 2)})
        await w._set_image({"a": (A, 2)})  # nothing changed: not published again
        await w._set_image({"a": (A, 2), "b": (B, 1)})
        await w._set_image({"b": (B, 3)})
        return w, heard

    w, heard = asyncio.run(scenario())
    assert [groups for _, groups in heard] == [["g1"], ["g2"], ["g1", "g2"]]
    assert [image.version for image, _ in heard] == [1, 2, 3]
    assert w.image.by_name == {"b": TopicInfo("b", B, 3)}
    assert heard[1][0].added_version == 2 and heard[2][0].added_version == 2  # "b" appeared at 2


def test_a_watched_count_is_newer_than_a_read():
    async def scenario():
        w, heard = watcher()
        await w._set_image({"a": (A, 2)})
        w._watches["a"] = object()  # a data watch delivered 4 partitions after the read started
        w._counts["a"] = 4
        await w._set_image({"a": (A, 2)})
        return w

    assert asyncio.run(scenario()).image.partitions_of(A) == 4


def test_an_observed_count_updates_the_image():
    async def scenario():
        w, heard = watcher()
        await w._set_image({"a": (A, 2)})
        w._observed("a", 6)
        after_grow = w.image
        w._observed("a", None)  # deleted
        return after_grow, w.image

    grown, deleted = asyncio.run(scenario())
    assert grown.partitions_of(A) == 6 and deleted.id_of("a") is None


def test_tracking_names_the_topics_a_group_did_not_track_before():
    async def scenario():
        w, _ = watcher()
        return [await w.track("g", frozenset({"a"})), await w.track("g", frozenset({"a"})),
                await w.track("g", frozenset({"a", "b"})), await w.track("g", frozenset({"b"}))]

    assert asyncio.run(scenario()) == [frozenset({"a"}), frozenset(), frozenset({"b"}), frozenset()]


def test_a_consumer_group_looks_at_its_topics_again_once_they_are_tracked(monkeypatch):
    """The race of a topic created just before a member subscribes: the group's
    decision read the image without it, the image changed while the group's
    state was written (naming no group: it was not tracked yet), and the group is
    tracked after. It must look at the image again, or it never sees the topic."""
    from zkcoord.core.consumer.model import ConsumerGroup
    from zkcoord.core.group import Group, GroupConfig
    from zkcoord.server import subscriptions
    from zkcoord.server.manager import GroupManager

    async def scenario():
        w, _ = watcher()
        m = GroupManager(1, GroupConfig(), None, None, None, nodes=None, topic_watcher=w)
        looked = []

        async def metadata_changed(group_id, from_image=False):
            looked.append((group_id, from_image))

        m.metadata_changed = metadata_changed
        monkeypatch.setattr(subscriptions, "subscribed_topics", lambda group: frozenset({"t"}))
        await w._set_image({"t": (A, 4)})  # the image changes before the group is tracked
        consumer = ConsumerGroup(group_id="cg")
        await m._track(consumer)
        await m._track(consumer)  # nothing newly tracked: no second look
        await m._track(Group(group_id="classic"))  # a classic group's clients assign: they learn it otherwise
        return looked

    assert asyncio.run(scenario()) == [("cg", True)]
