# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The image pool hands a buffer out again only when nothing refers to it (no GPU needed)."""

import numpy as np

from xfeat_ros.features.gpu.image_pool import GRAIN, ImagePool


def pool(limit=1 << 30):
    return ImagePool(lambda size: np.zeros(size, np.uint8), limit)


def test_a_buffer_comes_back_only_when_its_last_view_is_gone():
    images = pool()
    first = images.get(1000)
    assert first.size == GRAIN and images.stats() == (1, GRAIN, 1)
    # what the node does with a payload: a slice, a read-only memoryview, an array of it
    pixels = np.frombuffer(memoryview(first[10:900]).toreadonly(), np.uint8)
    address = first.__array_interface__['data'][0]
    del first
    assert images.owns(pixels) and images.stats()[2] == 1
    second = images.get(10)  # the first is still in use: a new buffer
    assert second.__array_interface__['data'][0] != address and images.stats()[0] == 2
    del pixels
    third = images.get(10)   # the first is free again
    assert third.__array_interface__['data'][0] == address
    assert images.stats() == (2, 2 * GRAIN, 2)


def test_sizes_round_up_and_small_buffers_are_not_handed_out_for_large_images():
    images = pool()
    small = images.get(GRAIN)
    del small
    large = images.get(GRAIN + 1)
    assert large.size == 2 * GRAIN and images.stats()[0] == 2
    assert images.get(1).size == GRAIN  # the small one, free


def test_over_the_limit_plain_memory_that_the_engine_copies():
    images = pool(limit=2 * GRAIN)
    held = [images.get(GRAIN), images.get(GRAIN)]
    spare = images.get(GRAIN)
    assert spare.size == GRAIN and not images.owns(spare)
    assert images.owns(held[0][5:]) and not images.owns(np.zeros(4, np.uint8))
    assert images.stats() == (2, 2 * GRAIN, 2)


def test_an_allocation_that_fails_gives_plain_memory():
    images = ImagePool(lambda size: None)
    spare = images.get(100)
    assert spare.size == 100 and not images.owns(spare) and images.stats() == (0, 0, 0)


def test_locate_names_the_buffer_and_offset_of_a_view():
    images = pool()
    buffer = images.get(1000)
    found = images.locate(buffer[37:500])
    assert found is not None and found[0] is buffer and found[1] == 37
    assert images.locate(np.zeros(4, np.uint8)) is None


def test_newest_is_the_buffer_handed_out_last_while_it_is_held():
    images = pool()
    assert images.newest() is None
    taken = images.get(100)      # an image taken into it
    following = images.get(100)  # the image thread's buffer for its next sample
    assert images.newest() is following
    del following                # let go (e.g. the image thread stopped): nothing to name
    assert images.newest() is None
    again = images.get(100)      # handed out again (free): the newest once more
    assert images.newest() is again and taken is not again
