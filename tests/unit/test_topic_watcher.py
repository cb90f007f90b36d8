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
