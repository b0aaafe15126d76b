# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_bench node mode: its parsers, the node's counts, a run end to end."""

import json
import subprocess
import sys

import pytest
from test_bench_pipeline import run_bench

from xfeat_ros.tools import plumbing
from xfeat_ros.tools.bench import node


def test_parsers():
    assert node.parse_node_configs('1x30,8x120,8xmax') == [(1, 30.0), (8, 120.0), (8, 0.0)]
    assert [node.config_label(c, r) for c, r in ((8, 120.0), (8, 0.0), (1, 7.5))] == \
        ['8x120', '8xmax', '1x7.5']
    assert node.split_cameras(['a', 'b', 'c'], 2) == [['a', 'c'], ['b']]


def test_final_counts_and_node_counts():
    log = ('[INFO] [1.0] [xfeat]: engine: pytorch on cuda:0\n'
           "[INFO] [2.0] [xfeat]: final counts: {'cam0': {'received': 14, 'accepted': 14, "
           "'published': 12, 'dropped_queue_full': 2}}\n")
    final = plumbing.parse_final_counts(log)
    assert final == {'cam0': {'received': 14, 'accepted': 14, 'published': 12,
                              'dropped_queue_full': 2}}
    assert node.node_counts(final, 4, 4) == (10, 8)
    older = {'cam0': {'accepted': 10, 'dropped_queue_full': 2, 'rejected': 1, 'published': 9}}
    assert node.node_counts(older, 0, 0) == (13, 9)
    assert plumbing.parse_final_counts('no such line') is None


def test_node_wrapper_prefix():
    assert node.node_wrapper(None, '8x120') == []
    assert node.node_wrapper('py-spy record -o "/tmp/p {label}.txt" --', '8x120') == \
        ['py-spy', 'record', '-o', '/tmp/p 8x120.txt', '--']


def test_node_param_reads_values_as_ros_does():
    from xfeat_ros.tools.bench.cli import _node_param
    assert _node_param('arm_next_frame:=false') == ('arm_next_frame', False)
    assert _node_param('top_k:=1024') == ('top_k', 1024)
    assert _node_param('cameras:=[a, b]') == ('cameras', ['a', 'b'])


