# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_ros.runtime.gaps: images lost before the node, from publication sequence numbers."""

from xfeat_ros.runtime.gaps import lost_hint, publication_gap


def info(sequence, gid=b'\x01' * 16):
    """Return the message info rclpy hands a callback (gid as rclpy gives it: a dict)."""
    return {'publication_sequence_number': sequence, 'publisher_gid': {'data': gid}}


def test_consecutive_numbers_lose_nothing_and_a_jump_counts_the_missed():
    last = {}
    assert [publication_gap(last, info(n)) for n in (1, 2, 3)] == [0, 0, 0]
    assert publication_gap(last, info(7)) == 3  # 4, 5, 6 never arrived
    assert publication_gap(last, info(8)) == 0
    assert last == {b'\x01' * 16: 8}


def test_publishers_are_counted_apart_and_a_restart_is_no_gap():
    last = {}
    assert publication_gap(last, info(5, b'a')) == 0   # first sample seen of publisher a
    assert publication_gap(last, info(1, b'b')) == 0
    assert publication_gap(last, info(3, b'b')) == 1
    assert publication_gap(last, info(1, b'a')) == 0   # a restarted: numbers went back
    assert publication_gap(last, info(4, b'a')) == 2
    assert publication_gap(last, {'publication_sequence_number': 9,
                                  'publisher_gid': b'c'}) == 0  # gid as plain bytes


def test_no_info_or_no_number_is_not_counted():
    last = {}
    assert publication_gap(last, None) == 0
    assert publication_gap(last, {}) == 0
    assert publication_gap(last, {'publication_sequence_number': 0,
                                  'publisher_gid': {'data': b'x'}}) == 0
    assert last == {}


def test_hints_follow_the_subscription_reliability():
    assert 'input_qos_reliability' in lost_hint('best_effort')
    assert 'input_qos_depth' in lost_hint('reliable')
    # The DDS fix (the node's: the shipped profile for the camera driver) comes first.
    hint = lost_hint('best_effort', 'load the profile')
    assert hint.startswith('load the profile; or, ') and 'input_qos_reliability' in hint
    assert lost_hint('reliable', 'load the profile') == lost_hint('reliable')
