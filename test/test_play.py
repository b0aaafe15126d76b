# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_play publishes a sequence folder with its recorded stamps."""

import os
import subprocess
import sys

import numpy as np
import pytest

from ros_harness import Client
from xfeat_ros.decode import decode_image_msg
from xfeat_ros.image_files import list_sequence, read_grey
from xfeat_ros.play import convert


def test_list_sequence_layouts(shared_dir):
    tum = list_sequence(shared_dir / 'data' / 'tum_fr2_desk')
    assert len(tum) == 20 and tum[0][0] == 1311868169163498000
    assert [s for s, _ in tum] == sorted(s for s, _ in tum)
    euroc = list_sequence(shared_dir / 'data' / 'euroc_v101_stereo')
    assert euroc[0][0] == 1403715273262142976 and euroc[0][1].parent.name == 'cam0'
    graf = list_sequence(shared_dir / 'data' / 'oxford_graf')
    assert [p.name for _, p in graf][:2] == ['img1.ppm', 'img2.ppm'] and graf[0][0] is None


def test_convert_encodings():
    rgb = np.random.default_rng(0).integers(0, 256, (4, 5, 3), dtype=np.uint8)
    bgr, enc = convert(rgb, 'rgb8', 'bgr8')
    assert enc == 'bgr8' and np.array_equal(bgr[:, :, ::-1], rgb)
    mono, enc = convert(rgb, 'rgb8', 'mono8')
    assert enc == 'mono8' and mono.shape == (4, 5, 1)


@pytest.mark.ros
def test_play_tum_with_stamps(shared_dir):
    from sensor_msgs.msg import Image
    client = Client()
    images = []
    client.node.create_subscription(Image, 'image', images.append, 10)
    try:
        process = subprocess.Popen(
            [sys.executable, '-m', 'xfeat_ros.play', str(shared_dir / 'data' / 'tum_fr2_desk'),
             '--count', '4', '--rate', '20', '--encoding', 'bgr8'],
            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        client.spin_until(lambda: len(images) == 4 or process.poll() is not None, 60)
        client.spin_until(lambda: len(images) == 4, 5)
        assert len(images) == 4, process.stdout.read()
        assert process.wait(30) == 0
        frames = list_sequence(shared_dir / 'data' / 'tum_fr2_desk')[:4]
        for msg, (stamp, path) in zip(images, frames):
            assert msg.header.stamp.sec * 10 ** 9 + msg.header.stamp.nanosec == stamp
            assert msg.encoding == 'bgr8' and (msg.width, msg.height) == (640, 480)
            np.testing.assert_allclose(decode_image_msg(msg), read_grey(path), atol=1e-6)
    finally:
        client.close()
