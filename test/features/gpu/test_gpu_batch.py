# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The batched GPU paths against the CPU path.

* batched kernels (decode, heatmap, NMS, top-K, descriptors over B frames in
  one launch, results through a frame table) against the NumPy oracle, frame
  by frame, with the tolerances of test_gpu_kernels.py;
* the engine with frames batched per model size (lazy flush, submit_group,
  results) against golden files, single frames and the CPU path.

The tensor-core matcher is tested in test_gpu_match.py, the backbone's
options and kernels in test_gpu_backbone.py.

GPU tests carry ``@pytest.mark.gpu`` and are skipped (with the reason)
where CuPy or a CUDA device is missing. Host-only tests at the end (frame
table layout, batch sizes, the batched ONNX graph) run on CI too.
"""

from types import SimpleNamespace
import warnings
import zlib

from golden_util import GOLDEN_IMAGES, GOLDEN_PAIRS, match_agreement, parity
import numpy as np
import pytest
from test_gpu_engine import flight_messages, golden_msg, single
from test_gpu_kernels import DESC_ATOL, poison, random_image, random_maps, RESIZE_ATOL
from xfeat_ros.features.gpu import kernels, ops
from xfeat_ros.features.image_codec import decode_image, ENCODINGS, raw_image
from xfeat_ros.features.match import mutual_nn_match
from xfeat_ros.features.postprocess import (heatmap_from_logits, keypoint_scores, l2_normalize,
                                            nms_keypoints, sample_descriptors, top_k_keypoints)
from xfeat_ros.features.preprocess import model_size, to_model_space
from xfeat_ros.tools.image_files import read_image


# batched vs single frames: different cuDNN algorithms per batch size round differently
SAME_FOUND_MIN = 0.995
SAME_COSINE_MIN = 0.9999
SCORE_REL_MAX = 1e-4


@pytest.fixture(scope='module')
def engine(weights_npz):
    """Build one batched GPU engine, module-scoped so that graphs are captured once."""
    from xfeat_ros.features.gpu.factory import create_gpu_engine
    return create_gpu_engine('pytorch', str(weights_npz), 0, 4096, 0.05, 0.82)


# -- batched kernels ---------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize('encoding', ['rgb8', 'mono16', 'bgra8'])
def test_batched_decode_equals_oracle(cp, stream, encoding):
    rng = np.random.default_rng(zlib.crc32(encoding.encode()))
    height, width, frames = 481, 643, 3
    images = [random_image(rng, encoding, height, width, pad=5) for _ in range(frames)]
    step = images[0][1]
    stride = 256 * (-(-step * height // 256))
    raw = np.zeros(frames * stride, np.uint8)
    for f, (data, _) in enumerate(images):
        raw[f * stride:f * stride + len(data)] = np.frombuffer(data, np.uint8)
    mh, mw = model_size(height, width)
    out = poison(cp, (frames + 1, 1, mh, mw), np.float32)
    ops.decode_frames(cp.asarray(raw), stride, ENCODINGS[encoding], height, width, step,
                      False, out, stream, frames)
    stream.synchronize()
    got = out.get()
    for f, (data, _) in enumerate(images):
        want, _ = to_model_space(decode_image(data, encoding, height, width, step))
        np.testing.assert_allclose(got[f, 0], want, rtol=0, atol=RESIZE_ATOL)
    assert np.all(np.isnan(got[frames])), 'a frame past the batch was written'


def oracle_frame(heat, reliability, feats, k, mw, scale):
    """CPU top-K keypoints (scaled), positions, scores and descriptors of one frame."""
    kps = nms_keypoints(heat, 0.05)
    kp, scores = top_k_keypoints(kps, keypoint_scores(heat, reliability, kps), k)
    desc = sample_descriptors(l2_normalize(feats, axis=0), kp, heat.shape)
    return (kp.astype(np.float32) * np.array(scale, np.float32), kp[:, 1] * mw + kp[:, 0],
            scores, desc)


@pytest.mark.gpu
@pytest.mark.parametrize('k', [7, 4096])
def test_batched_detection_equals_oracle_per_frame(cp, stream, k):
    """Three frames (one with nothing above the threshold) in one launch per step."""
    rng = np.random.default_rng(k)
    mh, mw, frames = 480, 640, 3
    h, w = mh // 8, mw // 8
    maps = [random_maps(rng, mh, mw) for _ in range(frames)]
    heats = [heatmap_from_logits(logits) for logits, _ in maps]
    heats[1] = np.full((mh, mw), 0.01, np.float32)  # an empty frame
    reliability = np.stack([rel for _, rel in maps])[:, None]
    feats = rng.standard_normal((frames, 64, h, w)).astype(np.float32)
    bufs = ops.alloc_detect_buffers(mh, mw, k, frames + 1)
    bufs.heatmap[:frames] = cp.asarray(np.stack(heats))
    scales = [(1.0, 1.0), (1.25, 0.75), (0.5, 2.0)]
    outs = [(poison(cp, 1, np.int32), poison(cp, (k, 2), np.float32),
             poison(cp, k, np.float32), poison(cp, (k, 64), np.float32))
            for _ in range(frames)]
    table = cp.asarray(ops.frame_table_rows([out + scale for out, scale in zip(outs, scales)]))
    feats_hwc = poison(cp, (frames + 1, h, w, 64), np.float32)
    ops.nms_score(cp.asarray(reliability), 0.05, bufs, stream, frames)
    ops.select_top_k(bufs, k, mw, table, stream, frames)
    ops.normalize_feats(cp.asarray(feats), feats_hwc, stream, frames)
    ops.describe_frames(feats_hwc, (mh, mw), bufs.positions, table, k, stream, frames)
    stream.synchronize()
    counts = bufs.counts.get()
    for f in range(frames):
        want_kp, want_pos, want_scores, want_desc = oracle_frame(
            heats[f], reliability[f, 0], feats[f], k, mw, scales[f])
        count, kp, scores, desc = outs[f]
        n = int(count.get()[0])
        assert n == counts[f] == len(want_kp), f'frame {f}'
        np.testing.assert_array_equal(bufs.positions[f, :n].get(), want_pos)
        np.testing.assert_array_equal(scores[:n].get(), want_scores)
        np.testing.assert_array_equal(kp[:n].get(), want_kp)
        np.testing.assert_allclose(desc[:n].get(), want_desc, rtol=0, atol=DESC_ATOL)
        assert np.all(np.isnan(desc[n:].get())), 'rows past the count must stay untouched'
    assert counts[1] == 0 and counts[0] > 0 and counts[2] > 0


@pytest.mark.gpu
def test_batched_heatmap_equals_oracle(cp, stream):
    rng = np.random.default_rng(3)
    logits = np.stack([random_maps(rng, 96, 128)[0] for _ in range(3)])
    out = poison(cp, (3, 96, 128), np.float32)
    ops.heatmap(cp.asarray(logits), out, stream)
    stream.synchronize()
    for f in range(3):
        np.testing.assert_allclose(out[f].get(), heatmap_from_logits(logits[f]), rtol=1e-5,
                                   atol=1e-9)


# -- the engine with batches -------------------------------------------------------------------

def features_close(got, want, found_min=SAME_FOUND_MIN, cosine_min=SAME_COSINE_MIN):
    """Assert two Features agree as the parity metrics measure it."""
    assert got.image_hw == want.image_hw
    p = parity({'keypoints': want.keypoints, 'scores': want.scores,
                'descriptors': want.descriptors}, got.keypoints, got.scores, got.descriptors)
    assert p.found >= found_min, f'only {p.found:.4f} found'
    assert p.min_cosine >= cosine_min and p.max_score_rel <= SCORE_REL_MAX, p
    assert abs(len(got) - len(want)) <= max(2, 0.005 * len(want))
    assert np.all(np.diff(got.scores) <= 0)


@pytest.mark.gpu
def test_batched_frames_agree_with_single_frames_and_cpu(engine, cpu_pipeline, shared_dir):
    """
    Eight frames of mixed encodings and sizes in flight, six of model size 480x640.

    Those six are one batch: its workspace grows 1 -> 2 -> 4 -> 8 and its raw
    rows grow (larger encodings) while frames wait; one has another original
    size, so another scale; the others have their own sizes.
    """
    msgs = flight_messages(shared_dir)
    alone = [single(engine, msg) for msg in msgs]
    slots = [engine.alloc_slot() for _ in msgs]
    for msg, slot in zip(msgs, slots):
        engine.submit(msg, slot)
    assert all(slot.pending for slot in slots)  # nothing flushed yet: one batch per size
    for prev, slot in zip(slots, slots[1:4]):
        engine.submit_match(prev, slot)
    engine.synchronize()
    assert engine._workspaces[(480, 640)].frames == 8
    got = [engine.features(slot) for slot in slots]
    for f, (g, want) in enumerate(zip(got, alone)):
        assert len(want) > 100, f'frame {f}'
        features_close(g, want)
    # against the CPU pipeline on the same bytes (the first frame: rgb8 TUM)
    pixels = np.frombuffer(msgs[0].data, np.uint8).reshape(msgs[0].height, msgs[0].width, 3)
    cpu = cpu_pipeline.extract((pixels.astype(np.float32) / np.float32(255)).mean(
        axis=2, dtype=np.float32))
    features_close(got[0], cpu, found_min=0.99, cosine_min=0.999)
    for prev, slot, g_prev, g in zip(slots, slots[1:4], got, got[1:4]):
        m = engine.matches(slot)
        idx0, idx1, _ = mutual_nn_match(g_prev.descriptors, g.descriptors, 0.82)
        assert set(zip(m.idx0.tolist(), m.idx1.tolist())) == set(zip(idx0.tolist(),
                                                                     idx1.tolist()))
        assert len(m) > 50


@pytest.mark.gpu
def test_batched_golden_parity(engine, shared_dir):
    """All nine golden images submitted as one group: parity and matches as upstream's."""
    from golden_util import load_golden
    golden = load_golden(shared_dir)
    stems = list(GOLDEN_IMAGES)
    slots = [engine.alloc_slot() for _ in stems]
    engine.submit_group([golden_msg(shared_dir, s) for s in stems], slots, chain=True)
    results = engine.results(slots)
    assert results[0][1] is None  # the first frame has no previous one
    mapping = {}
    for stem, (f, _) in zip(stems, results):
        p = parity(golden[stem], f.keypoints, f.scores, f.descriptors)
        assert p.found >= 0.99 and p.min_cosine >= 0.999 and p.max_score_rel <= 1e-4, (stem, p)
        mapping[stem] = p.mapping
    for (a, b), (_, m) in zip(GOLDEN_PAIRS, results[1:]):
        agree = match_agreement(golden[(a, b)], mapping[a], mapping[b], m.idx0, m.idx1, '082')
        assert agree >= 0.98, f'{a}->{b}: {agree:.4f}'


