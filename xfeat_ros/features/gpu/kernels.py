# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Load the CUDA kernels of ``kernels/*.cu`` through CuPy (NVRTC at run time).

Every ``.cu`` file has one memoized loader here. A loader prepends a
``#define`` preamble (the macros named in the file's header comment: model
constants and the launch shapes of :data:`LAUNCH_DEFINES`, which the Python
launches use too, so both sides read one value) and
compiles with fixed options, so the source compiled on the GPU is exactly the
source :func:`variants` hands to the NVRTC compile test on CI.

Kernel files are found, in order, in ``$XFEAT_ROS_KERNELS``, the installed
share directory (``share/xfeat_ros/kernels``, through ament_index when it is
importable, else under ``sys.prefix``), and the repository's ``kernels/``.

This module imports CuPy only inside the loaders, so it can be imported (and
its sources compiled by the CI test) on machines without a GPU.
"""

from dataclasses import dataclass, field
import functools
import os
from pathlib import Path
import sys

from xfeat_ros.errors import BackendError
from xfeat_ros.features import ransac, ransac_refine
from xfeat_ros.features.pipeline import DESCRIPTOR_SIZE
from xfeat_ros.features.postprocess import CELL, NMS_RADIUS

PACKAGE = 'xfeat_ros'
ENV_VAR = 'XFEAT_ROS_KERNELS'
MATCH_WIDTHS = (64, 128)
# Entry points of every kernel file (each file's header comment names them too).
ENTRY_POINTS = {
    'preprocess.cu': ('decode_resize',),
    'gate.cu': ('gate_wait',),
    'tracks.cu': ('continue_tracks',),
    'spread.cu': ('spread_ages', 'spread_rank', 'spread_neighbours', 'spread_select'),
    'detect.cu': ('heatmap_softmax', 'nms_score', 'radix_hist', 'radix_select',
                  'gather_selected', 'rank_sorted'),
    'describe.cu': ('normalize_feats', 'describe'),
    'match.cu': ('mnn_best', 'mnn_collect', 'mnn_collect_pairs'),
    'match_tc.cu': ('halve_sides', 'mnn_approx_tc', 'halve_sides_pairs',
                    'mnn_approx_tc_pairs'),
    'match_refine.cu': ('mnn_refine_tc', 'mnn_refine_tc_pairs'),
    'ransac.cu': ('ransac_hypotheses', 'ransac_score'),
    'ransac_refine.cu': ('ransac_refine',),
    'backbone.cu': ('fuse_scales', 'conv3x3_relu_1x4', 'conv3x3_relu_4x8_s2',
                    'conv3x3_relu_8x8', 'conv3x3_relu_8x24_s2', 'conv3x3_relu_24x24',
                    'conv3x3_relu_24x64_s2', 'conv3x3_relu_64x64', 'conv3x3_relu_64x64_s2',
                    'conv3x3_relu_64x128_s2', 'conv3x3_relu_128x128', 'instance_stats',
                    'instance_normalize'),
}
# Device helpers shared by kernel files: file -> the headers the loader puts before it.
HEADERS = {'match.cu': ('mnn.cuh',), 'match_tc.cu': ('mnn.cuh',),
           'match_refine.cu': ('mnn.cuh',),
           'ransac.cu': ('epipolar.cuh',), 'ransac_refine.cu': ('epipolar.cuh',)}
# Frame table: one row of unsigned 64-bit words per frame of a batched launch
# (detect.cu, describe.cu): where that frame's results go and its scale.
FRAME_TABLE = ('count', 'keypoints', 'scores', 'descriptors', 'scales', 'spare')
FRAME_FIELDS = len(FRAME_TABLE)
# Pair table: one row of unsigned 64-bit words per pair of a batched match (the *_pairs
# entry points of match.cu, match_tc.cu and match_refine.cu): both descriptor sets
# (pointer, count pointer or 0, bound), the pair's scratch and its outputs.
PAIR_TABLE = ('d0', 'count0', 'bound0', 'd1', 'count1', 'bound1', 'best_row', 'best_col',
              'row_max', 'col_max', 'tile_first', 'tile_second', 'h0', 'h1', 'idx0', 'idx1',
              'sim', 'match_count', 'capacity', 'spare')
PAIR_FIELDS = len(PAIR_TABLE)
BASE_OPTIONS = ('--std=c++17',)
# Kernels whose floats must round like the NumPy oracle: no contraction to FMA.
EXACT_OPTIONS = BASE_OPTIONS + ('--fmad=false',)
# Launch shapes shared by the Python launches (xfeat_ros.features.gpu.ops, .backbone_kernels,
# .ransac) and the kernels: defined here only and injected into each file's preamble
# (LAUNCH_DEFINES); the .cu files define none of them and check with #error the values
# their thread mappings rely on.
CONV_BLOCK = (32, 8)        # backbone.cu conv3x3_*: CONV_BX x CONV_BY pixels per block
CONV_CO = 8                 # backbone.cu conv3x3_*: output channels per thread
WIDE_CO = 8                 # backbone.cu conv3x3_relu_wide: output channels per block
WIDE_SPLIT = 8              # backbone.cu conv3x3_relu_wide: warps splitting the input channels
INORM_PARTS = 128           # backbone.cu instance_stats: partial sums (blocks) per frame
INORM_THREADS = 256         # backbone.cu instance_stats / instance_normalize: threads per block
INORM_ITEMS = 4             # backbone.cu instance_normalize: values per thread
NMS_BLOCK = (32, 8)         # detect.cu nms_score: NMS_BX x NMS_BY threads per block
RADIX_BITS = 16             # detect.cu: bits of one radix digit of the 64-bit top-K keys
SELECT_THREADS = 1024       # detect.cu radix_select: threads of its one block per frame
RANK_THREADS = 128          # detect.cu rank_sorted: threads per block
RANK_SPLIT = 8              # detect.cu rank_sorted: threads sharing one key's count
RANK_TILE = 2048            # detect.cu rank_sorted: keys per shared-memory tile (16 KiB)
NORM_PIXELS = 32            # describe.cu normalize_feats: pixels per block
NORM_THREADS = 256          # describe.cu normalize_feats: threads per block
MATCH_TILE = 64             # match.cu, match_tc.cu, match_refine.cu: side of a tile (TILE)
MATCH_THREADS = 256         # match.cu mnn_best: threads per tile
COLLECT_THREADS = 1024      # match.cu mnn_collect: threads of its one block
TC_THREADS = 256            # match_tc.cu, match_refine.cu: threads per tile (per entries)
RANSAC_SCORE_THREADS = 128  # ransac.cu ransac_score: threads per block
RANSAC_SCORE_PER_THREAD = 2  # ransac.cu ransac_score: models a thread holds in registers
RANSAC_SCORE_SPLITS = 32    # ransac.cu ransac_score: blocks sharing the matches of a model
RANSAC_SCORE_MODELS = RANSAC_SCORE_THREADS * RANSAC_SCORE_PER_THREAD  # models per block
RANSAC_REFINE_THREADS = 256  # ransac_refine.cu: threads of its one block
RANSAC_REFINE_SHARED_POINTS = 8192  # ransac_refine.cu: most matches in shared memory
RANSAC_HYPOTHESIS_THREADS = 64  # ransac.cu ransac_hypotheses: any block size (not injected)
# The gate of a frame enqueued ahead of its image (gate.cu, xfeat_ros.features.gpu.armed): the
# values of its word of pinned host memory (open and cancelled both let the stream go).
GATE_CLOSED, GATE_OPEN, GATE_CANCELLED = 0, 1, 2
GATE_POLL_NS = 256          # gate.cu gate_wait: sleep between two reads of the word
TRACK_THREADS = 1024        # tracks.cu continue_tracks: threads of its one block
SPREAD_THREADS = 1024       # spread.cu spread_ages / spread_select: threads of the one block
SPREAD_RANK_THREADS = 128   # spread.cu spread_rank: threads per block
SPREAD_RANK_SPLIT = 8       # spread.cu spread_rank: threads sharing one candidate's count
SPREAD_RANK_TILE = 2048     # spread.cu spread_rank: keys per shared-memory tile (16 KiB)
SPREAD_NEIGHBOUR_THREADS = 128  # spread.cu spread_neighbours: threads (ranks) per block
SPREAD_NEIGHBOURS = 32      # spread.cu: earlier neighbours listed per candidate
SPREAD_BUCKETS = 1024       # spread.cu spread_select: hashed buckets of each neighbour list
SPREAD_SCRATCH_PER = 6      # spread.cu spread_select: int32 scratch words per candidate
# spread.cu spread_select: most candidates of a frame (one byte of shared memory each)
SPREAD_MAX_CANDIDATES = 16384
LAUNCH_DEFINES = {
    'preprocess.cu': (),
    'gate.cu': (('GATE_CLOSED', GATE_CLOSED), ('GATE_POLL_NS', GATE_POLL_NS)),
    'tracks.cu': (('TRACK_THREADS', TRACK_THREADS),),
    'spread.cu': (('SPREAD_THREADS', SPREAD_THREADS),
                  ('SPREAD_RANK_THREADS', SPREAD_RANK_THREADS),
                  ('SPREAD_RANK_SPLIT', SPREAD_RANK_SPLIT),
                  ('SPREAD_RANK_TILE', SPREAD_RANK_TILE),
                  ('SPREAD_NEIGHBOUR_THREADS', SPREAD_NEIGHBOUR_THREADS),
                  ('SPREAD_NEIGHBOURS', SPREAD_NEIGHBOURS), ('SPREAD_BUCKETS', SPREAD_BUCKETS),
                  ('SPREAD_SCRATCH_PER', SPREAD_SCRATCH_PER),
                  ('SPREAD_MAX_CANDIDATES', SPREAD_MAX_CANDIDATES)),
    'detect.cu': (('NMS_BX', NMS_BLOCK[0]), ('NMS_BY', NMS_BLOCK[1]), ('RADIX_BITS', RADIX_BITS),
                  ('SELECT_THREADS', SELECT_THREADS), ('RANK_THREADS', RANK_THREADS),
                  ('RANK_SPLIT', RANK_SPLIT), ('RANK_TILE', RANK_TILE)),
    'describe.cu': (('NORM_PIXELS', NORM_PIXELS), ('NORM_THREADS', NORM_THREADS)),
    'match.cu': (('TILE', MATCH_TILE), ('MATCH_THREADS', MATCH_THREADS),
                 ('COLLECT_THREADS', COLLECT_THREADS)),
    'match_tc.cu': (('TILE', MATCH_TILE), ('TC_THREADS', TC_THREADS)),
    'match_refine.cu': (('TILE', MATCH_TILE), ('TC_THREADS', TC_THREADS)),
    'ransac.cu': (('SCORE_THREADS', RANSAC_SCORE_THREADS),
                  ('SCORE_PER_THREAD', RANSAC_SCORE_PER_THREAD),
                  ('SCORE_SPLITS', RANSAC_SCORE_SPLITS)),
    'ransac_refine.cu': (('REFINE_THREADS', RANSAC_REFINE_THREADS),),
    'backbone.cu': (('CONV_BX', CONV_BLOCK[0]), ('CONV_BY', CONV_BLOCK[1]), ('CONV_CO', CONV_CO),
                    ('WIDE_CO', WIDE_CO), ('WIDE_SPLIT', WIDE_SPLIT),
                    ('INORM_PARTS', INORM_PARTS), ('INORM_THREADS', INORM_THREADS),
                    ('INORM_ITEMS', INORM_ITEMS)),
}


@dataclass(frozen=True)
class KernelVariant:
    """One compiled form of a kernel file: its macros and NVRTC options."""

    filename: str
    defines: tuple = field(default_factory=tuple)
    options: tuple = BASE_OPTIONS

    def source(self):
        """Full source text: ``#define`` preamble + the file's headers + the file's contents."""
        headers = ''.join(read_kernel(name) + '#line 1\n'
                          for name in HEADERS.get(self.filename, ()))
        return preamble(self.defines) + headers + read_kernel(self.filename)


