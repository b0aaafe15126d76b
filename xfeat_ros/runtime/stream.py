# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
One camera's stream: receipt checks, counters, frame records and tracks.

A camera's image becomes a :class:`Pending` when :meth:`CameraStream.accept`
takes it (header checks, stamp order), a :class:`Done` once the engine has
its features and matches, and a :class:`Frame` (with track ids) when
:meth:`CameraStream.advance` continues the camera's tracks. Counters are
thread-safe: receipt, scheduling and outputs may run on different threads.

Stamp order: a stamp must be later than the camera's previous one. A repeated
stamp, or one earlier by at most :data:`STAMP_JUMP_TOLERANCE_S`, is rejected
(:class:`xfeat_ros.errors.StampOrderError`); a stamp earlier by more than that
(a bag replayed or looping, a camera restarted on another clock, sim time
reset) restarts the camera's stream: the image is accepted on a new
*timeline* (:attr:`Pending.timeline`), counted ``stamp_jumps_back``, and no
frame of a new timeline is matched to, continues tracks from, or is stereo
paired with the camera's frames of an older one.
"""

from collections import Counter, deque
from dataclasses import dataclass, field
from statistics import median
import threading
import time

import numpy as np

from xfeat_ros.errors import ImageError, StampOrderError
from xfeat_ros.features.carry import (carry_tracks, lost_tracks, with_carried,
                                      with_continuations)
from xfeat_ros.features.image_codec import validate_layout
from xfeat_ros.features.match import mutual_nn_match
from xfeat_ros.features.preprocess import model_size
from xfeat_ros.features.spread import (published_index, remap_matches, select_spread,
                                       take_features)
from xfeat_ros.features.tracks import continued_tracks, next_tracks, track_origin

TIMING_WINDOW = 200  # published frames kept for the rate, latency and stage figures
# Stages of a frame's latency, each from the previous mark to its own (see Pending.marks):
# transport (image stamp -> receipt, wall clock: meaningful when the camera stamps with
# this machine's clock), queue (-> taken into a group), submit (-> the group is enqueued on
# the engine: host work; the CPU engine computes here), device (-> the engine's synchronize
# returns), results (-> features and matches are on the host, stereo matched), handoff
# (-> the output thread starts the frame), tracks (-> track ids assigned), keypoints
# (-> Keypoints serialized and handed to the middleware: what most readers wait for), publish
# (-> Matches too), output (-> every other output sent).
STAGES = ('transport', 'queue', 'submit', 'device', 'results', 'handoff', 'tracks', 'keypoints',
          'publish', 'output')
# The transport stage in three parts, from the DDS timestamps of the image's message info
# (same machine, same clock): the camera's own time from its stamp to its DDS write
# (conversion and serialization in the driver), the middleware's delivery into the node's
# reader, and the node's take (its image thread waking, the copy out of the middleware).
TRANSPORT_PARTS = ('transport_camera', 'transport_dds', 'transport_take')
TRANSPORT_MAX_MS = 10_000.0  # older (or future) stamps come from another clock: not counted
# A stamp earlier than the camera's previous one by more than this restarts the camera's
# stream (a replayed or looping bag, another clock); up to it, it is rejected as out of order.
STAMP_JUMP_TOLERANCE_S = 0.1
STAMP_JUMP_TOLERANCE_NS = int(round(STAMP_JUMP_TOLERANCE_S * 1e9))


def stamp_ns(stamp):
    """Integer nanoseconds of a ``builtin_interfaces/Time``."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def check_image(msg, last_stamp_ns):
    """
    Raise the :class:`xfeat_ros.errors.ImageError` for an image rejected on receipt.

    Checks the header against the data, the 32 px minimum, and that a non-zero
    stamp is later than ``last_stamp_ns`` or earlier by more than
    :data:`STAMP_JUMP_TOLERANCE_S` (a jump back: the caller restarts the
    camera's stream). Returns the stamp in nanoseconds.
    """
    # pixels decoded on the device (a GPU engine's JPEG decoder) are not read back to count them
    size = msg.nbytes if getattr(msg, 'device_pixels', None) is not None else len(msg.data)
    validate_layout(msg.encoding, msg.height, msg.width, msg.step, size)
    model_size(msg.height, msg.width)
    stamp = stamp_ns(msg.header.stamp)
    if stamp and last_stamp_ns - STAMP_JUMP_TOLERANCE_NS <= stamp <= last_stamp_ns:
        raise StampOrderError(f'stamp {stamp} ns is not later than the previous image stamp '
                              f'{last_stamp_ns} ns (repeated, or out of order by at most '
                              f'{STAMP_JUMP_TOLERANCE_S} s; a jump back beyond that restarts '
                              'the stream)')
    return stamp


