# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_offline with --min-distance and --carry-frames: spread keypoints, longer tracks."""

import numpy as np
import pytest

pytest.importorskip('rosbags')
rclpy_serialization = pytest.importorskip('rclpy.serialization')

from rosbags.rosbag2 import Reader, StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import get_typestore, Stores  # noqa: E402

from xfeat_ros.features.image_codec import image_msg  # noqa: E402
from xfeat_ros.ros.messages import features_from_msg, message_types  # noqa: E402
from xfeat_ros.runtime.stream import stamp_ns  # noqa: E402
from xfeat_ros.tools.image_files import list_sequence, read_image  # noqa: E402
from xfeat_ros.tools.play import stamp_msg  # noqa: E402

TOPIC = '/camera/image_raw'
FRAMES = 4
MIN_DISTANCE = 25.0


def write_bag(path, messages):
    with Writer(path, version=8, storage_plugin=StoragePlugin.SQLITE3) as writer:
        connection = writer.add_connection(TOPIC, 'sensor_msgs/msg/Image',
                                           typestore=get_typestore(Stores.ROS2_KILTED))
        for msg in messages:
            writer.write(connection, stamp_ns(msg.header.stamp),
                         rclpy_serialization.serialize_message(msg))
    return path


def keypoints_of(path):
    keypoints_type, _ = message_types()
    out = []
    with Reader(path) as reader:
        for connection, _, raw in reader.messages():
            if connection.msgtype == 'xfeat_ros_msgs/msg/Keypoints':
                out.append(rclpy_serialization.deserialize_message(raw, keypoints_type))
    return out


@pytest.fixture(scope='module')
def images(data_dir):
    frames = list_sequence(data_dir / 'data' / 'tum_fr2_desk')[:FRAMES]
    return [image_msg(*read_image(path), stamp_msg(stamp), 'tum_rgb') for stamp, path in frames]


def test_offline_spreads_the_keypoints(tmp_path, images, weights_npz):
    from xfeat_ros.tools.offline import main
    source = write_bag(tmp_path / 'in', images)
    assert main([str(source), str(tmp_path / 'out'), '--backend', 'onnxruntime',
                 '--weights', str(weights_npz), '--top-k', '1024',
                 '--min-distance', str(MIN_DISTANCE)]) == 0
    messages = keypoints_of(tmp_path / 'out')
    assert len(messages) == FRAMES
    for msg in messages:
        points = features_from_msg(msg).keypoints.astype(np.float64)
        assert 50 < len(points) <= 1024
        diff = points[:, None, :] - points[None, :, :]
        distance = np.sqrt((diff ** 2).sum(-1))[np.triu_indices(len(points), 1)]
        assert distance.min() >= MIN_DISTANCE
        ages = np.frombuffer(msg.track_ages, np.uint32)
        tracked = ages > 1
        assert tracked[:tracked.sum()].all()  # continued tracks are published first
    assert np.frombuffer(messages[-1].track_ages, np.uint32).max() == FRAMES


def test_offline_carries_tracks(tmp_path, images, weights_npz):
    from xfeat_ros.tools.offline import main
    source = write_bag(tmp_path / 'in', images)
    ages = {}
    for carry in (0, 3):
        out = tmp_path / f'out{carry}'
        assert main([str(source), str(out), '--backend', 'onnxruntime', '--weights',
                     str(weights_npz), '--top-k', '300', '--carry-frames', str(carry)]) == 0
        messages = keypoints_of(out)
        assert len(messages) == FRAMES and all(len(m.track_ids) <= 300 for m in messages)
        ages[carry] = np.mean([np.frombuffer(m.track_ages, np.uint32).mean()
                               for m in messages[1:]])
    assert ages[3] > 1.3 * ages[0], ages


def test_offline_spread_mistakes_are_one_line(tmp_path, images, weights_npz, capsys,
                                              monkeypatch):
    import logging
    from xfeat_ros.tools.offline import main
    for name in ('', 'xfeat_offline', 'xfeat_ros'):
        monkeypatch.setattr(logging.getLogger(name), 'propagate', False)
    source = write_bag(tmp_path / 'in', images[:1])
    for extra, want in ((['--grid-cell-px', '32'], 'grid_cell_px and max_per_cell go together'),
                        (['--min-distance', '-5'], 'spread settings must be >= 0'),
                        (['--carry-frames', '-1'], 'spread settings must be >= 0')):
        assert main([str(source), str(tmp_path / 'out'), '--weights', str(weights_npz)]
                    + extra) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith('xfeat_offline: error: ') and want in err[-1]
        assert 'Traceback' not in '\n'.join(err)
