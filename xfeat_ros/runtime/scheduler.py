# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The scheduler: per-camera queues -> groups -> engine -> finished frames.

Two threads (started by :meth:`Scheduler.start`; ``xfeat_offline`` calls
:meth:`Scheduler.process` itself instead):

- the *device* thread takes every queued frame at once (up to
  ``max_frames_in_flight``, across cameras, never waiting for more: a frame
  that reaches an idle engine is submitted at once, and frames that arrive
  while the engine works form the next group), submits the group, matches
  each frame against its camera's previous one on the engine, synchronizes
  once, reads the results back, pairs stereo frames, and hands the group on;
- the *output* thread finishes the frames of group k (tracks, messages,
  publishing) while the device thread already runs group k + 1.

Overload policy: each camera queues at most ``queue_size`` frames; a new
frame beyond that drops the oldest queued one (counted ``dropped_queue_full``),
and a finished group waits for the output thread in a hand-off of one group,
so a frame's latency stays bounded by about two engine periods.

Arming (``arm_next_frame``): a single camera's next frame enqueued on the engine
before it comes, fired by the image thread itself (:mod:`xfeat_ros.runtime.arming`).

Stamps that jump back: a frame of a camera's new timeline (:attr:`Pending.timeline`)
is planned with no previous frame (matched to nothing) and never fires an armed
chain, which would match it to the old timeline's frame on the device and continue
its track ids there.

Engine failures: only the engine's device errors
(:func:`xfeat_ros.features.engine.device_errors`) move a GPU engine to the CPU engine
(``fallback_to_cpu``), which reprocesses the group; without a fallback the
group is counted ``dropped_engine_failure`` and the scheduler stops. Any
other exception costs its group (``dropped_internal_error``), is logged with
its traceback, and the stream goes on.
"""

from collections import deque
from dataclasses import dataclass, replace
import threading
import time
import traceback

from xfeat_ros.errors import DeviceError, ImageError
from xfeat_ros.features.engine import device_errors, expect_groups, group_submit
from xfeat_ros.features.factory import cpu_engine
from xfeat_ros.features.image_codec import ImageLayout
from xfeat_ros.features.match import mutual_nn_match
from xfeat_ros.features.pipeline import MatchResult
from xfeat_ros.runtime.arming import ArmedFrames, Fired
from xfeat_ros.runtime.report import Reporter
from xfeat_ros.runtime.stream import Done

QUEUE_SIZE = 1          # frames queued per camera: the newest waits, older ones are dropped
MAX_FRAMES_IN_FLIGHT = 8
HANDOFF_GROUPS = 1      # finished groups waiting for the output thread


class EngineFailure(DeviceError):
    """The engine failed and no fallback is possible: the scheduler stops."""


@dataclass(frozen=True)
class SchedulerConfig:
    """Queue and group sizes and the fallback rule (node parameters of the same names)."""

    max_frames_in_flight: int = MAX_FRAMES_IN_FLIGHT
    queue_size: int = QUEUE_SIZE
    fallback_to_cpu: bool = True
    arm_next_frame: bool = True


@dataclass(eq=False)
class _Last:
    """A camera's newest frame on the engine side: its slot (None after a fallback)."""

    slot: object
    features: object
    shape: tuple
    like: object = None  # its image's :class:`ImageLayout`: what an armed next frame has
    timeline: int = 0    # its Pending's: a frame of another timeline is not matched to it


