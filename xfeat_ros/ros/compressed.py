# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The node's image input per ``input_transport``: raw ``sensor_msgs/Image`` or compressed.

``raw``: camera ``c`` subscribes ``c/image`` (sensor_msgs/Image), parsed in place
(:func:`xfeat_ros.ros.transport.cdr.parse_image`).

``compressed``: camera ``c`` subscribes image_transport's compressed topic of
``c/image``: the image topic's resolved name (remappings applied, so
``image:=/cam/image_raw`` gives ``/cam/image_raw/compressed``) followed by
``/compressed``, with ``sensor_msgs/CompressedImage`` (jpeg or png). The
payload is parsed in place (:func:`parse_compressed`) and decoded on receipt,
on the image thread, into an Image-like object that takes the raw path from
there (:mod:`xfeat_ros.features.compressed`): a JPEG by the GPU engine's nvJPEG
decoder where it has one (pixels left on the device,
:mod:`xfeat_ros.features.gpu.jpeg`), else by OpenCV; a format the node does not
decode or a corrupt payload raises the typed error the stream counts
(``rejected_UnsupportedCompressionError``, ``rejected_CompressedImageError``)
and the node logs.
"""

from sensor_msgs.msg import CompressedImage, Image

from xfeat_ros.features.compressed import compressed_image
from xfeat_ros.ros.transport.cdr import _Reader, Header, parse_image, Time

TRANSPORTS = ('raw', 'compressed')


def parse_compressed(payload, jpeg_decoder=None):
    """
    Parse a serialized ``sensor_msgs/CompressedImage`` and decode its pixels.

    Returns the Image-like object of
    :func:`xfeat_ros.features.compressed.compressed_image` (header a
    :class:`~xfeat_ros.ros.transport.cdr.Header`; a JPEG decoded by
    ``jpeg_decoder`` where given). Raises the
    :class:`xfeat_ros.errors.ImageError` family (a malformed message:
    :class:`~xfeat_ros.errors.ImageLayoutError`).
    """
    reader = _Reader(payload)
    stamp = Time(reader.uint('i', 4, 'header.stamp'), reader.uint('I', 4, 'header.stamp'))
    header = Header(stamp, reader.string('header.frame_id'))
    fmt = reader.string('format')
    return compressed_image(header, fmt, reader.octets('data'), jpeg_decoder)


def engine_jpeg_decoder(engine):
    """Return ``engine``'s JPEG decoder where its capabilities offer one, else None."""
    return engine.jpeg_decoder() if engine.capabilities.jpeg_decoder else None


def warm_jpeg_decoder(engine):
    """
    Make the engine's JPEG decoder and decode one small image with it; return the decoder.

    Its first use loads torchvision and initialises nvJPEG (seconds on the
    GPU machine): done at start, images coming then are not lost behind it.
    None (nothing done) where the engine has no decoder.
    """
    decoder = engine_jpeg_decoder(engine)
    if decoder is not None:
        decoder.warm_up()
    return decoder


def image_input(node, camera_topic, transport, jpeg_decoder=lambda: None):
    """
    Return ``(message type, topic, parse)`` of a camera's image subscription.

    ``camera_topic`` is the camera's relative raw image topic (``c/image``);
    ``node`` resolves it (remappings included) for the compressed topic.
    ``jpeg_decoder()`` gives the decoder of each compressed JPEG at its receipt
    (the current engine's, :func:`engine_jpeg_decoder`; None: OpenCV on the CPU).
    """
    if transport == 'compressed':
        return CompressedImage, node.resolve_topic_name(camera_topic) + '/compressed', \
            lambda payload: parse_compressed(payload, jpeg_decoder())
    return Image, camera_topic, parse_image