def preamble(defines):
    """``#define NAME VALUE`` lines for a tuple of ``(name, value)`` pairs."""
    return ''.join(f'#define {name} {value}\n' for name, value in defines) + '#line 1\n'


def _candidate_dirs():
    env = os.environ.get(ENV_VAR)
    if env:
        yield Path(env)
    try:
        from ament_index_python.packages import get_package_share_directory
        from ament_index_python.packages import PackageNotFoundError
    except ImportError:
        get_package_share_directory = None
    if get_package_share_directory is not None:
        try:
            yield Path(get_package_share_directory(PACKAGE)) / 'kernels'
        except (PackageNotFoundError, ValueError, KeyError, OSError):
            pass  # OSError: ROS installed but not sourced (AMENT_PREFIX_PATH unset)
    yield Path(sys.prefix) / 'share' / PACKAGE / 'kernels'
    yield Path(__file__).resolve().parents[3] / 'kernels'


@functools.lru_cache(maxsize=None)
def kernel_dir():
    """
    Directory that holds every kernel file of :data:`ENTRY_POINTS`.

    A folder missing one of them (an install made before a kernel file was
    added) is passed over.
    """
    tried = []
    needed = set(ENTRY_POINTS).union(*HEADERS.values())
    for folder in _candidate_dirs():
        if all((folder / name).is_file() for name in needed):
            return folder
        tried.append(str(folder))
    raise BackendError(f'CUDA kernel sources not found (looked in {", ".join(tried)})')


