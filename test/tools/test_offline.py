# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Bags (sqlite3 and MCAP, through rosbags): xfeat_offline and xfeat_play.

Five TUM frames go into a bag written with rosbags' Writer; xfeat_offline
(CPU backend) writes Keypoints and Matches into a new bag, which is read back
with rosbags and checked against the CPU pipeline; xfeat_play publishes the
bag's images with their recorded stamps and bytes.
"""

import json
import os
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip('rosbags')
rclpy_serialization = pytest.importorskip('rclpy.serialization')

from rosbags.rosbag2 import Reader, StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import get_types_from_msg, get_typestore, Stores  # noqa: E402

from xfeat_ros.features.image_codec import image_msg  # noqa: E402
from xfeat_ros.ros.messages import features_from_msg, message_types  # noqa: E402
from xfeat_ros.runtime.stream import stamp_ns  # noqa: E402
from xfeat_ros.tools.image_files import list_sequence, read_image  # noqa: E402
from xfeat_ros.tools.play import stamp_msg  # noqa: E402

FRAMES = 5
TOPIC = '/camera/image_raw'
RECORD_DELAY_NS = 7_000_000  # bag time = image stamp + 7 ms: output must use the stamp
PLUGINS = {'sqlite3': StoragePlugin.SQLITE3, 'mcap': StoragePlugin.MCAP}
SUFFIXES = {'sqlite3': '.db3', 'mcap': '.mcap'}


def rosidl_hash(msgtype):
    """Return the RIHS01 type hash rosidl generated for an xfeat_ros_msgs type."""
    from ament_index_python.packages import get_package_share_directory
    name = msgtype.split('/')[-1]
    path = Path(get_package_share_directory('xfeat_ros_msgs')) / 'msg' / f'{name}.json'
    hashes = json.loads(path.read_text())['type_hashes']
    return next(h['hash_string'] for h in hashes if h['type_name'] == msgtype)


def write_image_bag(path, messages, storage, times=None):
    """Write sensor_msgs/Image ``messages`` to ``TOPIC`` of a new bag with rosbags."""
    if times is None:
        times = [stamp_ns(msg.header.stamp) + RECORD_DELAY_NS for msg in messages]
    with Writer(path, version=8, storage_plugin=PLUGINS[storage]) as writer:
        connection = writer.add_connection(TOPIC, 'sensor_msgs/msg/Image',
                                           typestore=get_typestore(Stores.ROS2_KILTED))
        for msg, time_ns in zip(messages, times):
            writer.write(connection, time_ns, rclpy_serialization.serialize_message(msg))
    return path


def read_bag(path):
    """Return ``{topic: [(bag_time_ns, xfeat_ros_msgs message)]}`` of an output bag."""
    keypoints_type, matches_type = message_types()
    types = {'xfeat_ros_msgs/msg/Keypoints': keypoints_type,
             'xfeat_ros_msgs/msg/Matches': matches_type}
    out = {}
    with Reader(path) as reader:
        for connection, timestamp, raw in reader.messages():
            msg = rclpy_serialization.deserialize_message(raw, types[connection.msgtype])
            out.setdefault(connection.topic, []).append((timestamp, msg))
    return out


@pytest.fixture(scope='module')
def images(data_dir):
    """Return the first TUM frames as rgb8 sensor_msgs/Image with their stamps."""
    frames = list_sequence(data_dir / 'data' / 'tum_fr2_desk')[:FRAMES]
    return [image_msg(*read_image(path), stamp_msg(stamp), 'tum_rgb') for stamp, path in frames]


@pytest.mark.ros
@pytest.mark.parametrize('storage,output_storage', [('sqlite3', 'mcap'), ('mcap', 'sqlite3')])
def test_offline_writes_node_messages(tmp_path, images, weights_npz, cpu_pipeline, storage,
                                      output_storage):
    source = write_image_bag(tmp_path / 'in', images, storage)
    result = subprocess.run(
        [sys.executable, '-m', 'xfeat_ros.tools.offline', str(source), str(tmp_path / 'out'),
         '--topic', TOPIC, '--storage', output_storage, '--backend', 'onnxruntime',
         '--weights', str(weights_npz)],
        env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f'{FRAMES} frames' in result.stdout and '0 rejected' in result.stdout, result.stdout
    assert len(list((tmp_path / 'out').glob(f'*{SUFFIXES[output_storage]}'))) == 1
    with Reader(tmp_path / 'out') as reader:
        assert {c.topic: c.msgtype for c in reader.connections} == {
            '/camera/keypoints': 'xfeat_ros_msgs/msg/Keypoints',
            '/camera/matches': 'xfeat_ros_msgs/msg/Matches'}
        # A reader without xfeat_ros_msgs decodes from the definitions in the bag.
        foreign = get_typestore(Stores.EMPTY)
        for connection in reader.connections:
            foreign.register(get_types_from_msg(connection.msgdef.data, connection.msgtype))
            assert connection.digest == rosidl_hash(connection.msgtype)
        connection, _, raw = next(reader.messages(reader.connections[:1]))
        decoded = foreign.deserialize_cdr(raw, connection.msgtype)
        assert decoded.header.stamp.sec == images[0].header.stamp.sec
        assert decoded.descriptors.size == 64 * (decoded.keypoints.size // 2) > 0
    out = read_bag(tmp_path / 'out')
    keypoints, matches = out['/camera/keypoints'], out['/camera/matches']
    assert len(keypoints) == FRAMES and len(matches) == FRAMES - 1
    stamps = [stamp_ns(image.header.stamp) for image in images]
    assert [t for t, _ in keypoints] == stamps and [t for t, _ in matches] == stamps[1:]
    expected = [cpu_pipeline.extract_msg(image) for image in images]
    for (_, msg), image, want in zip(keypoints, images, expected):
        assert stamp_ns(msg.header.stamp) == stamp_ns(image.header.stamp)
        assert msg.header.frame_id == 'tum_rgb'
        assert (msg.image_width, msg.image_height) == (640, 480)
        got = features_from_msg(msg)
        assert len(got) == len(want) > 100
        np.testing.assert_allclose(got.keypoints, want.keypoints, atol=1e-4)
        np.testing.assert_allclose(got.descriptors, want.descriptors, atol=1e-4)
    for index, (_, msg) in enumerate(matches, start=1):
        assert stamp_ns(msg.previous_stamp) == stamps[index - 1]
        assert stamp_ns(msg.header.stamp) == stamps[index]
        assert len(msg.previous_indices) == len(msg.current_indices) > 50
        want = cpu_pipeline.match(expected[index - 1], expected[index])
        assert list(msg.current_indices) == want.idx1.tolist()


def test_output_topics():
    from xfeat_ros.tools.offline import output_topics
    assert output_topics('/camera/image_raw') == ('/camera/keypoints', '/camera/matches')
    assert output_topics('/image') == ('/keypoints', '/matches')


def test_offline_rejects_and_size_change(tmp_path, images, weights_npz):
    from xfeat_ros.features.backbone import create_backbone
    from xfeat_ros.features.engine import CpuEngine
    from xfeat_ros.tools.offline import process_bag, summary
    import cv2
    tiny = image_msg(np.zeros((16, 16, 1), np.uint8), 'mono8', stamp_msg(1), 'tum_rgb')
    tiny.header.stamp = images[1].header.stamp
    small = []
    for image in images[2:4]:
        pixels = np.frombuffer(image.data, np.uint8).reshape(480, 640, 3)
        small.append(image_msg(cv2.resize(pixels, (320, 240)), 'rgb8', image.header.stamp,
                               'tum_rgb'))
    sequence = [images[0], tiny, *small, images[3]]  # recorded last: a repeated stamp
    times = [stamp_ns(msg.header.stamp) for msg in sequence[:-1]]
    source = write_image_bag(tmp_path / 'in', sequence, 'mcap', times + [times[-1] + 1])
    engine = CpuEngine(create_backbone('onnxruntime', str(weights_npz)))
    counts = process_bag(engine, source, tmp_path / 'out', storage='sqlite3')
    assert counts['frames'] == 3 and counts['matches'] == 2
    assert counts['rejected'] == 2 and counts['rejected_ImageTooSmallError'] == 1
    assert counts['rejected_StampOrderError'] == 1
    assert counts['matches_empty_size_change'] == 1
    assert '3 frames' in summary(counts) and '2 rejected' in summary(counts)
    matches = [msg for _, msg in read_bag(tmp_path / 'out')['/camera/matches']]
    assert len(matches[0].current_indices) == 0 and len(matches[1].current_indices) > 50


def test_offline_restarts_tracks_where_stamps_jump_back(tmp_path, images, weights_npz):
    """A bag of two recordings, the second an earlier one: it starts new tracks."""
    from xfeat_ros.features.backbone import create_backbone
    from xfeat_ros.features.engine import CpuEngine
    from xfeat_ros.tools.offline import process_bag, summary
    earlier = []
    for image in images[:2]:  # recorded 1000 s before the first three
        stamp = stamp_ns(image.header.stamp) - 1000 * 1_000_000_000
        earlier.append(image_msg(np.frombuffer(image.data, np.uint8).reshape(480, 640, 3),
                                 'rgb8', stamp_msg(stamp), 'tum_rgb'))
    sequence = images[:3] + earlier
    times = [stamp_ns(images[0].header.stamp) + i * 100_000_000 for i in range(5)]
    source = write_image_bag(tmp_path / 'in', sequence, 'mcap', times)
    engine = CpuEngine(create_backbone('onnxruntime', str(weights_npz)))
    counts = process_bag(engine, source, tmp_path / 'out', storage='sqlite3')
    assert counts['frames'] == 5 and counts['matches'] == 4 and counts['rejected'] == 0
    assert counts['stamp_jumps_back'] == 1 and '1 stamp jumps back' in summary(counts)
    out = read_bag(tmp_path / 'out')  # written at each image's stamp: in stamp order
    stamps = [stamp_ns(msg.header.stamp) for msg in sequence]
    matches = {stamp_ns(msg.header.stamp): msg for _, msg in out['/camera/matches']}
    keypoints = {stamp_ns(msg.header.stamp): msg for _, msg in out['/camera/keypoints']}
    jump = matches[stamps[3]]
    assert len(jump.current_indices) == 0  # matched to nothing
    assert jump.previous_stamp == images[2].header.stamp
    assert all(len(matches[stamps[i]].current_indices) > 50 for i in (1, 2, 4))
    ids = [np.frombuffer(keypoints[stamp].track_ids, np.uint64) for stamp in stamps]
    assert ids[3].min() > max(i.max() for i in ids[:3])  # new tracks, no id reused
    assert np.frombuffer(keypoints[stamps[3]].track_ages, np.uint32).max() == 1


def test_offline_descriptor_encoding(tmp_path, images, weights_npz, cpu_pipeline):
    from xfeat_ros.tools.offline import main
    source = write_image_bag(tmp_path / 'in', images[:2], 'sqlite3')
    assert main([str(source), str(tmp_path / 'out'), '--backend', 'onnxruntime',
                 '--weights', str(weights_npz), '--descriptor-encoding', 'int8']) == 0
    keypoints = read_bag(tmp_path / 'out')['/camera/keypoints']
    for (_, msg), image in zip(keypoints, images):
        assert msg.descriptor_encoding == 'int8' and len(msg.descriptors) == 0
        assert len(msg.descriptor_data) == 64 * len(msg.scores) > 0
        want = cpu_pipeline.extract_msg(image)
        np.testing.assert_allclose(features_from_msg(msg).descriptors, want.descriptors,
                                   atol=1.0 / 127)
    assert len(np.frombuffer(keypoints[1][1].track_ids, np.uint64)) == len(keypoints[1][1].scores)


def test_offline_tells_the_engine_its_groups(tmp_path, images, weights_npz):
    """A bag's groups hold max_frames_in_flight frames, whatever the cameras; the engine knows."""
    from xfeat_ros.runtime.scheduler import SchedulerConfig
    from xfeat_ros.features.engine import Capabilities, EngineConfig
    from xfeat_ros.features.factory import cpu_engine
    from xfeat_ros.tools.offline import process_bag

    class Expecting:
        capabilities = Capabilities(groups=True)

        def __init__(self, engine):
            self.engine, self.expected = engine, []

        def expect_groups(self, frames):
            self.expected.append(frames)

        def submit_group(self, msgs, slots, previous=None, chain=False):
            for msg, slot in zip(msgs, slots):
                self.engine.submit(msg, slot)

        def __getattr__(self, name):
            return getattr(self.engine, name)

    config = EngineConfig(backend='onnxruntime', weights=str(weights_npz))
    engine = Expecting(cpu_engine(config))
    source = write_image_bag(tmp_path / 'in', images[:3], 'sqlite3')
    counts = process_bag(engine, source, tmp_path / 'out', scheduling=SchedulerConfig(3),
                         config=config)
    assert engine.expected == [1, 3]   # the scheduler's guess (one camera), then the bag's
    assert counts['frames'] == 3