@pytest.mark.parametrize('text', ['arm_next_frame=false', ':=1', 'top_k:=[1'])
def test_a_bad_node_param_is_one_line(text):
    done = subprocess.run([sys.executable, '-m', 'xfeat_ros.tools.bench', 'node',
                           '--node-param', text], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and 'Traceback' not in done.stderr
    assert '--node-param' in done.stderr.strip().splitlines()[-1]


def test_stage_medians_line():
    log = ("[INFO] [2.0] [xfeat]: final counts: {'cam0': {'published': 12}}\n"
           "[INFO] [2.1] [xfeat]: stage medians, ms: {'cam0': {'queue': 0.05, 'device': 1.2}}\n")
    assert plumbing.parse_stage_medians(log) == {'cam0': {'queue': 0.05, 'device': 1.2}}
    assert plumbing.parse_final_counts(log) == {'cam0': {'published': 12}}
    assert plumbing.parse_stage_medians('final counts: {}') is None


@pytest.mark.ros
def test_node_mode_end_to_end(shared_dir, tmp_path):
    pytest.importorskip('matplotlib')
    out, png = tmp_path / 'node.json', tmp_path / 'node.png'
    text = run_bench(['node', '--configs', '1x5', '--duration', '3', '--backend', 'onnxruntime',
                      '--resolution', '320x240', '--top-k', '512', '--num-images', '3',
                      '--warmup-frames', '2', '--drain-idle', '8', '--json', str(out),
                      '--queue-size', '50',  # on a loaded machine too, nothing is dropped
                      '--png', str(png), '--log-dir', str(tmp_path / 'logs')], 150)
    assert '1x5' in text
    data = json.loads(out.read_text())
    settings = data['settings']
    assert settings['ros_automatic_discovery_range'] == 'LOCALHOST'
    assert settings['input_qos_reliability'] == 'reliable'
    (row,) = data['configs']
    assert row['error'] is None and row['node_exit_code'] == 0
    assert row['label'] == '1x5' and row['cameras'] == 1 and row['target_hz'] == 5.0
    # 5 Hz of small images: nothing may be lost anywhere
    assert row['published'] == 15
    assert row['node_received'] == row['node_processed'] == row['delivered'] == 15
    assert row['dropped'] == 0 and row['duplicates'] == 0
    assert row['warmup'] == {'published': 2, 'delivered': 2}
    assert 4.0 < row['publish_hz'] < 6.0 and 3.0 < row['output_hz'] < 6.0
    lat = row['latency']
    assert lat['n'] == 15 and 0 < lat['median_ms'] <= lat['p99_ms'] <= lat['max_ms'] < 5000
    assert len(row['latencies_ms']) == 15 and min(row['latencies_ms']) > 0
    # the DDS reception comes before our callback, after the node wrote the Keypoints
    reader = row['latencies_at_reader_ms']
    assert len(reader) == 15 and min(reader) > 0
    assert all(r <= c for r, c in zip(reader, row['latencies_ms']))
    assert row['latency_at_reader']['n'] == 15 and row['keypoints_transport']['n'] == 15
    assert 0 <= row['keypoints_transport']['median_ms'] < row['latency_at_reader']['median_ms']
    assert row['collector_wait']['median_ms'] >= 0
    assert row['node_cpu_percent'] is not None and row['node_cpu_percent'] >= 0
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    png2 = tmp_path / 'again.png'
    run_bench(['plot', str(out), '--png', str(png2)], 60)
    assert png2.stat().st_size > 1000


@pytest.mark.ros
def test_node_mode_with_compressed_cameras(shared_dir, tmp_path):
    """--encoding jpeg: the cameras send CompressedImage, the node subscribes them."""
    out = tmp_path / 'node.json'
    run_bench(['node', '--configs', '1x5', '--duration', '2', '--backend', 'onnxruntime',
               '--resolution', '320x240', '--top-k', '256', '--num-images', '3',
               '--encoding', 'jpeg', '--warmup-frames', '2', '--drain-idle', '8',
               '--queue-size', '50', '--json', str(out)], 150)
    data = json.loads(out.read_text())
    assert data['settings']['encoding'] == 'jpeg'
    (row,) = data['configs']
    assert row['error'] is None and row['node_exit_code'] == 0
    # only <camera>/image/compressed carries images: the node received them all from there
    assert row['published'] == row['node_received'] == row['delivered'] == 10
    assert row['dropped'] == 0


class _Args:
    node_processes = 3
    node_wrapper = None
    backend = 'pytorch'
    weights = 'w.npz'
    gpu = 0
    threads = 0
    top_k = 4096
    max_frames_in_flight = 8
    queue_size = 1
    descriptor_encoding = 'int8'
    encoding = 'rgb8'
    node_param = [('arm_next_frame', False)]


def test_node_group_deals_cameras_and_names_nodes(tmp_path, monkeypatch):
    started = []

    class Child:
        def __init__(self, pid):
            self.pid = pid

        def poll(self):
            return None

    def fake_start(params, log, extra_args=(), wrapper=()):
        started.append((params['cameras'], tuple(extra_args)))
        assert params['descriptor_encoding'] == 'int8'  # --descriptor-encoding reaches each node
        assert params['input_transport'] == 'raw'         # raw cameras (jpeg/png: compressed)
        assert params['arm_next_frame'] is False  # and so does every --node-param
        return Child(len(started))
    monkeypatch.setattr(node, 'start_node_process', fake_start)
    group = node.NodeGroup(_Args(), [f'cam{i}' for i in range(8)], tmp_path, '8x120')
    assert [cams for cams, _ in started] == [['cam0', 'cam3', 'cam6'], ['cam1', 'cam4', 'cam7'],
                                             ['cam2', 'cam5']]
    assert [extra for _, extra in started] == [('-r', f'__node:=xfeat_{k}') for k in range(3)]
    assert group.pids == [1, 2, 3] and group.poll() is None
    assert [p.name for p in group.log_paths] == [f'node_8x120_{k}.log' for k in range(3)]
    for k, path in enumerate(group.log_paths):
        path.write_text(f"final counts: {{'cam{k}': {{'published': {k}}}}}\n")
    assert group.merged_log_lines(plumbing.parse_final_counts) == \
        {'cam0': {'published': 0}, 'cam1': {'published': 1}, 'cam2': {'published': 2}}
    group.log_paths[1].write_text('no counts\n')
    assert group.merged_log_lines(plumbing.parse_final_counts) is None


def test_a_refused_sample_is_counted_and_the_cameras_go_on():
    """The camera loop counts what the middleware refuses and keeps publishing the rest."""
    pytest.importorskip('rclpy', reason='rclpy (ROS 2) is not installed')
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
    from sensor_msgs.msg import Image
    from xfeat_ros.tools.bench.publisher import _publish_loop

    class Publisher:
        def __init__(self, refuse):
            self.refuse, self.calls, self.sent = refuse, 0, []

        def publish(self, msg):
            self.calls += 1
            if self.calls in self.refuse:
                raise _rclpy.RCLError('Failed to publish: cannot publish data, at rmw')
            self.sent.append(msg.header.frame_id)

    pubs = [Publisher(()), Publisher((2, 4))]
    counts, stats = _publish_loop(pubs, [[Image()], [Image()]], 0.0, frames=5, prefix='t')
    assert counts == [5, 3] and stats['failed'] == [0, 2] and stats['ticks'] == 5
    assert stats['first_error'] == 'Failed to publish: cannot publish data, at rmw'
    assert pubs[0].sent == ['t0', 't1', 't2', 't3', 't4']
    assert pubs[1].sent == ['t0', 't2', 't4']   # ticks 1 and 3 refused, not retried