def read_kernel(filename):
    """Text of one kernel file."""
    return (kernel_dir() / filename).read_text()


def preprocess_variant():
    """Decode + resize (no macros)."""
    return KernelVariant('preprocess.cu', (), EXACT_OPTIONS)


def gate_variant():
    """Hold a stream until the host opens a gate (a frame enqueued ahead of its image)."""
    return KernelVariant('gate.cu', LAUNCH_DEFINES['gate.cu'], BASE_OPTIONS)


def tracks_variant():
    """Track ids continued through a frame's verified matches (one block)."""
    return KernelVariant('tracks.cu', LAUNCH_DEFINES['tracks.cu'], BASE_OPTIONS)


def spread_variant():
    """Spread selection of a frame: track ages, placement order, greedy keep (exact floats)."""
    return KernelVariant('spread.cu', LAUNCH_DEFINES['spread.cu'], EXACT_OPTIONS)


def frame_table_defines(*fields):
    """``FT_FIELDS`` and ``FT_<NAME>`` (word index) macros of the frame-table fields named."""
    return (('FT_FIELDS', FRAME_FIELDS),) + tuple(
        (f'FT_{name.upper()}', FRAME_TABLE.index(name)) for name in fields)


def detect_variant():
    """Heatmap, NMS, scores and top-K."""
    return KernelVariant('detect.cu', (('CELL', CELL), ('NMS_RADIUS', NMS_RADIUS))
                         + frame_table_defines('count', 'keypoints', 'scores', 'scales')
                         + LAUNCH_DEFINES['detect.cu'], EXACT_OPTIONS)