def test_offline_errors(tmp_path, images, weights_npz, capsys, monkeypatch):
    import logging
    from xfeat_ros.tools.offline import main
    for name in ('', 'xfeat_offline', 'xfeat_ros'):  # as launch_testing's pytest plugin does
        monkeypatch.setattr(logging.getLogger(name), 'propagate', False)
    source = write_image_bag(tmp_path / 'in', images[:1], 'sqlite3')

    def error_of(argv):
        assert main(argv) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith('xfeat_offline: error: ') and 'Traceback' not in err
        return err[-1]

    assert 'exists already' in error_of([str(source), str(source)])
    assert 'is not a rosbag2 bag' in error_of([str(tmp_path / 'nothing'), str(tmp_path / 'out')])
    assert "no sensor_msgs/msg/Image topic '/nope'" in error_of(
        [str(source), str(tmp_path / 'out'), '--topic', '/nope', '--backend', 'onnxruntime',
         '--weights', str(weights_npz)])
    assert "--stereo: entry 'a:a' is not 'left:right'" in error_of(
        [str(source), str(tmp_path / 'out'), '--stereo', 'a:a'])
    assert not (tmp_path / 'out').exists()


@pytest.mark.ros
def test_play_bag_with_stamps(tmp_path, images):
    from ros_harness import Client, private_topic
    from sensor_msgs.msg import Image
    source = write_image_bag(tmp_path / 'in', images, 'mcap')
    mcap_file = next(source.glob('*.mcap'))
    client = Client()
    received = []
    topic = private_topic('image')
    client.node.create_subscription(Image, topic, received.append, 10)
    try:
        process = subprocess.Popen(
            [sys.executable, '-m', 'xfeat_ros.tools.play', str(mcap_file), '--rate', '20',
             '--topic', topic],
            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        client.spin_until(lambda: len(received) == FRAMES or process.poll() is not None, 60)
        client.spin_until(lambda: len(received) == FRAMES, 5)
        assert len(received) == FRAMES, process.stdout.read()
        assert process.wait(30) == 0
        for got, sent in zip(received, images):
            assert stamp_ns(got.header.stamp) == stamp_ns(sent.header.stamp)
            assert (got.header.frame_id, got.encoding, got.step) == ('tum_rgb', 'rgb8', 1920)
            assert bytes(got.data) == bytes(sent.data)
    finally:
        client.close()


def euroc_stereo_bag(path, shared_dir, count=3):
    """Write EuRoC cam0/cam1 images and their camera_info into a bag, as a robot records them."""
    from sensor_msgs.msg import CameraInfo
    from xfeat_ros.features.camera import CameraModel
    folder = shared_dir / 'data' / 'euroc_v101_stereo'
    names = sorted(p.name for p in (folder / 'cam0').glob('*.png'))[:count]
    store = get_typestore(Stores.ROS2_KILTED)
    with Writer(path, version=8, storage_plugin=PLUGINS['mcap']) as writer:
        for cam in ('cam0', 'cam1'):
            model = CameraModel.from_euroc_yaml(folder / f'{cam}_sensor.yaml')
            info = CameraInfo()
            info.width, info.height = model.width, model.height
            info.distortion_model = model.distortion_model
            info.d = [float(v) for v in model.coeffs]
            info.k = [float(v) for v in model.matrix.reshape(-1)]
            images = writer.add_connection(f'/{cam}/image_raw', 'sensor_msgs/msg/Image',
                                           typestore=store)
            infos = writer.add_connection(f'/{cam}/camera_info', 'sensor_msgs/msg/CameraInfo',
                                          typestore=store)
            for name in names:
                stamp = int(Path(name).stem)
                info.header.stamp = stamp_msg(stamp)
                writer.write(infos, stamp, rclpy_serialization.serialize_message(info))
                image = image_msg(*read_image(folder / cam / name), stamp_msg(stamp), cam)
                writer.write(images, stamp + 1, rclpy_serialization.serialize_message(image))
    return path, count


@pytest.mark.ros
def test_offline_stereo_vins_and_cloud(tmp_path, shared_dir, weights_npz):
    """Offline runs the node's core: VINS features, keypoint cloud and stereo matches too."""
    from sensor_msgs.msg import PointCloud, PointCloud2
    from xfeat_ros.tools.offline import main
    source, count = euroc_stereo_bag(tmp_path / 'in', shared_dir)
    assert main([str(source), str(tmp_path / 'out'), '--backend', 'onnxruntime',
                 '--weights', str(weights_npz), '--top-k', '1024',
                 '--topic', '/cam0/image_raw', '--topic', '/cam1/image_raw',
                 '--stereo', '/cam0/image_raw:/cam1/image_raw', '--vins-features',
                 '--keypoint-cloud', '--stereo-epipolar-check-px', '1.0']) == 0
    types = {}
    with Reader(tmp_path / 'out') as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        raw = {}
        for connection, _, data in reader.messages():
            raw.setdefault(connection.topic, []).append(data)
    assert types['/cam0/stereo_matches'] == 'xfeat_ros_msgs/msg/Matches'
    assert types['/cam1/feature'] == 'sensor_msgs/msg/PointCloud'
    assert '/cam1/stereo_matches' not in types
    keypoints_type, matches_type = message_types()
    for cam in ('cam0', 'cam1'):
        assert len(raw[f'/{cam}/keypoints']) == count and len(raw[f'/{cam}/matches']) == count - 1
        features = [rclpy_serialization.deserialize_message(r, PointCloud)
                    for r in raw[f'/{cam}/feature']]
        clouds = [rclpy_serialization.deserialize_message(r, PointCloud2)
                  for r in raw[f'/{cam}/keypoint_cloud']]
        keypoints = [rclpy_serialization.deserialize_message(r, keypoints_type)
                     for r in raw[f'/{cam}/keypoints']]
        assert len(features) == len(clouds) == count
        for feature, cloud, msg in zip(features, clouds, keypoints):
            assert feature.header.stamp == msg.header.stamp == cloud.header.stamp
            assert len(feature.points) == cloud.width == len(msg.scores) > 500
    stereo = [rclpy_serialization.deserialize_message(r, matches_type)
              for r in raw['/cam0/stereo_matches']]
    assert len(stereo) == count and all(len(m.previous_indices) > 100 for m in stereo), \
        [len(m.previous_indices) for m in stereo]