@pytest.mark.gpu
def test_submit_group_equals_submit_and_results_equal_features(engine, shared_dir):
    msgs = flight_messages(shared_dir)[:4]
    a = [engine.alloc_slot() for _ in msgs]
    b = [engine.alloc_slot() for _ in msgs]
    previous = engine.alloc_slot()
    engine.submit(msgs[-1], previous)
    engine.synchronize()
    engine.submit_group(msgs, a, previous=previous, chain=True)
    for i, (msg, slot) in enumerate(zip(msgs, b)):
        engine.submit(msg, slot)
        engine.submit_match(previous if i == 0 else b[i - 1], slot)
    engine.synchronize()
    bulk = engine.results(a)
    for (fa, ma), slot in zip(bulk, b):
        fb, mb = engine.features(slot), engine.matches(slot)
        for name in ('keypoints', 'scores', 'descriptors'):
            np.testing.assert_array_equal(getattr(fa, name), getattr(fb, name))
        for name in ('idx0', 'idx1', 'similarity'):
            np.testing.assert_array_equal(getattr(ma, name), getattr(mb, name))
        assert ma.idx0.dtype == np.int64 and fa.descriptors.dtype == np.float32
    assert engine.results([engine.alloc_slot()]) == [(None, None)]
    with pytest.raises(ValueError):
        engine.submit_group(msgs[:2], [a[0], a[0]])