def describe_variant(desc_dim=DESCRIPTOR_SIZE):
    """Feature normalisation and bicubic descriptor sampling."""
    return KernelVariant('describe.cu', (('DESC_DIM', int(desc_dim)),)
                         + frame_table_defines('count', 'descriptors')
                         + LAUNCH_DEFINES['describe.cu'], EXACT_OPTIONS)


def pair_table_defines():
    """``PT_FIELDS`` and ``PT_<NAME>`` (word index) macros of every pair-table field."""
    return (('PT_FIELDS', PAIR_FIELDS),) + tuple(
        (f'PT_{name.upper()}', i) for i, name in enumerate(PAIR_TABLE))


def _check_width(desc_dim):
    if desc_dim not in MATCH_WIDTHS:
        raise ValueError(f'no matcher for width {desc_dim} (built: {MATCH_WIDTHS})')


def match_variant(desc_dim):
    """Mutual-NN matcher (FP32 similarities, collection) for one width (64 or 128)."""
    _check_width(desc_dim)
    return KernelVariant('match.cu', (('DESC_DIM', int(desc_dim)),) + LAUNCH_DEFINES['match.cu']
                         + pair_table_defines(), BASE_OPTIONS)


def match_tc_variant(desc_dim):
    """Tensor-core similarity bounds (FP16 sides, tables), for one width (64 or 128)."""
    _check_width(desc_dim)
    return KernelVariant('match_tc.cu', (('DESC_DIM', int(desc_dim)),)
                         + LAUNCH_DEFINES['match_tc.cu'] + pair_table_defines(), BASE_OPTIONS)


def match_refine_variant(desc_dim):
    """Re-check the tensor-core bounds exactly in FP32, for one width (64 or 128)."""
    _check_width(desc_dim)
    return KernelVariant('match_refine.cu', (('DESC_DIM', int(desc_dim)),)
                         + LAUNCH_DEFINES['match_refine.cu'] + pair_table_defines(),
                         BASE_OPTIONS)


def ransac_variant():
    """RANSAC hypotheses and their scores (constants of :mod:`xfeat_ros.features.ransac`)."""
    constants = (('MIN_MATCHES', ransac.MIN_MATCHES), ('SAMPLE_SIZE', ransac.SAMPLE_SIZE),
                 ('MODELS_PER_SAMPLE', ransac.MODELS_PER_SAMPLE),
                 ('MAX_DRAWS', ransac.MAX_DRAWS), ('PIVOT_EPS', repr(ransac.PIVOT_EPS)),
                 ('CUBIC_EPS', repr(ransac.CUBIC_EPS)), ('NEWTON_STEPS', ransac.NEWTON_STEPS))
    return KernelVariant('ransac.cu', constants + LAUNCH_DEFINES['ransac.cu'], EXACT_OPTIONS)