def transport_parts(stamp, info, now_ns):
    """
    Split an image's transport into :data:`TRANSPORT_PARTS` (ms), or return None.

    ``info``: rclpy's message info (``source_timestamp``: the writer's clock
    when the sample was written, ``received_timestamp``: when the node's
    reader got it); None where either is missing or the times are out of
    order (another machine's clock).
    """
    source = (info or {}).get('source_timestamp') or 0
    reader = (info or {}).get('received_timestamp') or 0
    if not stamp or not source or not stamp <= source <= reader <= now_ns:
        return None
    return ((source - stamp) / 1e6, (reader - source) / 1e6, (now_ns - reader) / 1e6)


@dataclass(eq=False)
class Pending:
    """
    An accepted image waiting for the engine: camera name, message, receipt time (s).

    ``msg`` is dropped (None) once the frame's outputs are sent; ``frame``
    keeps its header. ``timeline`` counts the camera's stamp jumps back before
    it: a frame is matched to and continues the tracks of earlier frames of
    its own timeline only; ``restart`` marks the image whose stamp jumped back.
    """

    camera: str
    msg: object
    received: float
    frame: object = None  # its Frame, once finished
    transport_ms: float = None  # receipt wall time - image stamp (None: no stamp)
    transport_parts: tuple = None  # ms of TRANSPORT_PARTS (None: no stamp or DDS timestamps)
    marks: dict = field(default_factory=dict)  # stage -> monotonic s at its end
    timeline: int = 0      # the camera's stamp jumps back before this image
    restart: bool = False  # this image's stamp jumped back: it starts its timeline

    @property
    def shape(self):
        """``(height, width)`` of the image."""
        return (self.msg.height, self.msg.width)


@dataclass(eq=False)
class Done:
    """
    A frame back from the engine.

    ``matches`` against the camera's previous frame (None: no previous frame
    of the same size); ``stereo`` the :class:`xfeat_ros.runtime.stereo.StereoMatch`
    this frame completed, if any.
    """

    item: Pending
    features: object
    matches: object = None
    stereo: object = None


@dataclass(eq=False)
class Frame:
    """
    A finished frame of a camera: image header, host features, size, tracks, timeline.

    ``candidate_index``: where the engine's features were spread candidates
    (:mod:`xfeat_ros.features.spread`), int64 [candidates] with each one's
    index in ``features`` (-1: dropped), which carries the engine's matches
    of this frame (next frame, stereo) to the published keypoints; else None.
    ``track_carried``: uint32 [N], frames in a row each keypoint's track was
    carried through the dense map (:mod:`xfeat_ros.features.carry`; 0: detected),
    where the selection carries tracks; else None.
    """

    header: object             # the image's std_msgs/Header
    features: object
    shape: tuple
    track_ids: object = None   # uint64 [N]
    track_ages: object = None  # uint32 [N]
    vins: object = None        # its VinsPart (VINS features on), or None
    timeline: int = 0          # its Pending's timeline
    candidate_index: object = None
    track_carried: object = None

    @property
    def stamp(self):
        """Return when the image was taken (its header stamp, a Time message)."""
        return self.header.stamp


