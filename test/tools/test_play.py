# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_play publishes a sequence folder with its recorded stamps."""

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from ros_harness import Client, private_topic
from xfeat_ros.features.image_codec import decode_image_msg
from xfeat_ros.tools.image_files import list_sequence, read_grey


def test_list_sequence_layouts(shared_dir):
    tum = list_sequence(shared_dir / 'data' / 'tum_fr2_desk')
    assert len(tum) == 20 and tum[0][0] == 1311868169163498000
    assert [s for s, _ in tum] == sorted(s for s, _ in tum)
    euroc = list_sequence(shared_dir / 'data' / 'euroc_v101_stereo')
    assert euroc[0][0] == 1403715273262142976 and euroc[0][1].parent.name == 'cam0'
    graf = list_sequence(shared_dir / 'data' / 'oxford_graf')
    assert [p.name for _, p in graf][:2] == ['img1.ppm', 'img2.ppm'] and graf[0][0] is None


@pytest.mark.ros
def test_play_tum_with_stamps(data_dir):
    from sensor_msgs.msg import Image
    client = Client()
    images = []
    topic = private_topic('image')
    client.node.create_subscription(Image, topic, images.append, 10)
    try:
        process = subprocess.Popen(
            [sys.executable, '-m', 'xfeat_ros.tools.play', str(data_dir / 'data' / 'tum_fr2_desk'),
             '--count', '4', '--rate', '20', '--encoding', 'bgr8', '--topic', topic],
            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        client.spin_until(lambda: len(images) == 4 or process.poll() is not None, 60)
        client.spin_until(lambda: len(images) == 4, 5)
        assert len(images) == 4, process.stdout.read()
        assert process.wait(30) == 0
        frames = list_sequence(data_dir / 'data' / 'tum_fr2_desk')[:4]
        for msg, (stamp, path) in zip(images, frames):
            assert msg.header.stamp.sec * 10 ** 9 + msg.header.stamp.nanosec == stamp
            assert msg.encoding == 'bgr8' and (msg.width, msg.height) == (640, 480)
            np.testing.assert_allclose(decode_image_msg(msg), read_grey(path), atol=1e-6)
    finally:
        client.close()


class RecordingPublisher:
    """Publisher stand-in that records publishes and acknowledgement waits in order."""

    topic_name = '/image'

    def __init__(self, acked=True):
        self.events = []
        self.acked = acked

    def get_subscription_count(self):
        return 1

    def publish(self, msg):
        self.events.append(('publish', msg))

    def wait_for_all_acked(self, timeout):
        self.events.append(('acked', timeout.nanoseconds))
        return self.acked


class WarningNode:
    """Node stand-in whose logger appends its warnings to ``warnings``."""

    def __init__(self, warnings):
        self.warnings = warnings

    def get_logger(self):
        return SimpleNamespace(warning=self.warnings.append)


@pytest.mark.ros
@pytest.mark.parametrize('acked', [True, False])
def test_play_waits_for_acknowledgement_of_first_and_last_images(monkeypatch, acked):
    import rclpy
    from xfeat_ros.tools import play as play_module
    monkeypatch.setattr(rclpy, 'ok', lambda: True)
    warnings = []
    publisher = RecordingPublisher(acked)
    messages = [(0, 'a'), (1000, 'b'), (2000, 'c')]  # stamped: never restamped
    sent = play_module.play_messages(WarningNode(warnings), publisher, lambda: messages,
                                     rate=1000.0, restamp=False)
    assert sent == 3
    # the first image acknowledged before the others are paced (no fixed settling
    # sleep), the last ones before returning (the node is destroyed after that)
    assert [e[0] for e in publisher.events] == ['publish', 'acked', 'publish', 'publish',
                                                'acked']
    assert publisher.events[1][1] == publisher.events[-1][1] == \
        int(play_module.ACK_TIMEOUT_S * 1e9)
    assert len(warnings) == (0 if acked else 2)


class _GrowingPublisher(RecordingPublisher):
    """A publisher whose matched subscribers grow by one on every count query, up to a limit."""

    def __init__(self, limit):
        super().__init__()
        self.queries, self.limit = 0, limit

    def get_subscription_count(self):
        self.queries += 1
        return min(self.queries - 1, self.limit)


@pytest.mark.ros
@pytest.mark.parametrize('limit,warned', [(3, False), (1, True)], ids=['three', 'one'])
def test_play_waits_for_every_subscriber_asked_for(monkeypatch, limit, warned):
    import rclpy
    from xfeat_ros.tools import play as play_module
    monkeypatch.setattr(rclpy, 'ok', lambda: True)
    monkeypatch.setattr(play_module.time, 'sleep', lambda s: None)  # polls, not wall time
    warnings = []
    publisher = _GrowingPublisher(limit)
    sent = play_module.play_messages(WarningNode(warnings), publisher, lambda: [(0, 'a')],
                                     rate=1000.0, wait_subscribers=0.2, subscribers=3)
    assert sent == 1 and publisher.events[0] == ('publish', 'a')
    assert publisher.queries >= 4  # polled until three were matched, or until the deadline
    subscriber_warnings = [w for w in warnings if 'subscribers matched' in w]
    assert bool(subscriber_warnings) is warned
    if warned:
        assert subscriber_warnings[0].startswith('/image: 1 of 3 subscribers matched within 0.2 s')


@pytest.mark.ros
def test_play_feeds_two_subscribers_every_image(data_dir):
    """--subscribers 2: a node and a recorder (here two readers) each get every image."""
    from sensor_msgs.msg import Image
    client = Client()
    first, second = [], []
    topic = private_topic('image')
    client.node.create_subscription(Image, topic, first.append, 10)
    process = None
    try:
        process = subprocess.Popen(
            [sys.executable, '-m', 'xfeat_ros.tools.play', str(data_dir / 'data' / 'tum_fr2_desk'),
             '--count', '3', '--rate', '20', '--topic', topic, '--subscribers', '2'],
            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # play is up (its publisher seen) and waits: nothing reaches the first reader while
        # the second is missing (an absence, so checked over a window after play started)
        assert client.spin_until(lambda: client.node.count_publishers(topic) == 1, 60,
                                 process)
        client.spin_until(lambda: bool(first), 1.0)
        assert first == [] and process.poll() is None
        client.node.create_subscription(Image, topic, second.append, 10)
        client.spin_until(lambda: (len(first) == 3 and len(second) == 3)
                          or process.poll() is not None, 60)
        client.spin_until(lambda: len(first) == 3 and len(second) == 3, 5)
        assert (len(first), len(second)) == (3, 3), process.stdout.read()
        assert process.wait(30) == 0
        assert [m.header.stamp for m in first] == [m.header.stamp for m in second]
    finally:
        if process is not None and process.poll() is None:
            process.kill()
        client.close()
