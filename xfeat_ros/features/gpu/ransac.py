# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The track epipolar check on the device: RANSAC fundamental matrix, all hypotheses at once.

:class:`EpipolarRansac` enqueues ``kernels/ransac.cu`` and
``kernels/ransac_refine.cu`` (the algorithm of
:mod:`xfeat_ros.features.ransac`, its host reference) on a stream: seeded 7-point
hypotheses solved in parallel, every model scored against every match, the
best refined. Nothing synchronizes and no count travels to the host: the
match count is read on the device, so the launches can sit inside the
engine's CUDA graph right after the matcher::

    check = EpipolarRansac()                         # once per engine
    out = alloc_epipolar_output(capacity)            # once per slot
    check.enqueue_matches(prev.keypoints, slot.keypoints, slot.matches, out, stream)
    ...                                              # after the group's sync:
    verified = out.mask[:m].get().view(bool)         # m = the host match count

:meth:`EpipolarRansac.fit` runs the check on host points (one sync), for
tests, tools and stereo.
"""

from dataclasses import dataclass

import numpy as np

from xfeat_ros.errors import DescriptorLayoutError
from xfeat_ros.features import ransac
from xfeat_ros.features.gpu import kernels, ops
from xfeat_ros.features.ransac import EpipolarFit


@dataclass
class EpipolarOutput:
    """
    Device results of one check.

    ``mask`` uint8 [capacity] (1: the match is an inlier; 0 past the count),
    ``inliers`` int32 [1], ``fundamental`` float64 [9] row-major (NaN when
    nothing is verified).
    """

    mask: object
    inliers: object
    fundamental: object

    @property
    def capacity(self):
        """Most matches the output holds."""
        return int(self.mask.shape[0])


def alloc_epipolar_output(capacity):
    """Device :class:`EpipolarOutput` for up to ``capacity`` matches."""
    cp = ops._cupy()
    return EpipolarOutput(cp.zeros(max(int(capacity), 0), dtype=cp.uint8),
                          cp.zeros(1, dtype=cp.int32), cp.full(9, np.nan, dtype=cp.float64))


def _check_points(points, label):
    if (getattr(points, 'dtype', None) != np.float32 or points.ndim != 2
            or points.shape[1] != 2 or not points.flags.c_contiguous):
        raise DescriptorLayoutError(f'{label}: keypoints must be a C-contiguous float32 [N, 2] '
                                    f'device array, got {getattr(points, "dtype", None)} '
                                    f'{getattr(points, "shape", None)}')


def _check_index(index, bound, label):
    if index is None:
        return np.uint64(0)
    if (getattr(index, 'dtype', None) != np.int32 or index.ndim != 1
            or not index.flags.c_contiguous or index.shape[0] < bound):
        raise DescriptorLayoutError(f'{label}: match indices must be a C-contiguous int32 '
                                    f'device array of at least {bound} entries')
    return index


def refine_shared_bytes(bound):
    """Dynamic shared memory of ``ransac_refine`` for ``bound`` matches (0: not gathered)."""
    return 16 * int(bound) if 0 < bound <= kernels.RANSAC_REFINE_SHARED_POINTS else 0


class EpipolarRansac:
    """
    Device RANSAC fundamental-matrix check of matches (one stream, no sync).

    ``threshold_px`` is the largest point-to-epipolar-line distance of an
    inlier in either image; ``samples`` 7-point hypotheses from ``seed``. The
    scratch (models, scores) is owned by the check and reused in stream
    order, so one check serves one stream.
    """

    def __init__(self, threshold_px=3.0, samples=ransac.SAMPLES, seed=ransac.SEED):
        """Compile (once per device) and allocate the hypothesis scratch."""
        if not samples > 0:
            raise ValueError(f'samples must be positive, got {samples}')
        cp = ops._cupy()
        self.threshold_px = float(threshold_px)
        self.samples = int(samples)
        self.seed = int(seed)
        self.num_models = self.samples * ransac.MODELS_PER_SAMPLE
        self.models = cp.empty(self.num_models * 9, dtype=cp.float32)
        self.scores = cp.empty(self.num_models, dtype=cp.int32)
        device = ops._device_id()
        self._functions = [ops.function(kernels.ransac_module(device), 'ransac_hypotheses'),
                           ops.function(kernels.ransac_module(device), 'ransac_score'),
                           ops.function(kernels.refine_module(device), 'ransac_refine')]
        # the refinement gathers up to RANSAC_REFINE_SHARED_POINTS matches in shared memory
        self._functions[2].max_dynamic_shared_size_bytes = refine_shared_bytes(
            kernels.RANSAC_REFINE_SHARED_POINTS)
        self._host_out = None

    def enqueue(self, keypoints0, keypoints1, count, out, stream, idx0=None, idx1=None):
        """
        Enqueue the check of matches ``keypoints0[idx0[i]] -> keypoints1[idx1[i]]``.

        ``keypoints0``/``keypoints1`` float32 [N, 2] device pixels; ``idx0``/``idx1``
        int32 device indices (None: the i-th points match); ``count`` an int or
        :class:`xfeat_ros.features.gpu.ops.DeviceCount` of matches; results into ``out``
        (:class:`EpipolarOutput`, capacity >= the count's bound). Raises
        :class:`DescriptorLayoutError` before anything is enqueued.
        """
        for _, launch in self.stages(keypoints0, keypoints1, count, out, stream, idx0, idx1):
            launch()

    def stages(self, keypoints0, keypoints1, count, out, stream, idx0=None, idx1=None):
        """
        Return the launches of :meth:`enqueue` as ``[(name, enqueue_fn)]``, checked, not yet run.

        Names: ``hypotheses``, ``score``, ``refine`` (one ``clear`` when the
        bound is zero); for per-stage timing.
        """
        _check_points(keypoints0, 'side 0')
        _check_points(keypoints1, 'side 1')
        count_ptr, bound = ops.count_args(count)
        bound = int(bound)
        if bound < 0:
            raise DescriptorLayoutError(f'negative match count {bound}')
        if bound > out.capacity:
            raise DescriptorLayoutError(
                f'up to {bound} matches to check, the output holds {out.capacity}')
        i0 = _check_index(idx0, bound, 'side 0')
        i1 = _check_index(idx1, bound, 'side 1')
        if idx0 is None and keypoints0.shape[0] < bound or (
                idx1 is None and keypoints1.shape[0] < bound):
            raise DescriptorLayoutError(f'{bound} matches need {bound} keypoints a side')
        if bound == 0:
            return [('clear', lambda: ops.memset_async(out.inliers, 0, stream))]
        hypotheses, score, refine = self._functions
        common = (keypoints0, i0, keypoints1, i1, count_ptr, np.int32(bound))
        threshold = np.float32(self.threshold_px)

        def launch(kernel, grid, block, args, shared=0):
            with stream:
                kernel(grid, block, common + args, shared_mem=shared)

        def count_hits():
            ops.memset_async(self.scores, 0, stream)  # the blocks add their counts
            launch(score, (ops.blocks(self.num_models, kernels.RANSAC_SCORE_MODELS),
                           kernels.RANSAC_SCORE_SPLITS), (kernels.RANSAC_SCORE_THREADS,),
                   (self.models, np.int32(self.num_models), threshold * threshold, self.scores))

        shared = refine_shared_bytes(bound)

        return [
            ('hypotheses', lambda: launch(
                hypotheses, (ops.blocks(self.samples, kernels.RANSAC_HYPOTHESIS_THREADS),),
                (kernels.RANSAC_HYPOTHESIS_THREADS,),
                (np.uint64(self.seed), np.int32(self.samples), self.models))),
            ('score', count_hits),
            ('refine', lambda: launch(
                refine, (1,), (kernels.RANSAC_REFINE_THREADS,),
                (self.models, self.scores, np.int32(self.num_models),
                 np.float64(self.threshold_px), np.int32(shared > 0), out.mask, out.inliers,
                 out.fundamental), shared)),
        ]

    def enqueue_matches(self, keypoints0, keypoints1, matches, out, stream):
        """:meth:`enqueue` for a :class:`~.matching.MatchOutput` (its count on the device)."""
        self.enqueue(keypoints0, keypoints1, ops.DeviceCount(matches.count, matches.capacity),
                     out, stream, matches.idx0, matches.idx1)

    def fit(self, points0, points1, stream=None):
        """
        Check host matches ``points0 -> points1`` (float [M, 2] pixels) now.

        Uploads, enqueues and synchronizes once; returns an
        :class:`xfeat_ros.features.ransac.EpipolarFit` (fewer than 8 matches: nothing kept).
        """
        cp = ops._cupy()
        p0 = np.ascontiguousarray(points0, np.float32).reshape(-1, 2)
        p1 = np.ascontiguousarray(points1, np.float32).reshape(-1, 2)
        if len(p0) != len(p1):
            raise DescriptorLayoutError(f'{len(p0)} points on side 0, {len(p1)} on side 1')
        count = len(p0)
        stream = stream if stream is not None else cp.cuda.get_current_stream()
        if self._host_out is None or self._host_out.capacity < count:
            self._host_out = alloc_epipolar_output(max(count, 1))
        out = self._host_out
        with stream:
            d0 = cp.asarray(p0) if count else cp.zeros((0, 2), cp.float32)
            d1 = cp.asarray(p1) if count else cp.zeros((0, 2), cp.float32)
        self.enqueue(d0, d1, count, out, stream)
        stream.synchronize()
        kept = int(out.inliers.get()[0]) if count else 0
        if kept == 0:
            return ransac.empty_fit(count)
        return EpipolarFit(out.mask[:count].get().astype(bool), kept,
                           out.fundamental.get().reshape(3, 3))
