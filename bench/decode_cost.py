# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
What a compressed image costs the node per frame: decoding on receipt (CPU, OpenCV).

    python bench/decode_cost.py --repeat 100 --json out.json

A TUM fr2/desk frame (640x480 rgb8; 1280x720 is the same frame resized with
``cv2.INTER_CUBIC``, so its content compresses a little better than a native
720p frame) is compressed as image_transport does (jpeg at ``--quality``, png
at level 3, image_transport's default), in colour and in grey, and serialized as a
``sensor_msgs/CompressedImage``. Per case, the median and 90th percentile of
``--repeat`` runs (ms) of:

* ``decode``: :func:`xfeat_ros.features.compressed.decode_compressed`, the one
  function that decodes;
* ``receipt``: what the node's image thread does with a compressed payload
  (:func:`xfeat_ros.ros.compressed.parse_compressed`: parse and decode), and
  ``receipt_raw`` what it does with the raw Image of the same pixels
  (:func:`xfeat_ros.ros.transport.cdr.parse_image`, no copy); their difference is
  the latency a compressed input adds to every frame (the decode runs in line,
  before the frame is queued);
* ``grey``: the engine's decode of the result to grey float32 (the same for the
  raw input, listed for scale);
* with ``--gpu N``, for JPEG: ``decode_gpu``, the GPU engine's nvJPEG decoder
  (:class:`xfeat_ros.features.gpu.jpeg.JpegDecoder`, the checks included) until its
  pixels are ready on device N, and ``receipt_gpu``, the image thread's parse with that
  decoder (it returns once the decode is enqueued; the engine's upload waits for it).
"""

import argparse
import json
import os
from pathlib import Path
import platform
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xfeat_ros.cli import one_line_errors  # noqa: E402
from xfeat_ros.errors import DatasetError  # noqa: E402
from xfeat_ros.features.compressed import decode_compressed, encode_compressed  # noqa: E402
from xfeat_ros.features.image_codec import (convert_pixels, decode_image_msg,  # noqa: E402
                                            image_msg)
from xfeat_ros.tools.image_files import list_sequence, read_image  # noqa: E402

SIZES = ((640, 480), (1280, 720))
ENCODINGS = ('rgb8', 'mono8')
KINDS = ('jpeg', 'png')
MIN_REPEAT = 50
REPO = Path(__file__).resolve().parents[1]


def timed(function, repeat):
    """Return ``{'median_ms', 'p90_ms'}`` of ``repeat`` calls of ``function()`` (one warm-up)."""
    function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1000.0)
    times.sort()
    return {'median_ms': round(statistics.median(times), 4),
            'p90_ms': round(times[int(0.9 * (len(times) - 1))], 4)}


def source_frame(data):
    """Return the first frame (rgb8 pixels) of ``data``/tum_fr2_desk."""
    folder = Path(data) / 'data' / 'tum_fr2_desk'
    if not folder.is_dir():
        raise DatasetError(f'{folder} does not exist: give --data, the folder holding data/')
    pixels, encoding = read_image(list_sequence(folder)[0][1])
    return convert_pixels(pixels, encoding, 'rgb8')[0]


def cases(frame, quality):
    """Yield ``(size, encoding, kind, pixels, format, payload)`` of every case."""
    import cv2
    for width, height in SIZES:
        pixels = frame if frame.shape[:2] == (height, width) else cv2.resize(
            frame, (width, height), interpolation=cv2.INTER_CUBIC)
        for encoding in ENCODINGS:
            converted, _ = convert_pixels(pixels, 'rgb8', encoding)
            for kind in KINDS:
                fmt, payload = encode_compressed(converted, encoding, kind, quality)
                yield f'{width}x{height}', encoding, kind, converted, fmt, payload


def gpu_decoder(gpu):
    """Return the nvJPEG decoder of CUDA device ``gpu`` (BackendError where there is none)."""
    import cupy
    from xfeat_ros.features.gpu.jpeg import JpegDecoder
    return JpegDecoder(cupy, gpu)


def measure(frame, quality, repeat, decoder=None):
    """Return one record per case (see the module); ``decoder``: the GPU figures too."""
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import CompressedImage
    from xfeat_ros.ros.compressed import parse_compressed
    from xfeat_ros.ros.transport.cdr import parse_image
    rows = []
    for size, encoding, kind, pixels, fmt, payload in cases(frame, quality):
        compressed = serialize_message(CompressedImage(format=fmt, data=payload))
        raw = serialize_message(image_msg(pixels, encoding))
        decoded = parse_compressed(compressed)
        row = {'size': size, 'encoding': encoding, 'kind': kind, 'format': fmt,
               'payload_bytes': len(payload), 'raw_bytes': int(pixels.nbytes),
               'decode': timed(lambda: decode_compressed(payload, fmt), repeat),
               'receipt': timed(lambda: parse_compressed(compressed), repeat),
               'receipt_raw': timed(lambda: parse_image(raw), repeat),
               'grey': timed(lambda: decode_image_msg(decoded), repeat)}
        row['added_ms'] = round(row['receipt']['median_ms'] - row['receipt_raw']['median_ms'], 4)
        if decoder is not None and kind == 'jpeg':
            from xfeat_ros.features.compressed import compressed_image
            header = SimpleNamespace(frame_id='')
            row['decode_gpu'] = timed(
                lambda: compressed_image(header, fmt, payload, decoder).ready.synchronize(),
                repeat)
            row['receipt_gpu'] = timed(lambda: parse_compressed(compressed, decoder), repeat)
        rows.append(row)
    return rows


def table(rows):
    """Return the Markdown table of ``rows`` (medians, ms)."""
    lines = ['| size | input | payload | decode | receipt (compressed) | receipt (raw) | '
             'added per frame | grey (either) |', '|---|---|---|---|---|---|---|---|']
    for r in rows:
        lines.append(f'| {r["size"]} | {r["encoding"]} {r["kind"]} | '
                     f'{r["payload_bytes"] / 1024:.0f} KiB | {r["decode"]["median_ms"]:.2f} | '
                     f'{r["receipt"]["median_ms"]:.2f} | {r["receipt_raw"]["median_ms"]:.3f} | '
                     f'{r["added_ms"]:.2f} | {r["grey"]["median_ms"]:.2f} |')
    gpu = [r for r in rows if 'decode_gpu' in r]
    if gpu:
        lines += ['', '| size | input | decode on the GPU (ready) | receipt with it |',
                  '|---|---|---|---|']
        lines += [f'| {r["size"]} | {r["encoding"]} {r["kind"]} | '
                  f'{r["decode_gpu"]["median_ms"]:.2f} | {r["receipt_gpu"]["median_ms"]:.2f} |'
                  for r in gpu]
    return '\n'.join(lines)


def versions():
    """Return the versions that move the figures."""
    import cv2
    return {'python': platform.python_version(), 'numpy': np.__version__,
            'opencv': cv2.__version__, 'cpus': os.cpu_count(),
            'load_average': [round(v, 2) for v in os.getloadavg()]}


def build_parser():
    """Return the command line."""
    parser = argparse.ArgumentParser(prog='decode_cost', description=__doc__.split('\n\n')[0])
    parser.add_argument('--data', default=str(REPO / 'test' / 'data'),
                        help='folder holding data/tum_fr2_desk (default: the test fixtures)')
    parser.add_argument('--repeat', type=int, default=100,
                        help=f'runs per figure, at least {MIN_REPEAT} (default %(default)s)')
    parser.add_argument('--quality', type=int, default=90, help='jpeg quality (default 90)')
    parser.add_argument('--json', help='write the records and versions here')
    parser.add_argument('--gpu', type=int, metavar='N',
                        help='also time JPEG decoding with nvJPEG on CUDA device N')
    return parser


@one_line_errors('decode_cost')
def main(argv=None):
    """Command-line entry point."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.repeat < MIN_REPEAT:
        parser.error(f'--repeat must be at least {MIN_REPEAT}, got {args.repeat}')
    decoder = gpu_decoder(args.gpu) if args.gpu is not None else None
    rows = measure(source_frame(args.data), args.quality, args.repeat, decoder)
    sys.stdout.write(table(rows) + '\n')
    if args.json:
        record = {'command': 'python bench/decode_cost.py ' + ' '.join(argv or sys.argv[1:]),
                  'repeat': args.repeat, 'quality': args.quality, 'versions': versions(),
                  'cases': rows}
        Path(args.json).write_text(json.dumps(record, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
