# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The outputs of finished frames, in order, to a :class:`Sink`.

:class:`FrontEnd.finish` takes each frame back from the engine (on the
scheduler's output thread, or in ``xfeat_offline``'s loop): it continues the
camera's tracks, then hands the sink the Keypoints/Matches content, the
keypoint cloud, the VINS feature columns, the debug picture and stereo
matches, as configured by :class:`OutputConfig`. The sink (the node's
publishers, a bag writer) turns them into messages. The first frame of a
camera's new timeline (its stamps jumped back: :mod:`xfeat_ros.runtime.stream`)
is logged as a warning, at most once per :data:`STAMP_JUMP_LOG_PERIOD_S` per camera.
"""

from collections import deque
from dataclasses import dataclass
import time
from typing import Protocol

from xfeat_ros.features.debug_image import render_debug_image
from xfeat_ros.features.image_codec import decode_image_msg
from xfeat_ros.features.spread import remap_matches
from xfeat_ros.runtime.stereo import parse_stereo_pairs, verify_stereo
from xfeat_ros.runtime.stream import stamp_ns
from xfeat_ros.runtime.vins import model_mismatch, vins_columns, vins_part

STAMP_JUMP_LOG_PERIOD_S = 1.0  # a camera's stamp jumps back: one warning at most this often


@dataclass(frozen=True)
class OutputConfig:
    """Which outputs each frame gives (the node parameters of the same names)."""

    descriptor_encoding: str = 'float32'  # float32, float16, int8 or none
    keypoint_cloud: bool = False
    vins_features: bool = False
    vins_format: str = 'mono'             # mono or fusion
    vins_velocity_units: str = 'pixels'   # pixels or normalized
    stereo_pairs: tuple = ()              # ('left:right', ...)
    stereo_sync_tolerance_s: float = 0.0
    stereo_epipolar_check_px: float = 0.0

    @property
    def pairs(self):
        """``[(left, right)]`` of :attr:`stereo_pairs`."""
        return parse_stereo_pairs(self.stereo_pairs)

    def needs_camera_model(self, camera):
        """Tell whether ``camera``'s outputs need its intrinsics (VINS or the stereo check)."""
        return self.vins_features or (self.stereo_epipolar_check_px > 0 and any(
            camera in pair for pair in self.pairs))


class Sink(Protocol):
    """Where the outputs go: the node's publishers or a bag (one method per output)."""

    def topic_name(self, camera, name):
        """Return the name of output ``name`` of ``camera``, for log lines."""

    def publish_keypoints(self, out):
        """Send the Keypoints of a :class:`FrameOutput`."""

    def publish_matches(self, out):
        """Send the Matches of a :class:`FrameOutput` (none for a camera's first frame)."""

    def publish_cloud(self, out):
        """Send the keypoint cloud of a :class:`FrameOutput`."""

    def publish_feature(self, camera, header, columns, camera_ids):
        """Send one VINS feature message (see :func:`xfeat_ros.runtime.vins.vins_columns`)."""

    def publish_stereo(self, left_camera, left, right, result):
        """Send the stereo Matches of two Frames (stamped with the right image)."""

    def wants_debug(self, camera):
        """Tell whether ``camera``'s debug picture has a reader now."""

    def publish_debug(self, out, canvas):
        """Send the debug picture (bgr8 array) of a :class:`FrameOutput`."""


def debug_canvas(out, color_by='score'):
    """
    Render the debug picture of a :class:`FrameOutput`: keypoints on the grey image.

    Continued tracks are drawn from their previous position.
    """
    frame, previous, matches = out.frame, out.previous, out.matches
    previous_points = current_points = continued = None
    if previous is not None and matches is not None and len(matches):
        previous_points = previous.features.keypoints[matches.idx0]
        current_points = frame.features.keypoints[matches.idx1]
        continued = out.origin[matches.idx1] == matches.idx0
    return render_debug_image(decode_image_msg(out.msg), frame.features.keypoints,
                              frame.features.scores, frame.track_ages, color_by,
                              previous_points, current_points, continued)