@pytest.mark.gpu
def test_epipolar_checks_on_side_streams_equal_one_check_each(engine, shared_dir):
    """
    Ten chained TUM frames in one group: ten matches, so more than EPIPOLAR_BRANCHES checks.

    The checks run on the side streams of the match graph (captured on the
    first group, replayed on the second); each slot's mask must equal the
    check of the same matched points on its own (EpipolarRansac.fit). With
    ``epipolar`` off the matches stay and ``verified`` is None.
    """
    from xfeat_ros.features.gpu.pair_graph import EPIPOLAR_BRANCHES
    from xfeat_ros.features.gpu.ransac import EpipolarRansac
    from xfeat_ros.features.geometry import EPIPOLAR_THRESHOLD_PX
    paths = sorted((shared_dir / 'data' / 'tum_fr2_desk' / 'rgb').glob('*.png'))[:10]
    msgs = [raw_image(read_image(path)[0], 'rgb8') for path in paths]
    assert len(msgs) == 10 > EPIPOLAR_BRANCHES
    alone = EpipolarRansac(EPIPOLAR_THRESHOLD_PX)
    previous = engine.alloc_slot()
    engine.submit(msgs[-1], previous)
    slots = [engine.alloc_slot() for _ in msgs]
    for _ in range(2):  # capture, then replay
        engine.submit_group(msgs, slots, previous=previous, chain=True)
        results = engine.results([previous] + slots)
        for (before, _), (features, match) in zip(results, results[1:]):
            assert len(match) > 100 and match.verified.dtype == bool
            want = alone.fit(before.keypoints[match.idx0], features.keypoints[match.idx1])
            np.testing.assert_array_equal(match.verified, want.mask)
            assert want.count > 0.5 * len(match)
    engine.epipolar = False  # no check: the same matches, no verdict
    try:
        engine.submit_group(msgs, slots, previous=previous, chain=True)
        unchecked = engine.results([previous] + slots)
    finally:
        engine.epipolar = True
    for (_, checked), (_, plain) in zip(results[1:], unchecked[1:]):
        assert plain.verified is None
        np.testing.assert_array_equal(plain.idx0, checked.idx0)
        np.testing.assert_array_equal(plain.idx1, checked.idx1)


