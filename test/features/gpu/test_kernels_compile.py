# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Every CUDA kernel compiles with NVRTC for Jetson Orin (sm_87) and Hopper (sm_90).

No GPU is needed: NVRTC is a compiler library. It is loaded with ctypes from
the ``nvidia-cuda-nvrtc`` PyPI wheel (``nvidia/cu13/lib`` or
``nvidia/cuda_nvrtc/lib`` on ``sys.path``), ``$XFEAT_ROS_NVRTC``, a CUDA
toolkit (``$CUDA_HOME``, ``/usr/local/cuda``) or the system library path; the
test is skipped only when none of them can be loaded. The sources are
exactly those the GPU path compiles (:func:`xfeat_ros.features.gpu.kernels.variants`:
same ``#define`` preamble, same options), for both matcher widths.
"""

import ast
import ctypes
import ctypes.util
import glob
import os
from pathlib import Path
import re
import sys

import pytest

from xfeat_ros.features.gpu import kernels
from xfeat_ros.features.gpu.kernels import (ENTRY_POINTS, HEADERS, KernelVariant, LAUNCH_DEFINES,
                                            MATCH_WIDTHS, read_kernel, variants)

ARCHS = ('sm_87', 'sm_90')
HEADER_LINES = 80


def _nvrtc_candidates():
    env = os.environ.get('XFEAT_ROS_NVRTC')
    if env:
        yield env
    for entry in sys.path:
        for sub in ('nvidia/cu13/lib', 'nvidia/cuda_nvrtc/lib', 'nvidia/cu12/lib'):
            for lib in sorted(glob.glob(os.path.join(entry, sub, 'libnvrtc.so*'))):
                if 'builtins' not in lib and 'alt' not in lib:
                    yield lib
    for home in (os.environ.get('CUDA_HOME'), os.environ.get('CUDA_PATH'), '/usr/local/cuda'):
        if home:
            yield from sorted(glob.glob(os.path.join(home, 'lib64', 'libnvrtc.so*')))
    name = ctypes.util.find_library('nvrtc')
    if name:
        yield name


class Nvrtc:
    """The few NVRTC entry points the test needs, through ctypes."""

    def __init__(self, lib):
        self.lib = lib
        for name in ('nvrtcCreateProgram', 'nvrtcCompileProgram', 'nvrtcGetProgramLogSize',
                     'nvrtcGetProgramLog', 'nvrtcGetCUBINSize', 'nvrtcGetCUBIN',
                     'nvrtcDestroyProgram', 'nvrtcVersion'):
            getattr(lib, name).restype = ctypes.c_int

    def version(self):
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return major.value, minor.value

    def build(self, source, name, options):
        """Compile; return ``(ok, log, cubin bytes)``."""
        prog = ctypes.c_void_p()
        rc = self.lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(),
                                         0, None, None)
        assert rc == 0, f'nvrtcCreateProgram failed ({rc})'
        try:
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            rc = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            self.lib.nvrtcGetProgramLog(prog, log)
            cubin = b''
            if rc == 0:
                self.lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
                buf = ctypes.create_string_buffer(size.value)
                self.lib.nvrtcGetCUBIN(prog, buf)
                cubin = buf.raw
            return rc == 0, log.value.decode(errors='replace'), cubin
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


@pytest.fixture(scope='module')
def nvrtc():
    """NVRTC loaded with ctypes, or a skip saying how to get it."""
    tried = []
    for candidate in _nvrtc_candidates():
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as exc:
            tried.append(f'{candidate}: {exc}')
            continue
        return Nvrtc(lib)
    pytest.skip('NVRTC cannot be loaded (pip install nvidia-cuda-nvrtc); tried: '
                + ('; '.join(tried) or 'nothing found'))


def _variant_id(variant):
    """Short test id: the file's stem and only the macros that differ between its variants."""
    siblings = [v for v in VARIANTS if v.filename == variant.filename]
    varying = [(k, v) for k, v in variant.defines
               if len({dict(s.defines).get(k) for s in siblings}) > 1]
    stem = Path(variant.filename).stem
    return f'{stem}[' + ','.join(f'{k}={v}' for k, v in varying) + ']' if varying else stem


VARIANTS = variants()


@pytest.mark.parametrize('arch', ARCHS)
@pytest.mark.parametrize('variant', VARIANTS, ids=_variant_id)
def test_kernel_compiles(nvrtc, variant, arch):
    options = list(variant.options) + [f'--gpu-architecture={arch}']
    ok, log, cubin = nvrtc.build(variant.source(), variant.filename, options)
    assert ok, f'{variant.filename} ({arch}, NVRTC {nvrtc.version()}):\n{log}'
    assert 'warning' not in log.lower(), f'{variant.filename} ({arch}) warns:\n{log}'
    for entry in ENTRY_POINTS[variant.filename]:
        assert entry.encode() in cubin, f'{entry} missing from {variant.filename} ({arch})'


@pytest.mark.parametrize('filename', ['match.cu', 'match_tc.cu', 'match_refine.cu'])
def test_both_matcher_widths_are_built(filename):
    widths = sorted(dict(v.defines)['DESC_DIM'] for v in variants() if v.filename == filename)
    assert widths == sorted(MATCH_WIDTHS) == [64, 128]


@pytest.mark.parametrize('filename', sorted(ENTRY_POINTS))
def test_header_names_entry_points(filename):
    head = '\n'.join(read_kernel(filename).splitlines()[:HEADER_LINES])
    assert 'Copyright 2026 xfeat_ros contributors' in head
    assert 'SPDX-License-Identifier: Apache-2.0' in head
    assert 'Thread mapping' in head and 'Macros injected by the loader' in head
    for entry in ENTRY_POINTS[filename]:
        assert entry in head, f'{filename} header does not name {entry}'


def macros_paragraph(filename):
    """Return the header's 'Macros injected by the loader' paragraph of a kernel file."""
    lines = read_kernel(filename).splitlines()
    start = next(i for i, line in enumerate(lines) if 'Macros injected by the loader' in line)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith('//')),
               len(lines))
    return '\n'.join(lines[start:end])


