# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The scheduler's armed next frame (``arm_next_frame``, an engine with ``arm``).

With the GPU engine (the only one with ``arm``): when the only camera's
one-frame group has been published and nothing waits, the output thread
enqueues that camera's next frame on the engine before it exists
(:meth:`xfeat_ros.features.gpu.engine.GpuEngine.arm`, the chain behind a gate on the
device) into a slot reserved for it; a next frame that fits is then submitted
into that slot with its match chained, which opens the gate instead of
launching the chain. The image thread does that itself, in the scheduler's
``put``, when nothing else waits or runs, so that the device starts while the
device thread wakes for the frame (which then only collects it). Anything
else (another camera, a new size, new settings, a stamp that jumped back: the
chain would match it to the old timeline's frame and continue its tracks)
releases the slot, and the engine cancels the chain on its next call. Calls
on the engine hold one lock, so arming never overlaps a group.

:class:`ArmedFrames` holds this part of :class:`xfeat_ros.runtime.scheduler.Scheduler`
(its base class): the methods read and write the scheduler's queues, lock and
slots as the scheduler's own do.
"""

from dataclasses import dataclass
import time
import traceback


@dataclass(frozen=True)
class Armed:
    """The next frame armed on the engine: its camera, reserved slot, size and timeline."""

    camera: str
    slot: object
    shape: tuple
    timeline: int  # of the frame it matches against: a frame of another one does not fit

    def fits(self, item):
        """Tell whether the :class:`Pending` ``item`` is the frame this chain was armed for."""
        return (item.camera, item.shape, item.timeline) == (self.camera, self.shape,
                                                            self.timeline)


@dataclass(eq=False)
class Fired:
    """A group the device thread takes: queued frames, or one submitted by put() already."""

    group: list
    taken: list = None   # [(item, entry, previous)] once submitted
    last: dict = None    # the cameras' newest frames including it, committed when collected
    submitted: float = 0.0


class ArmedFrames:
    """Arming, firing and dropping a single camera's next frame (see the module docstring)."""

    def _arm_after(self, group):
        """
        Arm the only camera's next frame after its one-frame ``group`` was published.

        Only when nothing waits or runs (a frame arriving meanwhile waits for
        the engine lock, then fires the chain if it fits). A failure to arm
        costs nothing but the lead: it is reported and the next frame takes
        the ordinary path.
        """
        if len(group) != 1 or not self._arming():
            return
        arm = self.engine.arm
        camera = group[0].item.camera
        with self._engine_lock:
            with self._cond:
                if (not self._running or self._in_flight or any(self._queues.values())
                        or self._pending):
                    return
            entry = self._last.get(camera)
            if entry is None or entry.slot is None or entry.like is None or self._armed:
                return
            slot = self._slot()
            place = self.placement(camera) if self.placement is not None else None
            try:
                armed = arm(entry.like, slot, previous=entry.slot, placement=place,
                            tracks=self.streams[camera].track_state())
            except Exception:  # noqa: B902 - arming is an optimisation; the frame path stays
                armed = False
                self.report.error('arming the next frame failed (the next frame takes the '
                                  f'ordinary path):\n{traceback.format_exc()}', key='arm',
                                  period_s=5.0)
            if armed:
                self._armed = Armed(camera, slot, entry.shape, entry.timeline)
                self.streams[camera].count('next_frame_armed')
            else:
                self._release(slot)

    def _arming(self):
        """Tell whether this scheduler arms next frames: on, one camera, an engine that can."""
        return (self.config.arm_next_frame and len(self.streams) == 1 and self.stereo is None
                and self.engine.capabilities.arming)

    def _drop_armed(self):
        """Forget the armed frame (its slot back to the pool); the engine cancels its chain."""
        armed, self._armed = self._armed, None
        if armed is not None:
            self.streams[armed.camera].count('armed_frame_unused')
            if self.engine.capabilities.arming:
                self.engine.disarm()
            self._release(armed.slot)

    def _may_fire(self, item):
        """Tell (under the condition) whether ``item`` may fire the armed chain at once."""
        armed = self._armed
        return (armed is not None and armed.fits(item)
                and self._in_flight == 0 and self._fired is None and not self._pending
                and not any(self._queues.values()))

    def _fire_now(self, item):
        """
        Submit ``item`` through its armed chain on the calling (image) thread.

        The chain then runs on the device while the device thread wakes up
        for it (docs/design-notes.md), instead of after. Returns
        False, changing nothing, when the engine is busy or the chain gone:
        the frame is then queued as usual.
        """
        if not self._engine_lock.acquire(blocking=False):
            return False
        try:
            armed = self._armed
            if armed is None or not armed.fits(item):
                return False
            item.marks['queue'] = time.monotonic()
            last = dict(self._last)
            try:
                taken = self._submit([item], last)
            except Exception as exc:  # noqa: B902 - the device thread meets it again, or not
                self.report.warning(f'submitting an armed frame at receipt failed ({exc!r}); '
                                    'the device thread submits it', key='fire', period_s=5.0)
                return False
            with self._cond:
                self._fired = Fired([item], taken, last, time.monotonic())
                self._cond.notify_all()
            self.streams[item.camera].count('submitted_at_receipt')
            return True
        finally:
            self._engine_lock.release()
