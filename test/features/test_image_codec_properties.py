# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Property-based tests of the image decoder and the node's image callback.

Random encodings (every sensor_msgs/image_encodings name plus garbage), sizes
(0x0 to odd sizes, and 16384x16384 headers with short data), steps smaller and
larger than needed, truncated and oversized data, both endiannesses: supported
inputs decode exactly as a reference, everything else raises the typed error,
nothing else escapes, and nothing of a header's claimed size is allocated
before validation.
"""

import tracemalloc

from hypothesis import given, HealthCheck, settings, strategies as st
from image_strategies import CHANNELS, image_headers
import numpy as np
from xfeat_ros.errors import ImageError
from xfeat_ros.features.image_codec import decode_image, ENCODINGS


def reference(data, encoding, height, width, step, bigendian):
    """Decode the obvious way (independent of xfeat_ros.features.image_codec)."""
    channels, size = CHANNELS[encoding]
    rows = np.frombuffer(data, np.uint8).reshape(height, step)[:, :width * channels * size]
    if size == 2:
        pixels = rows.copy().view('>u2' if bigendian else '<u2').astype(np.float64) / 65535
    else:
        pixels = rows.astype(np.float64) / 255
    pixels = pixels.reshape(height, width, channels)
    if channels == 1:
        return pixels[:, :, 0]
    order = [2, 1, 0] if encoding.startswith('bgr') else [0, 1, 2]
    return pixels[:, :, order].mean(axis=2)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(image_headers())
def test_decoder_exact_or_typed_error(header):
    data, encoding, height, width, step, bigendian, valid = header
    if valid:
        grey = decode_image(data, encoding, height, width, step, bigendian)
        assert grey.dtype == np.float32 and grey.shape == (height, width)
        np.testing.assert_allclose(grey, reference(data, encoding, height, width, step,
                                                   bigendian), atol=2e-7)
    else:
        try:
            decode_image(data, encoding, height, width, step, bigendian)
        except ImageError:
            return
        raise AssertionError(f'accepted an invalid image {encoding!r} {width}x{height} '
                             f'step {step} bytes {len(data)}')


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(list(ENCODINGS)), st.integers(0, 4096))
def test_huge_header_allocates_nothing(encoding, nbytes):
    tracemalloc.start()
    try:
        decode_image(bytes(nbytes), encoding, 16384, 16384, 16384 * 8, False)
    except ImageError:
        pass
    else:
        raise AssertionError('a 16384x16384 header with short data was accepted')
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 1 << 20