@pytest.mark.parametrize('variant', VARIANTS, ids=_variant_id)
def test_launch_constants_come_from_the_preamble(variant):
    """Every injected macro is the loader's alone: named in the header, defined nowhere else."""
    defines = dict(variant.defines)
    for name, value in LAUNCH_DEFINES[variant.filename]:
        assert defines[name] == value, f'{name} of {variant.filename}'
    source = read_kernel(variant.filename)
    redefined = [name for name in defines
                 if re.search(rf'^\s*#\s*define\s+{name}\b', source, re.MULTILINE)]
    assert redefined == [], f'{variant.filename} defines {redefined} the loader injects'
    paragraph = macros_paragraph(variant.filename)
    unnamed = [name for name in defines if not re.search(rf'\b{name}\b', paragraph)]
    assert unnamed == [], f'{variant.filename} header does not name {unnamed}'


def test_python_launches_keep_no_copy_of_a_launch_constant():
    """The launch shapes live in kernels.py only; the launching modules import them."""
    python_names = {'CONV_BLOCK', 'CONV_CO', 'WIDE_CO', 'WIDE_SPLIT', 'NMS_BLOCK',
                    'RADIX_BITS', 'SELECT_THREADS', 'RANK_THREADS', 'RANK_SPLIT', 'RANK_TILE',
                    'NORM_PIXELS', 'NORM_THREADS', 'MATCH_TILE',
                    'MATCH_THREADS', 'COLLECT_THREADS', 'TC_THREADS', 'RANSAC_SCORE_MODELS',
                    'RANSAC_SCORE_THREADS', 'RANSAC_SCORE_PER_THREAD', 'RANSAC_SCORE_SPLITS',
                    'RANSAC_REFINE_THREADS',
                    'RANSAC_REFINE_SHARED_POINTS', 'INORM_PARTS', 'INORM_THREADS',
                    'INORM_ITEMS'}
    assert all(hasattr(kernels, name) for name in python_names)
    shared = python_names | {name for defines in LAUNCH_DEFINES.values() for name, _ in defines}
    copies = []
    for path in sorted(Path(kernels.__file__).parent.glob('*.py')):
        if path.name == 'kernels.py':
            continue
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            copies += [f'{path.name}: {t.id}' for t in targets
                       if isinstance(t, ast.Name) and t.id in shared]
    assert copies == [], f'launch constants defined outside kernels.py: {copies}'
    from xfeat_ros.features.gpu import backbone_kernels, ops
    detect = dict(LAUNCH_DEFINES['detect.cu'])
    assert ops.NMS_BLOCK == (detect['NMS_BX'], detect['NMS_BY'])
    assert ops.RADIX_BINS == 1 << detect['RADIX_BITS'] and ops.RADIX_PASSES * detect[
        'RADIX_BITS'] == 64
    backbone = dict(LAUNCH_DEFINES['backbone.cu'])
    assert backbone_kernels.CONV_BLOCK == (backbone['CONV_BX'], backbone['CONV_BY'])


def test_a_broken_kernel_fails(nvrtc):
    """The harness really reports errors (a missing macro trips the #error guard)."""
    broken = KernelVariant('match.cu', (), ('--std=c++17',))
    ok, log, _ = nvrtc.build(broken.source(), 'match.cu', ['--gpu-architecture=sm_90'])
    assert not ok and 'DESC_DIM' in log


def test_kernel_dir_with_ros_installed_but_not_sourced(monkeypatch):
    """ament_index raises OSError without AMENT_PREFIX_PATH: the repository copy is used."""
    from xfeat_ros.features.gpu import kernels
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    monkeypatch.delenv(kernels.ENV_VAR, raising=False)
    kernels.kernel_dir.cache_clear()
    try:
        assert (kernels.kernel_dir() / 'preprocess.cu').is_file()
    finally:
        kernels.kernel_dir.cache_clear()


@pytest.mark.parametrize('variant', [v for v in VARIANTS if v.filename in HEADERS],
                         ids=_variant_id)
def test_headers_come_before_their_file(variant):
    """The loader puts a file's shared headers after the macros and before the file itself."""
    source = variant.source()
    body = source.index(read_kernel(variant.filename))
    named = '\n'.join(read_kernel(variant.filename).splitlines()[:HEADER_LINES])
    for header in HEADERS[variant.filename]:
        text = read_kernel(header)
        assert 'Copyright 2026 xfeat_ros contributors' in text
        assert source.index('#define') < source.index(text) < body
        assert header in named, f'{variant.filename} does not name {header}'


def test_kernel_dir_without_the_headers_is_passed_over(tmp_path, monkeypatch):
    """An install made before the headers existed is not used (it could not compile)."""
    for name in ENTRY_POINTS:
        (tmp_path / name).write_text(read_kernel(name))
    monkeypatch.setenv(kernels.ENV_VAR, str(tmp_path))
    kernels.kernel_dir.cache_clear()
    try:
        assert kernels.kernel_dir() != tmp_path
        for name in set().union(*HEADERS.values()):
            (tmp_path / name).write_text(read_kernel(name))
        kernels.kernel_dir.cache_clear()
        assert kernels.kernel_dir() == tmp_path
    finally:
        kernels.kernel_dir.cache_clear()
