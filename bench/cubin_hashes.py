# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Print a sha256 of the NVRTC cubin of every kernel variant (no GPU needed).

For refactors of ``kernels/*.cu`` or of the loader's preamble that must not
change the compiled code: run before and after, and diff. Uses the NVRTC that
test/test_kernels_compile.py finds (the ``nvidia-cuda-nvrtc`` wheel).

    python bench/cubin_hashes.py [sm_87 sm_90 ...] > before.txt
"""

import ctypes
import hashlib
from pathlib import Path
import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'test'))
import test_kernels_compile as compile_test  # noqa: E402,I100
from xfeat_ros.gpu.kernels import variants  # noqa: E402


def nvrtc():
    """Return the first NVRTC library that loads, wrapped as in the compile test."""
    for candidate in compile_test._nvrtc_candidates():
        try:
            return compile_test.Nvrtc(ctypes.CDLL(candidate))
        except OSError:
            continue
    raise SystemExit('NVRTC cannot be loaded (pip install nvidia-cuda-nvrtc)')


def main(archs):
    """Print ``file DESC_DIM arch sha256[:16] bytes`` per variant and architecture."""
    compiler = nvrtc()
    for variant in variants():
        for arch in archs:
            ok, log, cubin = compiler.build(variant.source(), variant.filename,
                                            list(variant.options) + [f'--gpu-architecture={arch}'])
            if not ok:
                raise SystemExit(f'{variant.filename} ({arch}) does not compile:\n{log}')
            print(variant.filename, dict(variant.defines).get('DESC_DIM', '-'), arch,
                  hashlib.sha256(cubin).hexdigest()[:16], len(cubin))


if __name__ == '__main__':
    main(sys.argv[1:] or ['sm_87', 'sm_90'])