@pytest.mark.gpu
def test_results_of_slots_at_work_are_cut_to_their_counts(engine, shared_dir):
    """
    Copy whole capacities and cut them to the counts: same as counted rows.

    The first is the path of a slot still at work, the second of one whose work
    has passed: a real frame, a flat one (no keypoints) and a real one matched
    to it.
    """
    from xfeat_ros.features.gpu import results as host_results
    real = golden_msg(shared_dir, 'rgb_1311868169.163498')
    flat = raw_image(np.full((480, 640, 3), 90, np.uint8), 'rgb8')
    slots = [engine.alloc_slot() for _ in range(3)]
    engine.submit_group([real, flat, real], slots, chain=True)
    grouped = engine.results(slots)  # right after the group: usually the eager path
    kinds = (host_results.FEATURES, host_results.MATCHES)
    for i, slot in enumerate(slots):
        wanted = kinds if i else kinds[:1]
        requests = host_results.result_parts(slot, wanted, finished=False)
        assert requests[0][2][0][1] == slot.capacity  # every row
        event, views = host_results.copy_to_host(requests, engine.stream)
        event.synchronize()
        whole = [host_results.assemble(kind, slot, arrays)
                 for (kind, _, _), arrays in zip(requests, views)]
        counted = engine.features(slot), engine.matches(slot)
        for got in (whole, grouped[i]):
            for name in ('keypoints', 'scores', 'descriptors'):
                np.testing.assert_array_equal(getattr(got[0], name), getattr(counted[0], name))
            if i:
                np.testing.assert_array_equal(got[1].idx0, counted[1].idx0)
                np.testing.assert_array_equal(got[1].similarity, counted[1].similarity)
        if i == 1:  # the flat frame: no keypoints, correctly shaped empty arrays
            assert len(whole[0]) == 0 and whole[0].descriptors.shape == (0, 64)
    assert len(grouped[1][0]) == 0 and len(grouped[0][0]) > 1000 and len(grouped[2][1]) == 0


@pytest.mark.gpu
def test_max_batch_caps_a_batch(engine, shared_dir):
    """``max_batch=2``: five frames of one size go through three backbone calls, same results."""
    from xfeat_ros.features.gpu.engine import GpuEngine
    capped = GpuEngine(engine.backbone, 0, 4096, 0.05, 0.82, max_batch=2)
    msgs = [m for m in flight_messages(shared_dir) if (m.height, m.width) == (480, 640)][:5]
    slots = [capped.alloc_slot() for _ in msgs]
    for i, (msg, slot) in enumerate(zip(msgs, slots)):
        capped.submit(msg, slot)
        assert sum(s.pending for s in slots) == 1 + i % 2
    capped.synchronize()
    assert capped._workspaces[(480, 640)].frames == 2
    for msg, slot in zip(msgs, slots):
        features_close(capped.features(slot), single(engine, msg))