def refine_variant():
    """Refine the best RANSAC model (constants: :mod:`xfeat_ros.features.ransac_refine`)."""
    constants = (('MIN_MATCHES', ransac.MIN_MATCHES),
                 ('REFINE_ROUNDS', ransac_refine.REFINE_ROUNDS),
                 ('INVERSE_ITERATIONS', ransac_refine.INVERSE_ITERATIONS),
                 ('CHOLESKY_SHIFT', repr(ransac_refine.CHOLESKY_SHIFT)),
                 ('JACOBI_SWEEPS', ransac_refine.JACOBI_SWEEPS),
                 ('JACOBI_TOLERANCE', repr(ransac_refine.JACOBI_TOLERANCE)))
    return KernelVariant('ransac_refine.cu', constants + LAUNCH_DEFINES['ransac_refine.cu'],
                         EXACT_OPTIONS)


def backbone_variant():
    """Fused elementwise steps and small convolutions of the PyTorch backbone."""
    return KernelVariant('backbone.cu', LAUNCH_DEFINES['backbone.cu'], BASE_OPTIONS)


def variants():
    """Every kernel variant the GPU path compiles (for the NVRTC compile test)."""
    return ([preprocess_variant(), gate_variant(), tracks_variant(), spread_variant(),
             detect_variant(), describe_variant(), backbone_variant()]
            + [match_variant(width) for width in MATCH_WIDTHS]
            + [match_tc_variant(width) for width in MATCH_WIDTHS]
            + [match_refine_variant(width) for width in MATCH_WIDTHS]
            + [ransac_variant(), refine_variant()])


def _raw_module(variant, device_id):
    try:
        import cupy
    except ImportError as exc:
        raise BackendError('cupy is not installed') from exc
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=variant.source(), options=variant.options)
        module.compile()
    return module


@functools.lru_cache(maxsize=None)
def preprocess_module(device_id=0):
    """Compiled ``preprocess.cu`` on a device (memoized)."""
    return _raw_module(preprocess_variant(), device_id)


@functools.lru_cache(maxsize=None)
def gate_module(device_id=0):
    """Compiled ``gate.cu`` on a device (memoized)."""
    return _raw_module(gate_variant(), device_id)


@functools.lru_cache(maxsize=None)
def tracks_module(device_id=0):
    """Compiled ``tracks.cu`` on a device (memoized)."""
    return _raw_module(tracks_variant(), device_id)


@functools.lru_cache(maxsize=None)
def spread_module(device_id=0):
    """Compiled ``spread.cu`` on a device (memoized)."""
    return _raw_module(spread_variant(), device_id)


@functools.lru_cache(maxsize=None)
def detect_module(device_id=0):
    """Compiled ``detect.cu`` on a device (memoized)."""
    return _raw_module(detect_variant(), device_id)


@functools.lru_cache(maxsize=None)
def describe_module(device_id=0, desc_dim=DESCRIPTOR_SIZE):
    """Compiled ``describe.cu`` for ``desc_dim`` channels on a device (memoized)."""
    return _raw_module(describe_variant(desc_dim), device_id)


@functools.lru_cache(maxsize=None)
def match_module(desc_dim, device_id=0):
    """Compiled ``match.cu`` for one descriptor width on a device (memoized)."""
    return _raw_module(match_variant(desc_dim), device_id)


@functools.lru_cache(maxsize=None)
def match_tc_module(desc_dim, device_id=0):
    """Compiled ``match_tc.cu`` for one descriptor width on a device (memoized)."""
    return _raw_module(match_tc_variant(desc_dim), device_id)


@functools.lru_cache(maxsize=None)
def match_refine_module(desc_dim, device_id=0):
    """Compiled ``match_refine.cu`` for one descriptor width on a device (memoized)."""
    return _raw_module(match_refine_variant(desc_dim), device_id)


@functools.lru_cache(maxsize=None)
def ransac_module(device_id=0):
    """Compiled ``ransac.cu`` on a device (memoized)."""
    return _raw_module(ransac_variant(), device_id)


@functools.lru_cache(maxsize=None)
def refine_module(device_id=0):
    """Compiled ``ransac_refine.cu`` on a device (memoized)."""
    return _raw_module(refine_variant(), device_id)


@functools.lru_cache(maxsize=None)
def backbone_module(device_id=0):
    """Compiled ``backbone.cu`` on a device (memoized)."""
    return _raw_module(backbone_variant(), device_id)