@dataclass(eq=False)
class FrameOutput:
    """
    What one finished frame publishes.

    ``previous`` the camera's previous Frame (None for its first frame): a
    Matches message goes out whenever it is set, empty when ``matches`` is
    None (the image size changed, or the stamp jumped back: ``restarted``,
    ``previous`` then of the old timeline, every track new). ``origin`` int64
    [N]: per keypoint, the index in ``previous`` its track continues, -1 for a
    new track (made on first use where the engine continued the tracks: only
    the debug picture and VINS read it).
    """

    camera: str
    frame: Frame
    previous: object
    matches: object
    known_origin: object  # origin, or None: made from the matches' verified mask when asked
    msg: object        # the image message
    received: float    # receipt time (monotonic s)
    restarted: bool = False  # first published frame of a new timeline (stamps jumped back)

    @property
    def origin(self):
        """Per keypoint the index in ``previous`` its track continues, -1 for a new track."""
        if self.known_origin is None:
            self.known_origin = track_origin(len(self.frame.features), self.matches)
        return self.known_origin

    @property
    def size_changed(self):
        """Tell whether a previous frame exists but has another image size."""
        return self.previous is not None and self.previous.shape != self.frame.shape


class CameraStream:
    """
    Receipt, counters and track state of one camera.

    Receipt (:meth:`accept`) and outputs (:meth:`advance`) may run on
    different threads; each touches its own fields, counters take a lock.
    """

    def __init__(self, name):
        """Start a stream named ``name`` (no frames, zero counters)."""
        self.name = name
        self._lock = threading.Lock()
        self._counts = Counter()
        self.last_stamp_ns = 0      # newest accepted non-zero stamp (receipt side)
        self.timeline = 0           # stamp jumps back so far (receipt side)
        self.previous = None        # the last finished Frame (output side)
        self.next_track_id = 0
        self._camera_model = None
        self.published_at = deque(maxlen=TIMING_WINDOW)  # monotonic s
        self.latency_ms = deque(maxlen=TIMING_WINDOW)    # receipt -> published
        self.stage_ms = {stage: deque(maxlen=TIMING_WINDOW)
                         for stage in STAGES[:1] + TRANSPORT_PARTS + STAGES[1:]}

    # -- counters ---------------------------------------------------------------------------------
    def count(self, key, n=1):
        """Add ``n`` to counter ``key``; return its new value."""
        with self._lock:
            self._counts[key] += n
            return self._counts[key]

    def counts(self):
        """Return a copy of the counters."""
        with self._lock:
            return Counter(self._counts)

    def timings(self):
        """Return ``(published_at, latency_ms)`` lists of the last published frames."""
        with self._lock:
            return list(self.published_at), list(self.latency_ms)

    def published(self, item, now):
        """Count a published :class:`Pending` whose outputs were all sent at ``now``."""
        marks = dict(item.marks, output=now)
        with self._lock:
            self._counts['published'] += 1
            self.published_at.append(now)
            self.latency_ms.append((now - item.received) * 1000.0)
            if item.transport_ms is not None:
                self.stage_ms['transport'].append(item.transport_ms)
            for part, ms in zip(TRANSPORT_PARTS, item.transport_parts or ()):
                self.stage_ms[part].append(ms)
            before = item.received
            for stage in STAGES[1:]:
                if stage in marks:
                    self.stage_ms[stage].append((marks[stage] - before) * 1000.0)
                    before = marks[stage]

    def stage_medians(self):
        """Return ``{stage: median ms}`` over the last published frames (see STAGES)."""
        # Copies under the lock (the output thread's published() waits for it), then one sort
        # each: np.median's per-call cost made this ~0.5 ms a camera (docs/design-notes.md).
        with self._lock:
            windows = [(stage, list(values)) for stage, values in self.stage_ms.items() if values]
        return {stage: float(median(values)) for stage, values in windows}

    @property
    def camera_model(self):
        """Return the camera's :class:`~xfeat_ros.features.camera.CameraModel` (None: unknown)."""
        with self._lock:
            return self._camera_model

    @camera_model.setter
    def camera_model(self, model):
        with self._lock:
            self._camera_model = model

    # -- receipt ----------------------------------------------------------------------------------
    def accept(self, msg, received, parse=None, info=None):
        """
        Check an image on receipt; return its :class:`Pending`.

        ``parse`` turns ``msg`` into an Image-like object first (the node's raw
        subscription passes :func:`xfeat_ros.ros.transport.cdr.parse_image`); ``info``, the
        subscription's message info, splits the transport stage (see
        :func:`transport_parts`). Counts
        ``received``, then ``accepted`` or ``rejected`` and ``rejected_<Error>``;
        re-raises the :class:`xfeat_ros.errors.ImageError`. A stamp that jumps
        back beyond :data:`STAMP_JUMP_TOLERANCE_S` starts a new timeline
        (``restart`` set) and is counted ``stamp_jumps_back``.
        """
        self.count('received')
        try:
            if parse is not None:
                msg = parse(msg)
            stamp = check_image(msg, self.last_stamp_ns)
        except ImageError as exc:
            self.reject(exc)
            raise
        restart = 0 < stamp < self.last_stamp_ns  # past check_image: beyond the tolerance
        if restart:
            self.timeline += 1
            self.count('stamp_jumps_back')
        if stamp:
            self.last_stamp_ns = stamp
        self.count('accepted')
        now = time.time_ns()
        transport = (now - stamp) / 1e6 if stamp else None
        if transport is not None and not 0.0 <= transport <= TRANSPORT_MAX_MS:
            transport = None  # sim time, a replayed bag: not this machine's clock
        parts = transport_parts(stamp, info, now) if transport is not None else None
        return Pending(self.name, msg, received, transport_ms=transport, transport_parts=parts,
                       timeline=self.timeline, restart=restart)

    def reject(self, exc, late=False):
        """Count a rejected image (``late``: by the engine, after it was accepted)."""
        kind = type(exc).__name__
        with self._lock:
            self._counts['rejected'] += 1
            if late:
                self._counts['rejected_late'] += 1
            self._counts[f'rejected_{kind}'] += 1
            return self._counts[f'rejected_{kind}']

    def track_state(self):
        """
        ``(ids, ages, next_id, frame)`` the camera's next frame continues, or None.

        The last finished frame's track ids and ages and the next new id, for
        an engine that continues them itself (an armed GPU frame): its result
        counts only while this is still the state (:func:`continued_tracks`).
        None after a spread selection too: that frame's ids follow its published
        keypoints, not the engine's candidates.
        """
        frame = self.previous
        if frame is None or frame.candidate_index is not None:
            return None
        return frame.track_ids, frame.track_ages, self.next_track_id, frame

    # -- outputs ----------------------------------------------------------------------------------
    def advance(self, done):
        """
        Continue the camera's tracks with a frame back from the engine.

        Returns its :class:`FrameOutput`; the new Frame becomes ``previous``.
        The first frame of a new timeline (the stamps jumped back) ends every
        track: it is matched to nothing and its keypoints take new ids (ids are
        never reused). Spread candidates (``done.features.spread`` set) are
        narrowed to the kept keypoints here, once their tracks are known; the
        matches then run between the two frames' published keypoints.
        """
        item = done.item
        previous = self.previous
        matches = done.matches
        restarted = previous is not None and previous.timeline != item.timeline
        if restarted:
            matches = None
        base = None if restarted else previous  # the frame whose tracks this one continues
        features, candidate_index = done.features, None
        if matches is not None and base is not None and base.candidate_index is not None:
            matches = remap_matches(matches, index0=base.candidate_index)  # to its published
        carried = None
        if getattr(features, 'spread', None) is not None:  # spread candidates: keep some
            features, ids, ages, origin, candidate_index, matches, carried = self._spread(
                done, base, matches)
        else:
            continued = continued_tracks(matches, base, self.next_track_id)
            if continued is not None:   # the engine's (an armed GPU frame), origin when asked
                ids, ages, self.next_track_id = continued
                origin = None
                self.count('tracks_from_engine')
            else:
                ids, ages, self.next_track_id, origin = next_tracks(
                    features, self.next_track_id, base, matches,
                    verified=None if matches is None else matches.verified)
        frame = Frame(item.msg.header, features, item.shape, ids, ages,
                      timeline=item.timeline, candidate_index=candidate_index,
                      track_carried=carried)
        item.frame = frame
        self.previous = frame
        return FrameOutput(self.name, frame, previous, matches, origin, item.msg, item.received,
                           restarted)

    def _spread(self, done, base, matches):
        """
        Keep a frame's spread candidates, tracked ones first (:mod:`xfeat_ros.features.spread`).

        ``matches`` run from ``base``'s published keypoints to the candidates.
        The tracks are continued on the candidates (and, with carried tracks,
        the lost ones looked for in the frame's dense map and added), the kept
        ones selected, then the new tracks among them numbered. Returns
        ``(features, ids, ages, origin, candidate_index, matches, carried)``
        of the kept keypoints (``carried`` None without carried tracks).
        """
        candidates = done.features
        spread = candidates.spread
        carry = (spread.carry_frames > 0 and candidates.dense is not None and base is not None
                 and matches is not None)
        if carry:  # against every published keypoint of base, carried ones included
            matches = type(matches)(*mutual_nn_match(base.features.descriptors,
                                                     candidates.descriptors, spread.min_cossim))
        count = len(candidates)
        _, ages, _, origin = next_tracks(
            candidates, self.next_track_id, base, matches,
            verified=None if matches is None or carry else matches.verified)
        streak = None
        if spread.carry_frames > 0:
            streak = np.zeros(count, dtype=np.uint32)
        if carry:
            candidates, ages, origin, streak = self._carry(base, candidates, ages, origin,
                                                           streak, spread.carry_frames)
        tracked = origin >= 0
        selected = None if carry else candidates.selected  # made on the engine's device
        if selected is not None and selected.made_with(ages, tracked):
            kept = selected.kept
            self.count('spread_selected_on_device')
        else:
            if selected is not None:  # the device's chain of tracks parted from this stream's
                self.count('spread_selected_on_host')
            kept = select_spread(candidates.keypoints, candidates.scores, ages, tracked, spread)
        index = published_index(len(candidates), kept)
        origin, ages = origin[kept], ages[kept]
        ids = np.zeros(len(kept), dtype=np.uint64)
        continues = origin >= 0
        if continues.any():
            ids[continues] = base.track_ids[origin[continues]]
        fresh = np.nonzero(~continues)[0]
        ids[fresh] = np.arange(self.next_track_id, self.next_track_id + len(fresh),
                               dtype=np.uint64)
        self.next_track_id += len(fresh)
        self.count('spread_dropped', len(candidates) - len(kept))
        published = take_features(candidates, kept)
        if matches is not None:
            matches = remap_matches(matches, index1=index)
            if carry:
                matches = with_continuations(matches, origin, base.features.descriptors,
                                             published.descriptors)
        return (published, ids, ages, origin, index[:count], matches,
                None if streak is None else streak[kept])

    def _carry(self, base, candidates, ages, origin, streak, carry_frames):
        """
        Look for ``base``'s lost tracks in the candidates' dense map.

        See :mod:`xfeat_ros.features.carry`.

        Returns the candidates with the carried keypoints appended, and their
        ``ages``, ``origin`` and ``streak`` (frames in a row carried); a track
        found on a detection continues there.
        """
        tracked = np.nonzero(origin >= 0)[0]
        previous = base.features
        lost = lost_tracks(len(previous), origin, base.track_carried, carry_frames)
        carried = carry_tracks(previous.keypoints, previous.descriptors, lost,
                               previous.keypoints[origin[tracked]],
                               candidates.keypoints[tracked], candidates.dense,
                               candidates.image_hw[:2], candidates.keypoints, origin >= 0)
        snapped_source, snapped_target = carried.snapped_source, carried.snapped_target
        origin[snapped_target] = snapped_source
        ages[snapped_target] = base.track_ages[snapped_source] + 1
        self.count('tracks_carried', len(carried))
        self.count('tracks_found_on_detection', len(snapped_source))
        previous_streak = (np.zeros(len(previous), np.uint32) if base.track_carried is None
                           else base.track_carried)
        return (with_carried(candidates, carried, previous.scores),
                np.concatenate([ages, base.track_ages[carried.source] + 1]).astype(np.uint32),
                np.concatenate([origin, carried.source]).astype(np.int64),
                np.concatenate([streak, previous_streak[carried.source] + 1]).astype(np.uint32))