class Scheduler(ArmedFrames):
    """Queues, groups, slots and fallback around one engine (see the module docstring)."""

    def __init__(self, engine, streams, config=SchedulerConfig(), engine_config=None,
                 reporter=None, stereo=None, make_cpu_engine=cpu_engine):
        """
        Drive ``engine`` for the :class:`CameraStream` objects ``streams`` (name -> stream).

        ``engine_config`` (:class:`xfeat_ros.features.engine.EngineConfig`) is what
        ``make_cpu_engine`` builds the fallback engine from, with the live
        settings applied; ``stereo`` a :class:`StereoPairing` or None. Set
        ``on_done(done)``, ``on_reject(item, exc)`` and ``on_failure(exc)``
        before :meth:`start`.
        """
        self.engine = engine
        self.streams = streams
        self.config = config
        self.engine_config = engine_config
        self.report = reporter or Reporter(_null_logger())
        self.stereo = stereo
        self.make_cpu_engine = make_cpu_engine
        self.on_done = self.on_reject = self.on_failure = None
        # placement(camera): where an armed frame's features go (GpuEngine.arm), or None
        self.placement = None
        self.fallback = None   # why the engine fell back to the CPU, once it did
        self.failure = None    # why the engine stopped, once it did
        self._queues = {name: deque() for name in streams}
        self._cond = threading.Condition()
        self._handoff = deque()
        self._in_flight = 0
        self._arrivals = 0     # frames queued so far: their arrival order
        self._running = False
        self._device_done = False
        self._pending = {}     # live settings not yet applied to the engine
        self._pool = []        # free slots of the current generation
        self._generation = 0   # bumped when settings or the engine change
        self._last = {}        # camera -> _Last
        self._armed = None     # the Armed next frame on the engine, or None
        self._claimed = {}     # id(item) -> the armed slot its frame goes into
        self._fired = None     # a Fired frame submitted by put(), for the device thread
        self._engine_lock = threading.Lock()  # one caller of the engine at a time
        self._threads = []
        expect_groups(engine, self.largest_group())

    def largest_group(self):
        """Most frames one group can hold: every camera's queue full, up to the flight limit."""
        return max(1, min(self.config.max_frames_in_flight,
                          len(self.streams) * self.config.queue_size))

    # -- input side -------------------------------------------------------------------------------
    def put(self, item):
        """
        Queue an accepted frame (:class:`Pending`); return True if it dropped an older one.

        Past ``queue_size`` the camera's oldest queued frame is dropped and
        counted (``dropped_queue_full``); after :meth:`stop` the frame itself
        is counted ``dropped_shutdown``. A frame that fits the chain armed for
        it, reaching an idle scheduler, is submitted here at once (see
        :meth:`_fire_now`).
        """
        stream = self.streams[item.camera]
        with self._cond:
            if not self._running:
                stream.count('dropped_shutdown')
                return False
            early = self._may_fire(item)
            if early:
                self._in_flight += 1  # nothing else starts on the engine meanwhile
        if early and self._fire_now(item):
            return False
        with self._cond:
            if early:
                self._in_flight -= 1
            queue = self._queues[item.camera]
            dropped = len(queue) >= self.config.queue_size
            if dropped:
                queue.popleft()
                stream.count('dropped_queue_full')
            self._arrivals += 1
            queue.append((self._arrivals, item))
            self._cond.notify_all()
        return dropped

    def configure(self, **settings):
        """Change engine settings (top_k, threshold, min_cossim) before the next group."""
        with self._cond:
            self._pending.update(settings)

    def queued(self, camera):
        """Frames of ``camera`` waiting in its queue."""
        with self._cond:
            return len(self._queues[camera])

    def idle(self):
        """Tell whether no frame is queued or being processed."""
        with self._cond:
            return self._in_flight == 0 and not any(self._queues.values())

    def wait_idle(self, timeout):
        """Wait until :meth:`idle` (or ``timeout`` s); return whether it is."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._in_flight == 0 and not any(self._queues.values()), timeout)

    # -- threads ----------------------------------------------------------------------------------
    def start(self):
        """Start the device and output threads."""
        self._running = True
        self._threads = [threading.Thread(target=self._device_loop, name='xfeat_device',
                                          daemon=True),
                         threading.Thread(target=self._output_loop, name='xfeat_output',
                                          daemon=True)]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout=30.0):
        """Finish the group in flight and its outputs; count frames still queued (or fired)."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout)
        with self._engine_lock:
            self._drop_armed()  # no gate left closed on the device behind the node
        with self._cond:
            fired, self._fired = self._fired, None
            if fired is not None:  # submitted by put() after the device thread had stopped
                for item in fired.group:
                    self.streams[item.camera].count('dropped_shutdown')
                self._in_flight -= len(fired.group)
            for name, queue in self._queues.items():
                if queue:
                    self.streams[name].count('dropped_shutdown', len(queue))
                    queue.clear()
            self._cond.notify_all()

    def _take(self):
        """
        Wait for frames; take the queued ones in arrival order, up to max_frames_in_flight.

        Arrival order keeps a stereo pair's two frames ahead of either camera's
        next frame. Returns None when the scheduler stops.
        """
        limit = self.config.max_frames_in_flight
        with self._cond:
            while self._running and not any(self._queues.values()) and self._fired is None:
                self._cond.wait()
            if self._fired is not None:  # submitted by put(), counted in flight there
                fired, self._fired = self._fired, None
                return fired
            if not self._running:
                return None
            queued = sorted(entry for queue in self._queues.values() for entry in queue)
            group = [item for _, item in queued[:limit]]
            now = time.monotonic()
            for item in group:
                self._queues[item.camera].popleft()
                item.marks['queue'] = now
            self._in_flight += len(group)
            return Fired(group)

    def _settle(self, count):
        with self._cond:
            self._in_flight -= count
            self._cond.notify_all()

    def _device_loop(self):
        try:
            while True:
                taken = self._take()
                if taken is None:
                    return
                group = taken.group
                done = self._process_guarded(group, taken if taken.taken is not None else None)
                with self._cond:
                    self._in_flight -= len(group) - len(done)
                    while len(self._handoff) >= HANDOFF_GROUPS:
                        self._cond.wait()
                    if done:
                        self._handoff.append(done)
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._device_done = True
                self._cond.notify_all()

    def _process_guarded(self, group, fired=None):
        """:meth:`process`, turning failures into counts (engine failure stops the scheduler)."""
        try:
            return self.process(group, fired)
        except EngineFailure as exc:
            for item in group:
                self.streams[item.camera].count('dropped_engine_failure')
            with self._cond:
                self._running = False
            if self.on_failure is not None:
                self.on_failure(exc)
        except Exception:  # noqa: B902 - a fault costs its group, never the stream
            for item in group:
                self.streams[item.camera].count('dropped_internal_error')
            self.report.error('processing a group failed (its frames are dropped and '
                              f'counted):\n{traceback.format_exc()}', key='internal',
                              period_s=5.0)
        return []

    def _output_loop(self):
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._handoff or self._device_done)
                if not self._handoff:
                    return
                group = self._handoff.popleft()
                self._cond.notify_all()
            for done in group:
                try:
                    self.on_done(done)
                except Exception:  # noqa: B902 - one frame's outputs must not stop the rest
                    self.streams[done.item.camera].count('dropped_output_error')
                    self.report.error('publishing a frame failed (counted '
                                      f'dropped_output_error):\n{traceback.format_exc()}',
                                      key='output', period_s=5.0)
                finally:
                    self._settle(1)
            self._arm_after(group)

    # -- the engine stage (also called directly by xfeat_offline) ---------------------------------
    def process(self, group, fired=None):
        """
        Run ``group`` (a list of :class:`Pending`) through the engine; return [Done].

        Frames rejected by the engine are counted (``rejected_late``) and left
        out. On a device error the CPU fallback reprocesses the group, or
        :class:`EngineFailure` is raised. ``fired``: the group was submitted
        already (:meth:`_fire_now`); only its results are collected here.
        """
        with self._engine_lock:
            self._apply_settings()
            for _ in range(2):  # the engine, then (after a fallback) the CPU engine
                try:
                    if fired is not None:
                        done = self._collect(fired.taken, fired.last, fired.submitted)
                    else:
                        last = dict(self._last)
                        taken = self._submit(group, last)
                        done = self._collect(taken, last, time.monotonic())
                    break
                except device_errors(self.engine) as exc:
                    self._fall_back(exc)
                    fired = None  # the CPU engine runs the whole group again
            else:
                raise EngineFailure(f'the fallback engine failed too: {self.fallback}')
            if self.stereo is not None:
                for frame in done:
                    self.stereo.offer(frame, self._match_pair)
        now = time.monotonic()
        for frame in done:
            frame.item.marks['results'] = now
        return done

    def _apply_settings(self):
        with self._cond:
            pending, self._pending = self._pending, {}
        if pending:
            self._drop_armed()
            self.engine.configure(**pending)
            if self.engine_config is not None:
                self.engine_config = replace(self.engine_config, **pending)
            self._generation += 1  # slot capacity may depend on top_k
            self._pool.clear()

    def _slot(self):
        if self._pool:
            return self._pool.pop()
        slot = self.engine.alloc_slot()
        slot.generation = self._generation
        return slot

    def _release(self, slot):
        if slot is not None and slot.generation == self._generation:
            self._pool.append(slot)

    def _submit(self, group, last):
        """Submit ``group`` (a fitting frame fires the armed chain); [(item, entry, previous)]."""
        engine = self.engine
        armed, self._armed = self._armed, None
        if armed is not None and len(group) == 1 and armed.fits(group[0]):
            self._claimed[id(group[0])] = armed.slot
        elif armed is not None:
            self._release(armed.slot)  # the engine cancels the chain at its next call
            self.streams[armed.camera].count('armed_frame_unused')
        try:
            taken = self._submit_group(group, last) if group_submit(engine) else None
            if taken is None:
                taken = self._submit_each(group, last)
        finally:
            self._claimed.clear()
        return taken

    def _collect(self, taken, last, submitted):
        """Synchronize, read back; commit the cameras' newest slots (``last``) on success."""
        engine = self.engine
        engine.synchronize()
        synchronized = time.monotonic()
        for item, _, _ in taken:
            item.marks.update(submit=submitted, device=synchronized)
        done = []
        results = engine.results([entry.slot for _, entry, _ in taken])
        for (item, entry, previous), (features, matches) in zip(taken, results):
            entry.features = features
            if previous is None:
                matches = None
            elif previous.slot is None:  # the previous frame lives on another engine (fallback)
                matches = engine.match_features(previous.features, entry.features)
            done.append(Done(item, entry.features, matches))
        kept = {id(entry.slot) for entry in last.values()}
        for entry in list(self._last.values()) + [entry for _, entry, _ in taken]:
            if id(entry.slot) not in kept:
                self._release(entry.slot)
        self._last = last
        return done

    def _plan(self, item, last):
        """
        Slot and comparable previous frame of ``item``; record it as its camera's newest.

        Comparable: the same image size and the same timeline (no stamp jump back between).
        """
        previous = last.get(item.camera)
        if previous is not None and (previous.shape != item.shape
                                     or previous.timeline != item.timeline):
            previous = None
        slot = self._claimed.pop(id(item), None)
        entry = _Last(self._slot() if slot is None else slot, None, item.shape,
                      ImageLayout.of(item.msg), item.timeline)
        last[item.camera] = entry
        return entry, previous

    def _submit_each(self, group, last):
        taken = []
        for item in group:
            before = last.get(item.camera)
            entry, previous = self._plan(item, last)
            try:
                self.engine.submit(item.msg, entry.slot)
            except ImageError as exc:
                self._release(entry.slot)
                self._restore(last, item.camera, before)
                self._reject(item, exc)
                continue
            if previous is not None and previous.slot is not None:
                self.engine.submit_match(previous.slot, entry.slot)
            taken.append((item, entry, previous))
        return taken

    def _submit_group(self, group, last):
        """One ``submit_group`` call; None (nothing enqueued) when a frame is bad."""
        trial = dict(last)
        taken = [(item, *self._plan(item, trial)) for item in group]
        if any(previous is not None and previous.slot is None for _, _, previous in taken):
            for _, entry, _ in taken:
                self._release(entry.slot)
            return None  # a previous frame without a slot: submitted one by one
        # One frame after its camera's previous one goes with its match in one call: the
        # form an armed chain (the same slot and previous slot) is fired by.
        chained = (len(taken) == 1 and taken[0][2] is not None and self._arming())
        try:
            group_submit(self.engine)([item.msg for item, _, _ in taken],
                                      [entry.slot for _, entry, _ in taken],
                                      **({'previous': taken[0][2].slot, 'chain': True}
                                         if chained else {}))
        except ImageError:
            for _, entry, _ in taken:
                self._release(entry.slot)
            return None
        for _, entry, previous in taken if not chained else ():
            if previous is not None:
                self.engine.submit_match(previous.slot, entry.slot)
        last.update(trial)
        return taken

    @staticmethod
    def _restore(last, camera, before):
        if before is None:
            last.pop(camera, None)
        else:
            last[camera] = before

    def _reject(self, item, exc):
        self.streams[item.camera].reject(exc, late=True)
        if self.on_reject is not None:
            self.on_reject(item, exc)

    def _fall_back(self, exc):
        """Replace a failed GPU engine by the CPU engine, or raise :class:`EngineFailure`."""
        engine = self.engine
        where = f'engine {engine.name} on {engine.device}'
        if engine.device == 'cpu' or not self.config.fallback_to_cpu \
                or self.engine_config is None:
            self.failure = f'{where} failed: {exc!r}'
            self.report.error(f'{self.failure}; stopping (fallback_to_cpu is off or the '
                              'engine is already on the CPU)')
            raise EngineFailure(self.failure) from exc
        self.report.error(f'{where} failed: {exc!r}; falling back to onnxruntime on the CPU')
        self.fallback = f'{engine.name} on {engine.device} failed ({type(exc).__name__}); on CPU'
        self.engine = self.make_cpu_engine(self.engine_config)
        self._armed = None  # on the failed engine
        self._generation += 1
        self._pool.clear()
        # Host features stay valid; the failed engine's slots do not.
        self._last = {camera: _Last(None, entry.features, entry.shape, timeline=entry.timeline)
                      for camera, entry in self._last.items()}

    def _match_pair(self, left, right):
        """Stereo matches of two Done frames on the engine (host matching on a device error)."""
        try:
            return self.engine.match_features(left.features, right.features)
        except device_errors(self.engine) as exc:
            self.streams[left.item.camera].count('stereo_engine_errors')
            self.report.error(f'stereo {left.item.camera}:{right.item.camera}: engine matching '
                              f'failed ({exc!r}); matched on the CPU instead', key='stereo')
            cossim = self.engine_config.min_cossim if self.engine_config else 0.0
            return MatchResult(*mutual_nn_match(left.features.descriptors,
                                                right.features.descriptors, cossim))


def _null_logger():
    from xfeat_ros.logs import package_logger
    return package_logger('xfeat_ros.runtime')