@pytest.mark.gpu
def test_expected_groups_bind_every_batch_size_at_the_first_frame(engine, shared_dir):
    """expect_groups(3): the first frame readies sizes 1-3; later groups bind nothing new."""
    from xfeat_ros.features.gpu.engine import GpuEngine
    ready = GpuEngine(engine.backbone, 0, 4096, 0.05, 0.82)
    ready.expect_groups(3)
    msgs = [m for m in flight_messages(shared_dir) if (m.height, m.width) == (480, 640)][:3]
    bindings = engine.backbone._bindings

    def bound():
        ws = ready._workspaces.get((480, 640))
        ptr = -1 if ws is None else int(ws.image.data.ptr)
        return sorted(key[2][0] for key in bindings if key[0] == ptr)
    assert bound() == []
    slots = [ready.alloc_slot() for _ in range(6)]
    ready.submit(msgs[0], slots[0])
    ready.synchronize()
    assert ready._workspaces[(480, 640)].frames >= 3
    assert bound() == [1, 2, 3]
    first = set(bindings)
    ready.submit_group(msgs[:2], slots[1:3])
    ready.submit_group(msgs, slots[3:6])
    ready.synchronize()
    assert set(bindings) == first   # no binding (no warm-up, no capture) after the first frame
    for msg, slot in zip([msgs[0]] + msgs[:2] + msgs, slots):
        features_close(ready.features(slot), single(engine, msg))


@pytest.mark.gpu
def test_typed_error_in_a_group_enqueues_nothing(engine, shared_dir):
    from xfeat_ros.errors import ImageLayoutError
    good = golden_msg(shared_dir, 'rgb_1311868169.163498')
    bad = SimpleNamespace(**{**vars(good), 'step': 10})
    slots = [engine.alloc_slot() for _ in range(2)]
    with pytest.raises(ImageLayoutError):
        engine.submit_group([good, bad], slots)
    assert not any(s.submitted for s in slots)
    assert engine.results(slots) == [(None, None), (None, None)]


@pytest.mark.gpu
def test_resubmitting_a_waiting_slot_flushes_it_first(engine, shared_dir):
    msgs = flight_messages(shared_dir)
    slot = engine.alloc_slot()
    engine.submit(msgs[0], slot)
    first_pending = slot.pending
    engine.submit(msgs[5], slot)  # the first frame is flushed, then replaced
    engine.synchronize()
    assert first_pending and not slot.pending
    features_close(engine.features(slot), single(engine, msgs[5]))


@pytest.mark.gpu
def test_match_features_uses_fp32_for_long_descriptors(engine, shared_dir):
    """Descriptors longer than unit length leave the tensor-core bound: FP32 path, same result."""
    from xfeat_ros.features.pipeline import Features
    f = single(engine, golden_msg(shared_dir, 'oxford_graf_img1'))
    g = single(engine, golden_msg(shared_dir, 'oxford_graf_img2'))
    scaled = Features(g.keypoints, g.scores, g.descriptors * np.float32(3.0), g.image_hw)
    got = engine.match_features(f, scaled)
    idx0, idx1, sim = mutual_nn_match(f.descriptors, scaled.descriptors, 0.82)
    assert set(zip(got.idx0.tolist(), got.idx1.tolist())) == set(zip(idx0.tolist(),
                                                                     idx1.tolist()))
    np.testing.assert_allclose(np.sort(got.similarity), np.sort(sim), rtol=1e-5)


# -- host-only (CI) ------------------------------------------------------------------------------

