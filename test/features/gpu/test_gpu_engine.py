# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The GPU engine end to end: frames in flight, typed errors, sizes, CPU agreement.

GPU tests carry ``@pytest.mark.gpu`` and are skipped (with the reason) where
CuPy or a CUDA device is missing. Parity with upstream's golden outputs is
test_parity.py's (one test over both engines); the CPU-vs-GPU checks here use
the thresholds of test/golden_util.py. When ``XFEAT_ROS_REPORT_DIR`` is set,
their numbers are added to ``gpu_parity.json`` there.

Host-only tests at the end (TensorRT output binding by shape, backend
selection errors, message bytes) run on CI too.
"""

from types import SimpleNamespace

from golden_util import (COSINE_MIN, FOUND_MIN, GOLDEN_IMAGES, parity, SCORE_REL_MAX,
                         write_report as write_report_file)
import numpy as np
import pytest
from xfeat_ros.errors import (BackendError, ImageLayoutError, ImageTooSmallError,
                              UnsupportedEncodingError)
from xfeat_ros.features.gpu.backbone import expected_output_shapes
from xfeat_ros.features.gpu.backbone_onnx import bind_by_shape
from xfeat_ros.features.gpu.engine import message_bytes
from xfeat_ros.features.image_codec import ENCODINGS, raw_image
from xfeat_ros.features.match import mutual_nn_match
from xfeat_ros.tools.image_files import read_grey, read_image


REPORT = {}


def golden_msg(shared_dir, stem):
    """Message of one golden image, as read from disk (rgb8 or mono8)."""
    pixels, encoding = read_image(shared_dir / 'data' / GOLDEN_IMAGES[stem])
    return raw_image(pixels, encoding)


def single(engine, msg):
    """Features of one frame submitted alone (one slot, one sync)."""
    slot = engine.alloc_slot()
    engine.submit(msg, slot)
    engine.synchronize()
    return engine.features(slot)


@pytest.fixture(scope='module')
def engine(weights_npz):
    """Build one PyTorch-backed GPU engine; module scope, so graphs are captured once."""
    from xfeat_ros.features.gpu.factory import create_gpu_engine
    return create_gpu_engine('pytorch', str(weights_npz), 0, 4096, 0.05, 0.82)


@pytest.fixture(scope='module')
def gpu_features(engine, shared_dir):
    """GPU features of every golden image (each submitted on its own)."""
    return {stem: single(engine, golden_msg(shared_dir, stem)) for stem in GOLDEN_IMAGES}


@pytest.fixture(scope='module', autouse=True)
def write_report():
    """Add the collected CPU-vs-GPU numbers to gpu_parity.json where XFEAT_ROS_REPORT_DIR says."""
    yield
    write_report_file('gpu_parity.json', REPORT)


# -- frames in flight -----------------------------------------------------------------------------

def flight_messages(shared_dir):
    """Eight frames of mixed encodings and sizes (two pairs share a size for matching)."""
    tum = [read_image(shared_dir / 'data' / GOLDEN_IMAGES[s])[0]
           for s in list(GOLDEN_IMAGES)[3:7]]
    euroc, _ = read_image(shared_dir / 'data' / GOLDEN_IMAGES['cam0_1403715273262142976'])
    graf, _ = read_image(shared_dir / 'data' / GOLDEN_IMAGES['oxford_graf_img1'])
    grey16 = (tum[2].mean(axis=2) * 257).astype(np.uint16)[:, :, None]
    alpha = np.full(tum[3].shape[:2] + (1,), 255, np.uint8)
    return [raw_image(tum[0], 'rgb8'),
            raw_image(tum[1][:, :, ::-1], 'bgr8', pad=4, pad_byte=0xAB),
            raw_image(grey16, 'mono16', bigendian=True),
            raw_image(np.concatenate([tum[3], alpha], axis=2), 'rgba8'),
            raw_image(euroc, 'mono8'), raw_image(graf, 'rgb8'),
            raw_image(np.ascontiguousarray(graf[:481, :643]), 'rgb8'),
            raw_image(np.concatenate([tum[0][:, :, ::-1], alpha], axis=2), 'bgra8')]


@pytest.mark.gpu
def test_images_in_the_engines_buffers_are_uploaded_as_they_are(engine, shared_dir,
                                                                monkeypatch):
    """Pixels taken into ``image_buffer()`` give the same features, with no staging copy."""
    msgs = flight_messages(shared_dir)[:4]
    want = [single(engine, msg) for msg in msgs]
    pooled = []
    for msg in msgs[:3]:  # as the node takes them: a payload, the pixels a view inside it
        data = np.frombuffer(msg.data, np.uint8)
        buffer = engine.image_buffer(data.size + 100)
        buffer[100:100 + data.size] = data
        pixels = memoryview(buffer[100:100 + data.size]).toreadonly()
        pooled.append(SimpleNamespace(**{**vars(msg), 'data': pixels}))
    del buffer
    copied = []
    copy = engine._copier.copy
    monkeypatch.setattr(engine._copier, 'copy',
                        lambda copies: (copied.append(len(copies)), copy(copies)))
    slots = [engine.alloc_slot() for _ in msgs]
    engine.submit(pooled[0], slots[0])
    engine.submit_group(pooled[1:] + msgs[3:], slots[1:])
    assert copied == [1]  # only the frame outside the pool was copied
    in_use = engine._image_pool.stats()[2]
    assert in_use >= 3
    got = engine.results(slots)
    for (features, _), expected in zip(got, want):
        assert_same_features(features, expected)
    del pooled, pixels  # the node lets an image go once its outputs are sent
    assert engine._image_pool.stats()[2] == in_use - 3  # the engine let go after the results


def assert_same_features(a, b):
    """Bitwise-equal features (same kernels, same inputs, deterministic top-K)."""
    assert a.image_hw == b.image_hw
    for name in ('keypoints', 'scores', 'descriptors'):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize('pair', ['graf', 'sizes', 'empty'])
def test_match_features_equals_cpu_matching(pair, engine, gpu_features):
    """Stereo matching of host features on the device equals the NumPy reference."""
    from xfeat_ros.features.pipeline import Features
    stems = list(GOLDEN_IMAGES)
    f0, f1 = gpu_features[stems[0]], gpu_features[stems[1]]
    if pair == 'sizes':  # more rows than the engine's top_k: the upload slots grow
        f1 = Features(np.vstack([f1.keypoints] * 2), np.concatenate([f1.scores] * 2),
                      np.vstack([f1.descriptors, f0.descriptors]), f1.image_hw)
    if pair == 'empty':
        f1 = Features(f1.keypoints[:0], f1.scores[:0], f1.descriptors[:0], f1.image_hw)
    got = engine.match_features(f0, f1)
    idx0, idx1, sim = mutual_nn_match(f0.descriptors, f1.descriptors, 0.82)
    assert len(got) == len(idx0) and (pair == 'empty') == (len(idx0) == 0)
    order = np.argsort(got.idx1)
    np.testing.assert_array_equal(got.idx1[order], np.sort(idx1))
    np.testing.assert_array_equal(got.idx0[order], idx0[np.argsort(idx1)])
    np.testing.assert_allclose(got.similarity[order], sim[np.argsort(idx1)], atol=1e-5)


@pytest.mark.gpu
def test_eight_frames_in_flight_equal_single_frames(engine, shared_dir):
    """With ``max_batch=1`` (one backbone call per frame) frames in flight are bitwise alone."""
    from xfeat_ros.features.gpu.engine import GpuEngine
    unbatched = GpuEngine(engine.backbone, 0, 4096, 0.05, 0.82, max_batch=1)
    msgs = flight_messages(shared_dir)
    alone = [single(unbatched, msg) for msg in msgs]
    slots = [unbatched.alloc_slot() for _ in msgs]
    for msg, slot in zip(msgs, slots):
        unbatched.submit(msg, slot)
    for prev, slot in zip(slots, slots[1:4]):  # tum frames 0..3 share 640x480
        unbatched.submit_match(prev, slot)
    unbatched.synchronize()
    for i, (slot, want) in enumerate(zip(slots, alone)):
        assert_same_features(unbatched.features(slot), want)
        assert len(want) > 100, f'frame {i}: only {len(want)} keypoints'
    for prev, slot in zip(slots, slots[1:4]):
        m = unbatched.matches(slot)
        idx0, idx1, _ = mutual_nn_match(unbatched.features(prev).descriptors,
                                        unbatched.features(slot).descriptors, 0.82)
        assert set(zip(m.idx0.tolist(), m.idx1.tolist())) == set(zip(idx0.tolist(),
                                                                     idx1.tolist()))
        assert len(m) > 50
    assert unbatched.matches(slots[0]) is None


@pytest.mark.gpu
@pytest.mark.parametrize('chunk', [None, 1, 3])
def test_ten_pairs_in_one_flush_equal_the_reference_matcher(engine, shared_dir, chunk):
    """Ten pairs in one flush, in chunks through the pair tables: 8 + 2 (shipped), 1s, 3s."""
    from xfeat_ros.features.gpu.pair_graph import BATCH_PAIRS
    msgs = flight_messages(shared_dir)
    msgs = msgs + msgs[:3]
    assert len(msgs) - 1 > BATCH_PAIRS
    slots = [engine.alloc_slot() for _ in msgs]
    engine._pairs.batch_pairs = chunk or BATCH_PAIRS
    try:
        for msg, slot in zip(msgs, slots):
            engine.submit(msg, slot)
        for prev, slot in zip(slots, slots[1:]):
            engine.submit_match(prev, slot)
        engine.synchronize()
    finally:
        engine._pairs.batch_pairs = BATCH_PAIRS
    for prev, slot in zip(slots, slots[1:]):
        m = engine.matches(slot)
        idx0, idx1, _ = mutual_nn_match(engine.features(prev).descriptors,
                                        engine.features(slot).descriptors, 0.82)
        assert set(zip(m.idx0.tolist(), m.idx1.tolist())) == set(zip(idx0.tolist(),
                                                                     idx1.tolist()))
    assert len(engine.matches(slots[-1])) > 50  # tum 2 after tum 1: a real pair


@pytest.mark.gpu
def test_graph_replay_equals_direct_launches(engine, shared_dir):
    from xfeat_ros.features.gpu.engine import GpuEngine
    direct = GpuEngine(engine.backbone, 0, 4096, 0.05, 0.82, graphs=False)
    msgs = flight_messages(shared_dir)[:4]
    results = []
    graph_slots = [engine.alloc_slot() for _ in msgs]
    direct_slots = [direct.alloc_slot() for _ in msgs]
    # graphs captured, direct launches, the same slots again: graphs replayed
    for eng, slots in ((engine, graph_slots), (direct, direct_slots), (engine, graph_slots)):
        for i, (msg, slot) in enumerate(zip(msgs, slots)):
            eng.submit(msg, slot)
            if i:
                eng.submit_match(slots[i - 1], slot)
        eng.synchronize()
        results.append([(eng.features(s), eng.matches(s)) for s in slots])
    for other in results[1:]:
        for (fa, ma), (fb, mb) in zip(results[0], other):
            assert_same_features(fa, fb)
            assert (ma is None) == (mb is None)
            if ma is not None:
                np.testing.assert_array_equal(ma.idx0, mb.idx0)
                np.testing.assert_array_equal(ma.idx1, mb.idx1)
                np.testing.assert_array_equal(ma.similarity, mb.similarity)


@pytest.mark.gpu
def test_slots_reused_without_reallocation(engine, shared_dir):
    import cupy
    msgs = flight_messages(shared_dir)[:4]
    slots = [engine.alloc_slot() for _ in range(2)]
    for msg in msgs:  # warm-up: staging buffers grow to the largest message once
        for slot in slots:
            engine.submit(msg, slot)
    engine.synchronize()
    pointers = [(s.keypoints.data.ptr, s.descriptors.data.ptr, s.staging.ptr) for s in slots]
    workspaces = list(engine._workspaces.values())
    used = cupy.get_default_memory_pool().used_bytes()
    for msg in msgs * 3:
        engine.submit(msg, slots[0])
        engine.submit(msg, slots[1])
        engine.submit_match(slots[0], slots[1])
        engine.synchronize()
    assert [(s.keypoints.data.ptr, s.descriptors.data.ptr, s.staging.ptr)
            for s in slots] == pointers
    assert list(engine._workspaces.values())[:len(workspaces)] == workspaces
    assert cupy.get_default_memory_pool().used_bytes() == used


# -- sizes, empty frames, typed errors, settings --------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize('size', [(32, 32), (33, 47), (1536, 2048)],
                         ids=lambda s: f'{s[1]}x{s[0]}')
def test_gpu_vs_cpu_pipeline_sizes(engine, cpu_pipeline, shared_dir, size):
    import cv2
    pixels, _ = read_image(shared_dir / 'data' / GOLDEN_IMAGES['oxford_graf_img1'])
    height, width = size
    pixels = np.ascontiguousarray(cv2.resize(pixels, (width, height),
                                             interpolation=cv2.INTER_AREA))
    got = single(engine, raw_image(pixels, 'rgb8'))
    want = cpu_pipeline.extract((pixels.astype(np.float32) / np.float32(255)).mean(
        axis=2, dtype=np.float32))
    assert got.image_hw == want.image_hw == size
    if len(want) == 0:
        assert len(got) == 0
        return
    p = parity({'keypoints': want.keypoints, 'scores': want.scores,
                'descriptors': want.descriptors}, got.keypoints, got.scores, got.descriptors)
    REPORT[f'cpu_vs_gpu_{width}x{height}'] = {'found': p.found, 'min_cosine': p.min_cosine,
                                              'max_score_rel': p.max_score_rel,
                                              'n_gpu': len(got), 'n_cpu': len(want)}
    missed = round((1.0 - p.found) * len(want))
    assert p.found >= FOUND_MIN or missed <= 1, f'{missed} CPU keypoints not found'
    assert p.min_cosine >= COSINE_MIN and p.max_score_rel <= SCORE_REL_MAX


@pytest.mark.gpu
def test_zero_keypoints_and_empty_matches(engine, shared_dir):
    textured = golden_msg(shared_dir, 'rgb_1311868169.163498')
    slots = [engine.alloc_slot() for _ in range(3)]
    engine.configure(threshold=1.0)  # heatmap values are <= 1: nothing survives
    try:
        engine.submit(textured, slots[0])
        engine.submit(textured, slots[1])
        engine.submit_match(slots[0], slots[1])
    finally:
        engine.configure(threshold=0.05)
    engine.submit(textured, slots[2])
    engine.submit_match(slots[1], slots[2])
    engine.synchronize()
    f = engine.features(slots[0])
    assert len(f) == 0
    assert f.keypoints.shape == (0, 2) and f.scores.shape == (0,)
    assert f.descriptors.shape == (0, 64) and f.descriptors.dtype == np.float32
    for slot in slots[1:]:
        m = engine.matches(slot)
        assert len(m) == 0 and m.idx0.shape == (0,) and m.idx0.dtype == np.int64
    assert len(engine.features(slots[2])) > 100


@pytest.mark.gpu
def test_typed_errors_enqueue_nothing(engine):
    slot = engine.alloc_slot()
    good = raw_image(np.zeros((64, 64, 3), np.uint8), 'rgb8')
    with pytest.raises(UnsupportedEncodingError):
        engine.submit(SimpleNamespace(**{**vars(good), 'encoding': '32FC1'}), slot)
    with pytest.raises(ImageLayoutError):
        engine.submit(SimpleNamespace(**{**vars(good), 'step': 10}), slot)
    with pytest.raises(ImageLayoutError):
        engine.submit(SimpleNamespace(**{**vars(good), 'data': good.data[:-1]}), slot)
    with pytest.raises(ImageTooSmallError):
        engine.submit(raw_image(np.zeros((31, 64, 1), np.uint8), 'mono8'), slot)
    assert not slot.submitted and engine.features(slot) is None


@pytest.mark.gpu
def test_top_k_change_reallocates_slot_and_keeps_prefix(engine, shared_dir):
    msg = golden_msg(shared_dir, 'oxford_graf_img1')
    full = single(engine, msg)
    try:
        engine.configure(top_k=100)
        small = single(engine, msg)
        engine.configure(top_k=8000)
        slot = engine.alloc_slot()
        engine.configure(top_k=9000)
        engine.submit(msg, slot)  # the slot grows to the new capacity
        engine.synchronize()
        large = engine.features(slot)
    finally:
        engine.configure(top_k=4096)
    assert len(small) == 100
    np.testing.assert_array_equal(small.keypoints, full.keypoints[:100])
    assert slot.capacity == 9000 and len(large) >= len(full)
    np.testing.assert_array_equal(large.keypoints[:len(full)], full.keypoints)


@pytest.mark.gpu
def test_backend_selection_on_this_machine(weights_npz):
    from xfeat_ros.features.gpu.factory import create_gpu_engine
    engine = create_gpu_engine('auto', str(weights_npz), 0, 512, 0.05, 0.82)
    try:
        import tensorrt  # noqa: F401
        has_trt = True
    except ImportError:
        has_trt = False
    assert engine.name == ('tensorrt' if has_trt else 'pytorch')
    assert engine.device == 'cuda:0'
    if not has_trt:
        with pytest.raises(BackendError, match='TensorRT'):
            create_gpu_engine('tensorrt', str(weights_npz), 0)
    with pytest.raises(BackendError, match='no CUDA device 99'):
        create_gpu_engine('pytorch', str(weights_npz), 99)


@pytest.mark.gpu
def test_fresh_grey_read_matches_cpu(engine, cpu_pipeline, shared_dir):
    """The GPU decode of a golden image sees the same grey image as the CPU reader."""
    stem = 'rgb_1311868169.263274'
    got = single(engine, golden_msg(shared_dir, stem))
    want = cpu_pipeline.extract(read_grey(shared_dir / 'data' / GOLDEN_IMAGES[stem]))
    p = parity({'keypoints': want.keypoints, 'scores': want.scores,
                'descriptors': want.descriptors}, got.keypoints, got.scores, got.descriptors)
    REPORT['cpu_vs_gpu_' + stem] = {'found': p.found, 'min_cosine': p.min_cosine,
                                    'max_score_rel': p.max_score_rel}
    assert p.found >= 0.995 and p.min_cosine >= 0.9999 and p.max_score_rel <= SCORE_REL_MAX


# -- host-only (CI) -------------------------------------------------------------------------------

def test_bind_by_shape_assigns_roles_and_guards():
    shapes = expected_output_shapes(480, 640)
    tensors = [('x', True, (1, 1, 480, 640), True),
               ('out_a', False, shapes['reliability'], True),
               ('out_b', False, shapes['feats'], True),
               ('out_c', False, shapes['keypoint_logits'], True)]
    name, roles = bind_by_shape(tensors, 480, 640)
    assert name == 'x'
    assert roles == {'feats': 'out_b', 'keypoint_logits': 'out_c', 'reliability': 'out_a'}
    dynamic = [tensors[0], ('out_a', False, (1, 1, -1, 80), True)] + tensors[2:]
    with pytest.raises(BackendError, match='non-positive'):
        bind_by_shape(dynamic, 480, 640)
    with pytest.raises(BackendError, match='lacks outputs'):
        bind_by_shape(tensors[:3], 480, 640)
    with pytest.raises(BackendError, match='two engine outputs'):
        bind_by_shape(tensors + [('dup', False, shapes['feats'], True)], 480, 640)
    with pytest.raises(BackendError, match='not float32'):
        bind_by_shape(tensors[:3] + [('out_c', False, shapes['keypoint_logits'], False)],
                      480, 640)
    with pytest.raises(BackendError, match='unexpected shape'):
        bind_by_shape(tensors + [('odd', False, (1, 3, 60, 80), True)], 480, 640)


def test_unknown_backend_is_a_typed_error():
    from xfeat_ros.features.gpu.factory import create_gpu_engine, select_backend
    with pytest.raises(BackendError, match='unknown GPU backend'):
        select_backend('cuda_magic', {}, 0)
    with pytest.raises(BackendError):
        create_gpu_engine('cuda_magic', '', 0)


def test_message_bytes_accepts_ros_buffers():
    import array
    for data in (b'\x01\x02', bytearray(b'\x01\x02'), array.array('B', [1, 2]),
                 memoryview(b'\x01\x02'), [1, 2]):
        np.testing.assert_array_equal(message_bytes(data), [1, 2])
    assert set(ENCODINGS) == {'mono8', 'mono16', 'rgb8', 'bgr8', 'rgba8', 'bgra8'}
