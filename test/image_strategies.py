# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Hypothesis strategies of sensor_msgs/Image headers and data, shared by tests."""

from hypothesis import strategies as st
from xfeat_ros.features.image_codec import ENCODINGS

# sensor_msgs/image_encodings names (REP 104 and the header file).
ROS_ENCODINGS = [
    'rgb8', 'rgba8', 'rgb16', 'rgba16', 'bgr8', 'bgra8', 'bgr16', 'bgra16', 'mono8',
    'mono16', 'bayer_rggb8', 'bayer_bggr8', 'bayer_gbrg8', 'bayer_grbg8', 'bayer_rggb16',
    'bayer_bggr16', 'bayer_gbrg16', 'bayer_grbg16', 'yuv422', 'yuv422_yuy2', 'uyvy', 'yuyv',
    'nv21', 'nv24', '8UC1', '8UC2', '8UC3', '8UC4', '8SC1', '16UC1', '16UC3', '16SC1',
    '32SC1', '32FC1', '32FC3', '64FC1']
CHANNELS = {'mono8': (1, 1), 'mono16': (1, 2), 'rgb8': (3, 1), 'bgr8': (3, 1),
            'rgba8': (4, 1), 'bgra8': (4, 1)}


@st.composite
def image_headers(draw):
    """Draw (data, encoding, height, width, step, bigendian, valid)."""
    encoding = draw(st.sampled_from(ROS_ENCODINGS + list(ENCODINGS))
                    | st.text(max_size=12))
    height = draw(st.sampled_from([0, 1, 2, 31, 32, 33, 47]) | st.integers(0, 64))
    width = draw(st.sampled_from([0, 1, 3, 31, 32, 45]) | st.integers(0, 64))
    channels, size = CHANNELS.get(encoding, (draw(st.integers(1, 4)), 1))
    row = width * channels * size
    step = max(0, row + draw(st.sampled_from([0, 0, 0, 1, 3, 16, -1, -row])))
    length = step * height + draw(st.sampled_from([0, 0, 0, -1, 1, -step, 7]))
    data = draw(st.binary(min_size=max(length, 0), max_size=max(length, 0)))
    valid = (encoding in CHANNELS and height > 0 and width > 0 and step >= row
             and len(data) == step * height)
    return data, encoding, height, width, step, draw(st.booleans()), valid
