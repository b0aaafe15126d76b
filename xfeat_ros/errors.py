# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The one typed error family of xfeat_ros.

Every boundary (message decoding, weight loading, backend selection, parameter
validation, descriptor buffers) raises a subclass of :class:`XFeatError`, so a
caller can catch the family, and the node can count rejections by class name.
"""


class XFeatError(Exception):
    """Base class of every error raised on purpose by xfeat_ros."""


class ImageError(XFeatError):
    """An input image cannot be processed (base of the decode errors)."""


class UnsupportedEncodingError(ImageError):
    """The image encoding is not one the pipeline decodes."""

    def __init__(self, encoding, supported):
        super().__init__(
            f'unsupported image encoding {encoding!r} '
            f'(supported: {", ".join(supported)})')
        self.encoding = encoding


class ImageLayoutError(ImageError):
    """The image header disagrees with its data (size, step, byte count)."""


class CompressedImageError(ImageError):
    """A ``sensor_msgs/CompressedImage`` payload cannot be decoded (corrupt or truncated)."""


class UnsupportedCompressionError(CompressedImageError):
    """A ``sensor_msgs/CompressedImage`` format is not one the node decodes (jpeg, png)."""


class ImageTooSmallError(ImageError):
    """The image is smaller than 32 pixels on a side: no model size exists."""


class WeightsError(XFeatError):
    """Weights are missing, corrupt, or do not match the XFeat network."""


class ModelExportError(XFeatError):
    """The ONNX model could not be built, read or validated."""


class BackendError(XFeatError):
    """A backbone backend is unavailable or failed."""


class DescriptorLayoutError(XFeatError):
    """Descriptors do not match their declared (buffer, count, width) layout."""


class ParameterError(XFeatError):
    """A node parameter value is invalid."""


class MessagesMissingError(XFeatError):
    """The xfeat_ros_msgs interface package is not built or not sourced."""


class StampOrderError(ImageError):
    """An image's stamp is not later than its camera's previous image."""


class BagError(XFeatError):
    """A rosbag2 file cannot be read or written (missing, no image topic, exists)."""


class CameraModelError(XFeatError):
    """Camera intrinsics or distortion are missing, malformed or of an unsupported model."""


class DeviceError(XFeatError):
    """
    The engine's device failed at run time (out of memory, a CUDA error).

    Only this family (and the native device errors listed by
    :func:`xfeat_ros.features.engine.device_errors`) moves the node to the CPU engine;
    any other exception is a fault of its own, never a device failure.
    """


class TransportError(XFeatError):
    """The middleware refused to take a message (rcl's return code and message attached)."""


class DatasetError(XFeatError):
    """A dataset folder has no recognised layout or lacks its ground truth or calibration."""