def test_frame_table_layout():
    """Pointers and packed scales land in the words the kernels read."""
    arrays = [SimpleNamespace(data=SimpleNamespace(ptr=p)) for p in (16, 32, 48, 64)]
    rows = ops.frame_table_rows([tuple(arrays) + (1.25, 0.5), (None, None, None, None, 1, 1)])
    col = kernels.FRAME_TABLE.index
    assert rows.shape == (2, kernels.FRAME_FIELDS) and rows.dtype == np.uint64
    assert [int(rows[0, col(n)]) for n in ('count', 'keypoints', 'scores', 'descriptors')] \
        == [16, 32, 48, 64]
    assert np.all(rows[1, :col('scales')] == 0)
    word = int(rows[0, col('scales')])
    pair = np.array([word & 0xFFFFFFFF, word >> 32], np.uint32).view(np.float32)
    assert pair.tolist() == [1.25, 0.5]
    defines = dict(kernels.detect_variant().defines)
    assert defines['FT_FIELDS'] == kernels.FRAME_FIELDS
    assert defines['FT_SCALES'] == col('scales')
    assert dict(kernels.describe_variant().defines)['FT_DESCRIPTORS'] == col('descriptors')


def test_batch_capacity_grows_by_powers_of_two():
    from xfeat_ros.features.gpu.buffers import batch_capacity
    assert [batch_capacity(n, 32) for n in (1, 2, 3, 5, 9, 17, 32)] == [1, 2, 4, 8, 16, 32, 32]
    assert batch_capacity(3, 3) == 3 and batch_capacity(6, 5) == 6


def test_batched_onnx_graph_equals_single_frames(weights):
    """with_batch: the same graph on 3 frames equals 3 single runs (ONNX Runtime, CPU)."""
    import onnxruntime as ort
    from xfeat_ros.features.gpu.backbone_onnx import with_batch
    from xfeat_ros.features.network_onnx import build_model, INPUT_NAME
    rng = np.random.default_rng(0)
    images = rng.random((3, 1, 64, 96), np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    batched = ort.InferenceSession(with_batch(build_model(weights, 64, 96), 3)
                                   .SerializeToString(), options,
                                   providers=['CPUExecutionProvider'])
    plain = ort.InferenceSession(build_model(weights, 64, 96).SerializeToString(), options,
                                 providers=['CPUExecutionProvider'])
    outs = batched.run(None, {INPUT_NAME: images})
    for f in range(3):
        for got, want in zip(outs, plain.run(None, {INPUT_NAME: images[f:f + 1]})):
            # a batch may take other convolution algorithms: rounding differs by ~1e-6
            np.testing.assert_allclose(got[f:f + 1], want, rtol=0,
                                       atol=2e-5 * np.max(np.abs(want)))


def test_bind_by_shape_with_a_batch():
    from xfeat_ros.errors import BackendError
    from xfeat_ros.features.gpu.backbone import expected_output_shapes
    from xfeat_ros.features.gpu.backbone_onnx import bind_by_shape
    shapes = expected_output_shapes(480, 640, 4)
    tensors = [('x', True, (4, 1, 480, 640), True)] + [
        (role, False, shape, True) for role, shape in shapes.items()]
    name, roles = bind_by_shape(tensors, 480, 640, 4)
    assert name == 'x' and roles['feats'] == 'feats'
    with pytest.raises(BackendError, match='expected'):
        bind_by_shape(tensors, 480, 640, 2)


def test_unused_imports_are_real():
    """The shared helpers imported from the other GPU test modules exist (CI guard)."""
    assert callable(raw_image) and callable(read_image)


@pytest.mark.parametrize('use_torch', [False, True])
@pytest.mark.parametrize('workers', [1, 3])
def test_host_copier_copies_every_piece(workers, use_torch):
    from xfeat_ros.features.gpu.buffers import COPY_PIECE, HostCopier, TORCH_COPY_MIN
    if use_torch:
        pytest.importorskip('torch', reason='PyTorch is not installed here')
    rng = np.random.default_rng(workers)
    sizes = (10, COPY_PIECE * 3 + 17, 0, TORCH_COPY_MIN - 1, TORCH_COPY_MIN)
    sources = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    sources[1] = np.frombuffer(sources[1].tobytes(), np.uint8)  # read-only, as a message's
    targets = [np.zeros(n + 5, np.uint8) for n in sizes]
    copier = HostCopier(workers, use_torch=use_torch)
    assert (copier.torch is not None) == use_torch
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no warning about the read-only source either
        copier.copy([(t[:s.size], s) for t, s in zip(targets, sources)])
    for t, src in zip(targets, sources):
        np.testing.assert_array_equal(t[:src.size], src)
        assert not t[src.size:].any()