class FrontEnd:
    """Finish frames of :class:`CameraStream` ``streams`` into ``sink`` (see the module doc)."""

    def __init__(self, streams, config, sink, reporter, debug_color=lambda: 'score'):
        """``debug_color()`` returns the current keypoint colouring of the debug picture."""
        self.streams = streams
        self.config = config
        self.sink = sink
        self.report = reporter
        self.debug_color = debug_color
        self.pair_of = {}
        for pair in config.pairs:
            self.pair_of[pair[0]] = self.pair_of[pair[1]] = pair
        self.pending = {left: deque() for left, _ in config.pairs}  # fusion: left frames

    def finish(self, done):
        """Send every output of one frame back from the engine (its camera's frames in order)."""
        stream = self.streams[done.item.camera]
        done.item.marks['handoff'] = time.monotonic()
        out = stream.advance(done)
        done.item.marks['tracks'] = time.monotonic()
        self.sink.publish_keypoints(out)
        done.item.marks['keypoints'] = time.monotonic()
        self.sink.publish_matches(out)
        done.item.marks['publish'] = time.monotonic()
        if out.restarted:
            self._log_restart(stream, out)
        if out.size_changed:
            stream.count('matches_empty_size_change')
            self.report.warning(
                f'{self.sink.topic_name(stream.name, "image")}: image size changed from '
                f'{out.previous.shape} to {out.frame.shape}; published empty matches for this '
                'frame', key=(stream.name, 'size'))
        if self.config.keypoint_cloud:
            self.sink.publish_cloud(out)
        if self.config.vins_features:
            self._vins(stream, out)
        if self.sink.wants_debug(stream.name):
            self.sink.publish_debug(out, debug_canvas(out, self.debug_color()))
            stream.count('debug_images_rendered')
        if done.stereo is not None:
            self._stereo(done.stereo)
        stream.published(done.item, time.monotonic())
        done.item.msg = None  # the image bytes: a stereo window keeps only the frame

    def _log_restart(self, stream, out):
        """Warn that ``stream``'s stamps jumped back: tracks restart with this frame."""
        self.report.warning(
            f'{self.sink.topic_name(stream.name, "image")}: image stamp jumped back from '
            f'{stamp_ns(out.previous.stamp)} ns to {stamp_ns(out.frame.stamp)} ns (a replayed '
            'or looping bag, a camera on another clock): the stream restarts, every track ends '
            'and this frame starts new ones, published with empty matches '
            f'(stamp_jumps_back: {stream.counts()["stamp_jumps_back"]})',
            key=(stream.name, 'stamp_jump'), period_s=STAMP_JUMP_LOG_PERIOD_S)

    def flush(self):
        """Send the VINS messages of left frames still waiting for a right partner."""
        for left in self.pending:
            self._flush_vins(left)

    # -- VINS -------------------------------------------------------------------------------------
    def _vins(self, stream, out):
        """
        Send the frame's VINS features now, or (fusion, stereo left) hold them for its pair.

        With ``vins_format`` fusion a stereo left frame waits for its right
        partner or, at the latest, for the camera's next frame; a right
        camera's features travel in the left's message.
        """
        frame = out.frame
        model = stream.camera_model
        reason = model_mismatch(model, frame.shape)
        if reason is None:
            frame.vins = vins_part(model, frame, out.previous, out.origin,
                                   self.config.vins_velocity_units)
        else:
            skipped = stream.count(f'feature_skipped_{reason}')
            name = stream.name
            self.report.warning(
                f'{self.sink.topic_name(name, "feature")}: not published, '
                + ('no intrinsics yet (no intrinsics parameter and nothing on '
                   f'{self.sink.topic_name(name, "camera_info")})' if model is None else
                   f'camera_info is for {model.width}x{model.height} but the image is '
                   f'{frame.shape[1]}x{frame.shape[0]}') + f' ({skipped} frames so far)',
                key=(name, reason))
        pair = self.pair_of.get(stream.name)
        if self.config.vins_format == 'fusion' and pair is not None:
            if stream.name == pair[0]:
                self._flush_vins(pair[0])
                if frame.vins is not None:
                    self.pending[pair[0]].append(frame)
            return
        if frame.vins is not None:
            self._send_vins(stream.name, frame)

    def _send_vins(self, camera, frame, right=None, result=None):
        """Send one feature message for ``frame`` (with its stereo partner's features)."""
        fusion = self.config.vins_format == 'fusion'
        partner = None
        if right is not None:
            if right.vins is not None and len(result):
                partner = right.vins
            else:
                self.streams[camera].count('feature_stereo_right_skipped')
        columns, camera_ids = vins_columns(frame.vins, fusion, partner, result)
        self.sink.publish_feature(camera, frame.header, columns, camera_ids)

    def _flush_vins(self, left, until=None):
        """Send the pair's waiting left frames alone, in order, up to ``until`` (excluded)."""
        waiting = self.pending[left]
        while waiting and waiting[0] is not until:
            self._send_vins(left, waiting.popleft())
            self.streams[left].count('feature_stereo_unpaired')

    # -- stereo -----------------------------------------------------------------------------------
    def _stereo(self, match):
        """Check and send a stereo pair's matches (and its VINS-Fusion message)."""
        left_camera, right_camera = match.left.item.camera, match.right.item.camera
        left, right = match.left.item.frame, match.right.item.frame
        stream = self.streams[left_camera]
        if left is None or right is None:  # a side's outputs failed (counted there)
            return
        result = match.result
        if left.candidate_index is not None or right.candidate_index is not None:  # spread
            result = remap_matches(result, left.candidate_index, right.candidate_index)
        threshold = self.config.stereo_epipolar_check_px
        if threshold > 0 and len(result):
            models = [stream.camera_model, self.streams[right_camera].camera_model]
            result, rejected = verify_stereo(left.features, right.features, result, models,
                                             threshold)
            stream.count('stereo_matches_rejected_epipolar', rejected)
        self.sink.publish_stereo(left_camera, left, right, result)
        if self.config.vins_features and self.config.vins_format == 'fusion':
            waiting = self.pending[left_camera]
            if any(frame is left for frame in waiting):
                self._flush_vins(left_camera, until=left)
                waiting.popleft()
                self._send_vins(left_camera, left, right, result)
        stream.count('stereo_matches_published')
