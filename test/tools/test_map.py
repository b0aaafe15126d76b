# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
xfeat_map (xfeat_ros.tools): COLMAP reconstruction from XFeat features, scored with evo.

Pure parts (camera conversion, pixel convention, pairing, scores of synthetic
trajectories, the command line) run on their own; the end-to-end runs use
../shared/data: TUM fr2/desk must register 20/20 with APE <= 1 cm and the
calibration's intrinsics read back from the reconstruction, the standing EuRoC
stereo frames must not crash, the database must read back with pycolmap, and
xfeat_offline bags must map with their own Keypoints/Matches. The sources
(layouts, ground truth) are tested in test_map_sources.py.
"""

import json
import sys

import numpy as np
import pytest

from xfeat_ros.features.camera import CameraModel
from xfeat_ros.features.engine import EngineConfig
from xfeat_ros.features.factory import create_engine
from xfeat_ros.tools import colmap_db, mapping, trajectory
from xfeat_ros.tools.map_sources import FrameInfo, MappingError, pose_matrix, read_tum_trajectory

TUM_INTRINSICS = ['520.9', '521.0', '325.1', '249.7']


def _rotation(axis, degrees):
    from scipy.spatial.transform import Rotation
    return Rotation.from_rotvec(np.radians(degrees) * np.asarray(axis, float)).as_matrix()


# -- camera and pixel convention ---------------------------------------------------------


def test_colmap_camera_models_and_pixel_centre():
    k = (500.0, 510.0, 320.0, 240.0)
    name, params = colmap_db.colmap_camera(CameraModel.from_parameters(k))
    assert name == 'PINHOLE' and params == [500.0, 510.0, 320.5, 240.5]
    name, params = colmap_db.colmap_camera(
        CameraModel.from_parameters(k, 'plumb_bob', (0.1, -0.2, 0.001, 0.002)))
    assert name == 'OPENCV' and params[4:] == [0.1, -0.2, 0.001, 0.002]
    name, params = colmap_db.colmap_camera(
        CameraModel.from_parameters(k, 'plumb_bob', (0.1, -0.2, 0.001, 0.002, 0.3)))
    assert name == 'FULL_OPENCV' and params[4:] == [0.1, -0.2, 0.001, 0.002, 0.3, 0, 0, 0]
    rational = (0.1, -0.2, 0.001, 0.002, 0.3, 0.01, 0.02, 0.03)
    name, params = colmap_db.colmap_camera(
        CameraModel.from_parameters(k, 'rational_polynomial', rational))
    assert name == 'FULL_OPENCV' and params[4:] == list(rational)
    name, params = colmap_db.colmap_camera(
        CameraModel.from_parameters(k, 'equidistant', (0.01, 0.02, 0.03, 0.04)))
    assert name == 'OPENCV_FISHEYE' and params == [500.0, 510.0, 320.5, 240.5,
                                                   0.01, 0.02, 0.03, 0.04]
    skewed = CameraModel(np.array([[500.0, 1.0, 320.0], [0.0, 500.0, 240.0], [0, 0, 1]]))
    with pytest.raises(MappingError, match='skew'):
        colmap_db.colmap_camera(skewed)


def test_pixel_convention_round_trip():
    points = np.array([[0.0, 0.0], [639.0, 479.0], [12.25, 3.5]], dtype=np.float32)
    colmap = colmap_db.to_colmap_pixels(points)
    assert colmap.dtype == np.float32
    np.testing.assert_array_equal(colmap, points + 0.5)
    np.testing.assert_array_equal(colmap_db.from_colmap_pixels(colmap), points)
    assert colmap_db.to_colmap_pixels(np.zeros((0, 2))).shape == (0, 2)


def test_pixel_convention_projects_like_the_camera_model():
    pycolmap = pytest.importorskip('pycolmap')
    model = CameraModel.from_parameters((520.9, 521.0, 325.1, 249.7), 'plumb_bob',
                                        (0.2312, -0.7849, -0.0033, -0.0001, 0.9172))
    name, params = colmap_db.colmap_camera(model)
    camera = pycolmap.Camera(model=name, width=640, height=480, params=params)
    rays = np.array([[0.1, -0.2], [-0.3, 0.25], [0.0, 0.0]])
    from xfeat_ros.features.camera import distort_normalized
    ours = distort_normalized(model, rays)
    theirs = camera.img_from_cam(np.hstack([rays, np.ones((3, 1))]))
    np.testing.assert_allclose(theirs, colmap_db.to_colmap_pixels(ours), atol=1e-3)


# -- pairing -----------------------------------------------------------------------------


def test_pairing_choice_and_window():
    assert mapping.choose_pairing('auto', mapping.EXHAUSTIVE_MAX_FRAMES, 4) == (
        'exhaustive', None)
    assert mapping.choose_pairing('auto', mapping.EXHAUSTIVE_MAX_FRAMES + 1, 4) == (
        'sequential', 4)
    assert mapping.choose_pairing('sequential', 5, 2) == ('sequential', 2)
    assert mapping.choose_pairing('exhaustive', 500, 2) == ('exhaustive', None)
    pairs = mapping.sequential_pairs
    assert pairs([0, 1, 2, 3], 1) == [(0, 1), (1, 2), (2, 3)]
    assert len(pairs(list(range(20)), 4)) == 19 + 18 + 17 + 16
    assert len(pairs(list(range(20)), None)) == 190
    # Long gaps: powers of two beyond the window, up to max_gap.
    gaps = {j - i for i, j in pairs(list(range(40)), 2, 16)}
    assert gaps == {1, 2, 4, 8, 16}
    assert len(pairs(list(range(20)), 4, 128)) == 70 + 12 + 4
    # Stereo: frames of one instant share a rank and always pair.
    assert pairs([0, 0, 1, 1], 1) == [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3)]
    assert pairs([], 3) == []


# -- trajectories and scores -------------------------------------------------------------


def _circle(count=12):
    poses = []
    for i in range(count):
        angle = 2 * np.pi * i / count * 0.5
        pose = np.eye(4)
        pose[:3, :3] = _rotation((0, 0, 1), np.degrees(angle))
        pose[:3, 3] = [np.cos(angle), np.sin(angle), 0.1 * i]
        poses.append(pose)
    return poses


def test_tum_text_round_trip(tmp_path):
    poses = _circle()
    rows = [(FrameInfo(f'{i}.png', 'cam0', 10 ** 9 + i * 10 ** 8, i), p)
            for i, p in enumerate(poses)]
    path = tmp_path / 'trajectory.txt'
    path.write_text(trajectory.tum_text(rows))
    stamps, read = read_tum_trajectory(path)
    assert stamps.tolist() == [f.stamp_ns for f, _ in rows]
    np.testing.assert_allclose(read, np.stack(poses), atol=1e-8)
    no_stamp = [(FrameInfo('a.png', 'cam0', None, 7), poses[0])]
    assert trajectory.tum_text(no_stamp).splitlines()[1].startswith('7.000000000 ')


def test_scores_are_sim3_invariant_and_see_errors():
    pytest.importorskip('evo')
    truth = _circle()
    similarity = np.eye(4)
    similarity[:3, :3] = 3.0 * _rotation((1, 2, 3) / np.linalg.norm((1, 2, 3)), 40)
    similarity[:3, 3] = [5, -2, 1]
    frames = [FrameInfo(f'{i}.png', 'cam0', i * 10 ** 8, i, pose) for i, pose in
              enumerate(truth)]
    estimate = []
    for pose in truth:
        moved = similarity @ pose
        moved[:3, :3] /= 3.0
        estimate.append(moved)
    scores = trajectory.score(list(zip(frames, estimate)))
    assert scores['ape_rmse_m'] < 1e-9 and scores['rpe_rotation_deg'] < 1e-5
    assert abs(scores['sim3_scale'] - 1 / 3) < 1e-9 and scores['scored_frames'] == 12
    noisy = [p.copy() for p in estimate]
    noisy[5][:3, 3] += [0.3, 0, 0]   # 0.1 m in ground-truth units
    noisy[6][:3, :3] = noisy[6][:3, :3] @ _rotation((0, 1, 0), 2.0)
    scores = trajectory.score(list(zip(frames, noisy)))
    assert 0.01 < scores['ape_rmse_m'] < 0.1 and scores['ape_max_m'] < 0.1
    assert 0.5 < scores['rpe_rotation_deg'] < 2.0
    assert trajectory.score(list(zip(frames, estimate))[:2]) is None
    unknown = [(FrameInfo('x', 'cam0', 0, i), p) for i, p in enumerate(estimate)]
    assert trajectory.score(unknown) is None


def test_plot_with_and_without_truth(tmp_path):
    pytest.importorskip('evo')
    truth = _circle()
    frames = [FrameInfo(f'{i}.png', 'cam0', i * 10 ** 8, i, pose) for i, pose in
              enumerate(truth)]
    rows = list(zip(frames, truth))
    trajectory.plot(tmp_path / 'a.png', rows, trajectory.score(rows), 'with truth')
    trajectory.plot(tmp_path / 'b.png', rows, None, 'without')
    for name in ('a.png', 'b.png'):
        assert (tmp_path / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_world_from_camera_of_a_pycolmap_image():
    pycolmap = pytest.importorskip('pycolmap')
    pose = pose_matrix([1.0, 2.0, 3.0], [0.1, 0.2, 0.3, 0.9273618])
    reconstruction = pycolmap.Reconstruction()
    camera = pycolmap.Camera(model='PINHOLE', width=10, height=10, params=[5, 5, 5, 5],
                             camera_id=1)
    reconstruction.add_camera_with_trivial_rig(camera)
    image = pycolmap.Image(name='a.png', camera_id=camera.camera_id, image_id=1)
    inverse = np.linalg.inv(pose)
    reconstruction.add_image_with_trivial_frame(
        image, pycolmap.Rigid3d(pycolmap.Rotation3d(inverse[:3, :3]), inverse[:3, 3]))
    np.testing.assert_allclose(trajectory.world_from_camera(reconstruction.images[1]), pose,
                               atol=1e-9)


# -- command line ------------------------------------------------------------------------


def _write_images(folder, names, size=(48, 64)):
    import cv2
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        cv2.imwrite(str(folder / name), np.full(size, 128, np.uint8))


@pytest.mark.parametrize('argv,words', [
    ([], 'required'),
    (['{tum}'], '--out'),
    (['/no/such/folder', '--out', '{out}'], 'does not exist'),
    (['{tum}', '--out', '{out}', '--window', '0'], 'positive'),
    (['{tum}', '--out', '{out}', '--features', 'orb'], 'invalid choice'),
    (['{tum}', '--out', '{out}', '--distortion', '0.1'], 'need --intrinsics'),
    (['{tum}', '--out', '{full}'], 'not an empty folder'),
    (['{tum}', '--out', '{out}', '--intrinsics', '1', '2'], 'expected 4'),
    (['{tum}', '--out', '{out}', '--groundtruth', '/no/file'], 'not a file'),
])
def test_command_line_mistakes_get_one_line(tmp_path, capsys, argv, words):
    full = tmp_path / 'full'
    full.mkdir()
    (full / 'x').write_text('')
    values = {'tum': str(tmp_path), 'out': str(tmp_path / 'out'), 'full': str(full)}
    with pytest.raises(SystemExit) as exit_info:
        mapping.main([a.format(**values) for a in argv])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].startswith('xfeat_map: error:')


def test_run_errors_get_one_line(tmp_path, capsys):
    _write_images(tmp_path / 'plain', ['a.png', 'b.png'])
    code = mapping.main([tmp_path / 'plain', '--out', tmp_path / 'out'])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == mapping.EXIT_ERROR and len(lines) == 1 and '--intrinsics' in lines[0]
    (tmp_path / 'empty').mkdir()
    code = mapping.main([tmp_path / 'empty', '--out', tmp_path / 'out2'])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == mapping.EXIT_ERROR and len(lines) == 1 and 'neither' in lines[0]


def test_without_pycolmap_says_what_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, 'pycolmap', None)
    _write_images(tmp_path / 'plain', ['a.png', 'b.png'])
    code = mapping.main([tmp_path / 'plain', '--out', tmp_path / 'out'] + ['--intrinsics']
                        + TUM_INTRINSICS)
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == mapping.EXIT_ERROR and len(lines) == 1
    assert 'pip install' in lines[0] and 'pycolmap' in lines[0] and 'evo' in lines[0]


# -- end to end on ../shared/data --------------------------------------------------------

# top_k 2048 keeps the run short on a 2-core machine (mapping dominates); measured
# 0.37 cm APE (4096: 0.41-0.50 cm over seeds 0-2, docs/mapping.md).
TUM_TOP_K = 2048
TUM_ARGS = ['--pairing', 'sequential', '--seed', '0', '--top-k', str(TUM_TOP_K)]


@pytest.fixture(scope='module')
def tum_map(shared_dir, weights_npz, tmp_path_factory):
    """Run xfeat_map once on TUM fr2/desk (20 frames); returns (exit code, out, summary)."""
    pytest.importorskip('pycolmap')
    pytest.importorskip('evo')
    out = tmp_path_factory.mktemp('map') / 'tum'
    code = mapping.main([shared_dir / 'data' / 'tum_fr2_desk', '--out', out,
                         '--weights', weights_npz] + TUM_ARGS)
    return code, out, json.loads((out / 'summary.json').read_text())


def test_tum_registers_every_frame_within_a_centimetre(tum_map):
    import pycolmap
    code, out, summary = tum_map
    assert code == 0
    assert summary['total_images'] == 20 and summary['registered_images'] == 20
    assert summary['ape_rmse_m'] <= 0.01, summary['ape_rmse_m']
    assert summary['rpe_rotation_deg'] < 1.0
    assert summary['ground_truth_frames'] == summary['scored_frames'] == 20
    assert 0 < summary['mean_reprojection_error_px'] < 4
    assert summary['mean_track_length'] > 2 and summary['num_points3D'] > 1000
    assert summary['seconds'] > 0 and summary['seed'] == 0
    assert summary['pairing'] == 'sequential' and summary['pairs'] == 86
    assert summary['cameras']['cam0']['model'] == 'FULL_OPENCV'
    assert summary['cameras']['cam0']['params'][:4] == [520.9, 521.0, 325.6, 250.2]
    # The reconstruction's camera, read back, is the calibration (COLMAP changed nothing).
    assert summary['reconstruction_cameras'] == summary['cameras']
    assert summary['mapper']['fixed_intrinsics'] is True and summary['intrinsics_changed'] == []
    assert summary['engine']['name'] == 'onnxruntime'
    stamps, poses = read_tum_trajectory(out / 'trajectory.txt')
    assert len(stamps) == 20 and stamps[0] == 1311868169163498000
    assert (out / 'trajectory.png').read_bytes()[:4] == b'\x89PNG'
    assert (out / summary['model'] / 'images.bin').is_file()
    model = pycolmap.Reconstruction(str(out / summary['model']))
    assert [list(c.params) for c in model.cameras.values()] == [
        summary['cameras']['cam0']['params']]


def test_database_reads_back_with_pycolmap(tum_map, shared_dir, cpu_pipeline):
    import pycolmap
    from xfeat_ros.tools.image_files import read_grey
    from xfeat_ros.features.pipeline import CpuPipeline
    _, out, summary = tum_map
    pipeline = CpuPipeline(cpu_pipeline.backbone, top_k=TUM_TOP_K)
    with pycolmap.Database.open(str(out / 'database.db')) as db:
        images = {image.name: image for image in db.read_all_images()}
        assert len(images) == db.num_frames() == 20 and db.num_rigs() == 1
        camera = db.read_all_cameras()[0]
        assert camera.model.name == 'FULL_OPENCV' and camera.has_prior_focal_length
        np.testing.assert_allclose(camera.params[:4], [520.9, 521.0, 325.6, 250.2])
        first = images['rgb/1311868169.163498.png']
        second = images['rgb/1311868169.263274.png']
        keypoints = db.read_keypoints(first.image_id)
        want = pipeline.extract(read_grey(
            shared_dir / 'data' / 'tum_fr2_desk' / 'rgb' / '1311868169.163498.png'))
        assert len(keypoints) == len(want) == TUM_TOP_K
        np.testing.assert_array_equal(colmap_db.from_colmap_pixels(keypoints), want.keypoints)
        matches = db.read_matches(first.image_id, second.image_id)
        other = pipeline.extract(read_grey(
            shared_dir / 'data' / 'tum_fr2_desk' / 'rgb' / '1311868169.263274.png'))
        expected = pipeline.match(want, other)
        assert matches[:, 0].tolist() == expected.idx0.tolist()
        assert matches[:, 1].tolist() == expected.idx1.tolist()
        geometry = db.read_two_view_geometry(first.image_id, second.image_id)
        assert len(geometry.inlier_matches) > 0.5 * len(matches) > 300
        assert db.num_verified_image_pairs() == summary['database']['verified_pairs'] > 60
    assert summary['database']['matched_pairs'] == summary['pairs']


def test_euroc_standing_still_reports_what_it_can(shared_dir, weights_npz, tmp_path, capsys):
    pytest.importorskip('pycolmap')
    pytest.importorskip('evo')
    code = mapping.main([shared_dir / 'data' / 'euroc_v101_stereo', '--out', tmp_path / 'out',
                         '--weights', weights_npz, '--stereo', '--top-k', '1024',
                         '--max-frames', '6', '--pairing', 'sequential', '--window', '1',
                         '--max-gap', '4'])
    summary = json.loads((tmp_path / 'out' / 'summary.json').read_text())
    assert code in (0, mapping.EXIT_NO_MODEL)
    assert summary['total_images'] == 12 and summary['kind'] == 'euroc'
    assert set(summary['cameras']) == {'cam0', 'cam1'}
    assert summary['cameras']['cam0']['model'] == 'OPENCV'
    assert summary['ground_truth_frames'] == 0 and summary['ape_rmse_m'] is None
    assert summary['database']['verified_pairs'] > 0
    assert (summary['registered_images'] > 0) == (code == 0)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"{summary['registered_images']}/12 images registered" in line


# -- bags: an image topic with CameraInfo, and xfeat_offline's output ---------------------

BAG_FRAMES = 20
BAG_ARGS = ['--top-k', '1024', '--pairing', 'sequential', '--window', '2', '--max-gap', '16']


@pytest.fixture(scope='module')
def tum_bags(shared_dir, weights_npz, tmp_path_factory):
    """Write an image bag (with CameraInfo) of TUM fr2/desk and its xfeat_offline bag."""
    pytest.importorskip('pycolmap')
    serialization = pytest.importorskip('rclpy.serialization')
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import get_typestore, Stores
    from sensor_msgs.msg import CameraInfo
    from xfeat_ros.tools.image_files import list_sequence, read_image
    from xfeat_ros.features.image_codec import image_msg
    from xfeat_ros.tools.offline import process_bag
    from xfeat_ros.tools.play import stamp_msg
    root = tmp_path_factory.mktemp('bags')
    info = CameraInfo(width=640, height=480, distortion_model='plumb_bob',
                      d=[0.2312, -0.7849, -0.0033, -0.0001, 0.9172],
                      k=[520.9, 0.0, 325.1, 0.0, 521.0, 249.7, 0.0, 0.0, 1.0])
    store = get_typestore(Stores.ROS2_KILTED)
    with Writer(root / 'images', version=8, storage_plugin=StoragePlugin.SQLITE3) as writer:
        info_connection = writer.add_connection('/camera/camera_info',
                                                'sensor_msgs/msg/CameraInfo', typestore=store)
        image_connection = writer.add_connection('/camera/image_raw', 'sensor_msgs/msg/Image',
                                                 typestore=store)
        for stamp, path in list_sequence(shared_dir / 'data' / 'tum_fr2_desk')[:BAG_FRAMES]:
            info.header.stamp = stamp_msg(stamp)
            writer.write(info_connection, stamp, serialization.serialize_message(info))
            writer.write(image_connection, stamp, serialization.serialize_message(
                image_msg(*read_image(path), stamp_msg(stamp), 'tum_rgb')))
    engine = create_engine(EngineConfig('onnxruntime', str(weights_npz), top_k=1024))
    counts = process_bag(engine, root / 'images', root / 'features', '/camera/image_raw')
    assert counts['frames'] == BAG_FRAMES and counts['rejected'] == 0
    return root


@pytest.mark.ros
def test_image_bag_uses_its_camera_info(tum_bags, shared_dir, weights_npz, tmp_path):
    code = mapping.main([tum_bags / 'images', '--out', tmp_path / 'out', '--weights',
                         weights_npz, '--groundtruth',
                         shared_dir / 'data' / 'tum_fr2_desk' / 'groundtruth.txt',
                         '--features', 'xfeat'] + BAG_ARGS)
    summary = json.loads((tmp_path / 'out' / 'summary.json').read_text())
    assert code == 0 and summary['kind'] == 'image-bag'
    assert summary['topic'] == '/camera/image_raw'
    assert summary['cameras']['cam0']['params'][:4] == [520.9, 521.0, 325.6, 250.2]
    assert summary['total_images'] == summary['ground_truth_frames'] == BAG_FRAMES
    assert summary['registered_images'] == BAG_FRAMES
    assert summary['ape_rmse_m'] < 0.02


@pytest.mark.ros
def test_offline_bag_keypoints_and_matches_used_as_they_are(tum_bags, shared_dir, tmp_path):
    import pycolmap
    from rclpy.serialization import deserialize_message
    from rosbags.rosbag2 import Reader
    from xfeat_ros.ros.messages import message_types
    code = mapping.main([tum_bags / 'features', '--out', tmp_path / 'out', '--intrinsics']
                        + TUM_INTRINSICS + ['--distortion', '0.2312', '-0.7849', '-0.0033',
                                            '-0.0001', '0.9172', '--groundtruth',
                                            shared_dir / 'data' / 'tum_fr2_desk'
                                            / 'groundtruth.txt'] + BAG_ARGS)
    summary = json.loads((tmp_path / 'out' / 'summary.json').read_text())
    assert code == 0 and summary['kind'] == 'features-bag' and summary['engine'] is None
    assert summary['topic'] == '/camera/keypoints'
    assert summary['registered_images'] == BAG_FRAMES and summary['ape_rmse_m'] < 0.02
    keypoints_type, matches_type = message_types()
    recorded = {}
    with Reader(tum_bags / 'features') as reader:
        for connection, _, raw in reader.messages():
            msg = deserialize_message(raw, keypoints_type if connection.topic.endswith(
                'keypoints') else matches_type)
            stamp = msg.header.stamp.sec * 10 ** 9 + msg.header.stamp.nanosec
            recorded.setdefault(stamp, {})[connection.topic.rsplit('/', 1)[1]] = msg
    stamps = sorted(recorded)
    with pycolmap.Database.open(str(tmp_path / 'out' / 'database.db')) as db:
        ids = {image.name: image.image_id for image in db.read_all_images()}
        for previous, stamp in zip(stamps, stamps[1:]):
            keypoints = np.frombuffer(recorded[stamp]['keypoints'].keypoints,
                                      np.float32).reshape(-1, 2)
            np.testing.assert_array_equal(db.read_keypoints(ids[f'{stamp}.png']),
                                          keypoints + np.float32(0.5))
            got = db.read_matches(ids[f'{previous}.png'], ids[f'{stamp}.png'])
            matches = recorded[stamp]['matches']
            assert got[:, 0].tolist() == list(matches.previous_indices)
            assert got[:, 1].tolist() == list(matches.current_indices)


@pytest.mark.ros
def test_bag_mistakes_get_one_line(tum_bags, tmp_path, capsys):
    for extra, words in ((['--features', 'sift'], 'needs images'),
                         (['--stereo'], '--stereo is for EuRoC'),
                         (['--topic', '/nothing'], "no image or Keypoints topic '/nothing'")):
        code = mapping.main([tum_bags / 'features', '--out', tmp_path / extra[0][2:],
                             '--intrinsics'] + TUM_INTRINSICS + extra)
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == mapping.EXIT_ERROR and len(lines) == 1 and words in lines[0], lines
        assert not (tmp_path / extra[0][2:] / 'database.db').exists()
