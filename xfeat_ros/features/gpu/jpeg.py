# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
JPEG payloads decoded on the device: nvJPEG through ``torchvision.io.decode_jpeg``.

:class:`JpegDecoder` decodes a compressed image's checked JPEG bytes
(:func:`xfeat_ros.features.compressed.checked_payload`) on its own CUDA stream and
returns a :class:`DeviceImage`: the pixels stay on the device (``rgb8`` or
``mono8``, rows packed) and the GPU engine uploads them with a device-to-device
copy that waits for the decode (:func:`xfeat_ros.features.gpu.upload.stage`),
so that neither the image thread nor the engine's stream waits for the other.
A DeviceImage still reads as an ordinary Image (``data``: the pixels copied to
the host on first use), so a frame decoded for a GPU engine that has since
failed over to the CPU takes the CPU path unchanged. PNG payloads stay with
OpenCV on the CPU (nvJPEG decodes JPEG only).

torchvision is optional: without it (or without its nvJPEG) the engine offers
no decoder and compressed images are decoded on the CPU, as without a GPU.
"""

import numpy as np

from xfeat_ros.errors import BackendError, CompressedImageError


class DeviceImage:
    """
    An ``Image``-like object whose pixels lie on the device.

    ``header``, ``height``, ``width``, ``step``, ``encoding`` (``rgb8`` or
    ``mono8``), ``is_bigendian`` as a raw image has them; ``device_pixels`` the
    uint8 torch tensor [H, W, C] (contiguous) and ``ready`` the CuPy event
    recorded after the decode on ``device``. ``data`` copies the pixels to
    the host (once) for anything that reads them there.
    """

    is_bigendian = 0

    def __init__(self, header, pixels, ready, device):
        """Wrap decoded ``pixels`` [H, W, C] (torch, uint8, on ``device``)."""
        self.header = header
        self.device_pixels = pixels
        self.ready = ready
        self.device = int(device)
        self.height, self.width, channels = (int(n) for n in pixels.shape)
        self.encoding = 'rgb8' if channels == 3 else 'mono8'
        self.step = self.width * channels
        self._host = None

    @property
    def nbytes(self):
        """Return the byte count of the pixels."""
        return self.step * self.height

    @property
    def data(self):
        """Return the pixels as host bytes (a memoryview, copied once)."""
        if self._host is None:
            self.ready.synchronize()
            self._host = memoryview(self.device_pixels.cpu().numpy().reshape(-1)).cast('B')
        return self._host


class JpegDecoder:
    """nvJPEG decoding on CUDA device ``gpu``, on a stream of its own."""

    def __init__(self, cupy, gpu=0):
        """Load torchvision's decoder; :class:`BackendError` where it cannot decode on the GPU."""
        try:
            import torch
            from torchvision.io import decode_jpeg, ImageReadMode
        except ImportError as exc:
            raise BackendError(f'no GPU JPEG decoder: torchvision is not installed ({exc})') \
                from exc
        self.cupy, self.torch, self.gpu = cupy, torch, int(gpu)
        self._decode, self._mode = decode_jpeg, ImageReadMode.UNCHANGED
        with cupy.cuda.Device(self.gpu):
            self.stream = cupy.cuda.Stream(non_blocking=True)
        self._torch_stream = torch.cuda.ExternalStream(self.stream.ptr,
                                                       device=f'cuda:{self.gpu}')

    def decode(self, header, payload):
        """
        Decode checked JPEG bytes (uint8 ndarray); return a :class:`DeviceImage`.

        Raises :class:`CompressedImageError` where nvJPEG cannot decode them.
        """
        torch = self.torch
        data = torch.from_numpy(np.array(payload))  # writable: torch warns on read-only bytes
        with self.cupy.cuda.Device(self.gpu), torch.cuda.stream(self._torch_stream):
            try:
                chw = self._decode(data, mode=self._mode, device=f'cuda:{self.gpu}')
            except RuntimeError as exc:
                raise CompressedImageError(
                    f'jpeg payload of {payload.size} bytes cannot be decoded on the GPU: '
                    f'{str(exc).strip().splitlines()[0]}') from exc
            if chw.dim() != 3 or chw.shape[0] not in (1, 3):
                raise CompressedImageError(f'jpeg image of {tuple(chw.shape)} is not supported '
                                           '(grey or colour 8 bit)')
            pixels = chw.permute(1, 2, 0).contiguous()
            ready = self.cupy.cuda.Event(disable_timing=True)
            ready.record(self.stream)
        return DeviceImage(header, pixels, ready, self.gpu)

    def warm_up(self):
        """Decode one small JPEG now and wait for it (loads nvJPEG's kernels and buffers)."""
        import cv2
        ok, encoded = cv2.imencode('.jpg', np.zeros((16, 16, 3), np.uint8))
        if ok:
            self.decode(None, np.frombuffer(encoded.tobytes(), np.uint8)).ready.synchronize()


def probe(cupy, gpu=0):
    """Return a :class:`JpegDecoder` of device ``gpu``, or None with the reason."""
    try:
        return JpegDecoder(cupy, gpu), None
    except BackendError as exc:
        return None, str(exc)
