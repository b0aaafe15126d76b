# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Images lost before the node: gaps in each publisher's publication sequence numbers.

A publisher numbers its samples 1, 2, 3, ...; a jump seen by the subscription
means the middleware dropped samples before the callback (best-effort losses,
or the subscription history overflowing). ROS-free: ``info`` is the dict rclpy
hands a callback that takes the message info.
"""


def publication_gap(last_by_publisher, info):
    """
    Record ``info``'s sequence number; return how many of its publisher's samples were missed.

    ``last_by_publisher`` maps a publisher's gid bytes to the last number seen
    (updated here). 0 for the first sample of a publisher, for consecutive
    numbers, for numbers that go back (a restarted publisher) and when
    ``info`` carries no number or gid.
    """
    sequence = info.get('publication_sequence_number') if info else None
    gid = info.get('publisher_gid') if info else None
    if not sequence or gid is None:
        return 0
    key = bytes(gid.get('data', b'')) if isinstance(gid, dict) else bytes(gid)
    last = last_by_publisher.get(key)
    last_by_publisher[key] = sequence
    if last is None or sequence <= last + 1:
        return 0
    return sequence - last - 1


def lost_hint(reliability, profile_hint=''):
    """
    Return what to do about images lost before the node, for the subscription's reliability.

    ``profile_hint``: for a best-effort subscription, the DDS fix to name first
    (the node's: the shipped profile for the camera driver,
    :func:`xfeat_ros.ros.dds.driver_profile_hint`).
    """
    if reliability == 'best_effort':
        first = f'{profile_hint}; or, ' if profile_hint else ''
        return (f'{first}with a reliable camera publisher set input_qos_reliability to '
                'reliable; from another host, large best-effort images need bigger socket '
                'buffers (net.core.rmem_default)')
    return ('the subscription history overflowed: raise input_qos_depth, or the node '
            'cannot keep up with the camera')
