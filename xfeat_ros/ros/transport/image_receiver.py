# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Image subscriptions served by a thread of their own, beside rclpy's executor.

rclpy's single-threaded executor rebuilds its wait set in Python on every
``spin_once``: every subscription, timer, service (the node's parameter
services), guard condition and event handler is entered, counted and added
again, and the taken message is wrapped in a task. Per image that is Python
work under the interpreter lock after the node's callback has queued the
frame, so the engine's thread, woken by that frame, waits for the executor
to reach its next wait before it can submit (the ``queue`` stage,
docs/design-notes.md).

:class:`ImageReceiver` takes the node's image subscriptions out of the
executor (their callback group :data:`OUTSIDE` is one no executor runs) and
waits on just them in one thread: a wait set built once per change of the
subscriptions, every message a subscription holds taken when it is ready, the
callback called with ``(raw payload, message info)`` as the executor would. The
payload is rclpy's ``bytes``, or, given ``rcl`` (:func:`.rcl_io.load`) and
``buffers`` (the GPU engine's pinned image buffers), a view of the buffer that rmw
copied the sample into (:mod:`.rcl_io`: two copies of every image fewer). The
subscriptions' QoS event handlers are served here too (see :meth:`subscribe`);
the executor keeps everything else (parameters, timers, camera_info).
"""

from contextlib import ExitStack
import threading
import time
import traceback

from rclpy.callback_groups import CallbackGroup
from rclpy.exceptions import InvalidHandle
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

from xfeat_ros.errors import TransportError
from xfeat_ros.ros.transport.rcl_io import serialized_taker

WAIT_TIMEOUT_NS = 100_000_000  # wake up this often to see a stop or a shut-down context
RETRY_S = 0.1  # after a failed wait


class _Outside(CallbackGroup):
    """A callback group that no executor runs: its entities are served by an ImageReceiver."""

    def can_execute(self, entity):
        """No executor runs these entities."""
        return False

    def beginning_execution(self, entity):
        """No executor runs these entities."""
        return False

    def ending_execution(self, entity):
        """No executor runs these entities."""


OUTSIDE = _Outside()


def _valid(handle):
    """Tell whether an rclpy handle can still be used (not destroyed)."""
    try:
        with handle:
            return True
    except InvalidHandle:
        return False


class ImageReceiver:
    """One thread that takes the messages of a node's raw image subscriptions."""

    def __init__(self, node, on_error=None, rcl=None, buffers=None):
        """
        Serve subscriptions of ``node``; ``on_error(text)`` hears a callback's exception.

        ``rcl`` (:class:`xfeat_ros.ros.transport.rcl_io.Rcl` or None) and ``buffers(nbytes)``
        take through rcl's own call into those buffers (see the module).
        """
        self._node = node
        self._rcl = rcl
        self._buffers = buffers
        self._context = node.context
        self._on_error = on_error or node.get_logger().error
        # subscription -> (callback(payload, info), taker, topic: named once it is gone)
        self._callbacks = {}
        self._lock = threading.Lock()
        self._changed = False
        self._stopping = False
        self._wake = node.create_guard_condition(lambda: None, callback_group=OUTSIDE)
        self._thread = threading.Thread(target=self._run, name='xfeat_images', daemon=True)

    @property
    def take(self):
        """Say how images are taken: into the engine's buffers through rcl, or by rclpy."""
        if self._rcl is not None and self._buffers is not None:
            return "rcl's take, into the engine's pinned buffers"
        return "rclpy's take"

    def start(self):
        """Start serving (subscriptions made before wait until then)."""
        self._thread.start()

    def subscribe(self, msg_type, topic, callback, qos, event_callbacks=None):
        """
        Create a raw subscription served here; returns it.

        ``callback(payload, info)`` runs on this receiver's thread, and so do
        the callbacks of ``event_callbacks`` (the subscription's QoS events).
        """
        subscription = self._node.create_subscription(
            msg_type, topic, callback, qos, event_callbacks=event_callbacks, raw=True)
        # Out of the executor's wait set, and its QoS event handlers too: they share the
        # reader's status condition, which wakes a wait set holding them on every message,
        # so an executor waiting on them alone would spin while images are in flight.
        subscription.callback_group = OUTSIDE
        for handler in subscription.event_handlers:
            handler.callback_group = OUTSIDE
        with self._lock:
            self._callbacks[subscription] = (
                callback, serialized_taker(subscription, self._rcl, self._buffers),
                subscription.topic_name)
            self._changed = True
        self._wake.trigger()
        return subscription

    def unsubscribe(self, subscription):
        """Stop serving ``subscription`` and destroy it."""
        with self._lock:
            self._callbacks.pop(subscription, None)
            self._changed = True
        self._wake.trigger()
        self._node.destroy_subscription(subscription)

    def stop(self, timeout=5.0):
        """Stop the thread (the subscriptions stay, unserved)."""
        with self._lock:
            self._stopping = True
        if self._thread.is_alive():
            try:
                self._wake.trigger()
            except InvalidHandle:
                pass
            self._thread.join(timeout)

    def _running(self):
        """Tell whether the thread should go on."""
        return not self._stopping and self._context.ok()

    def _run(self):
        while self._running():
            with self._lock:
                callbacks = list(self._callbacks.items())
                self._changed = False
            try:
                self._serve(callbacks)
            except InvalidHandle:
                # a subscription went away: rebuild the wait set (unsubscribe() has said so)
                if not self._let_go_of_destroyed():
                    return
            except (_rclpy.RCLError, TransportError) as exc:
                if not self._running():
                    return  # the context was shut down under the wait
                # Never a silent end of image receipt: say it, wait a little, wait again.
                self._on_error(f'waiting for images failed: {exc}; retrying')
                time.sleep(RETRY_S)
            except Exception:  # noqa: B902 - a take's buffer or a bug: receipt must go on
                if not self._running():
                    return
                self._on_error(f'taking images failed: {traceback.format_exc()}; retrying')
                time.sleep(RETRY_S)

    def _let_go_of_destroyed(self):
        """
        After an invalid handle: drop subscriptions destroyed past :meth:`unsubscribe`.

        Returns whether the wait set can be rebuilt. Without this, a
        subscription destroyed elsewhere would fail every rebuild at once (a
        busy loop under the interpreter lock). If the node itself is gone
        (its guard condition destroyed), image receipt ends and says so.
        """
        with self._lock:
            if self._changed:
                return True   # unsubscribe() changed the set: the rebuild takes it in
            for subscription, (_, _, topic) in list(self._callbacks.items()):
                if not _valid(subscription.handle):
                    del self._callbacks[subscription]
                    self._on_error(f'{topic}: its subscription was destroyed outside the image '
                                   'receiver; no longer served')
                    self._changed = True
            if self._changed:
                return True
            if not _valid(self._wake.handle):
                self._stopping = True
                self._on_error('the node was destroyed under the image receiver; image '
                               'receipt ends')
                return False
        time.sleep(RETRY_S)   # a handle rclpy is replacing: look again shortly
        return True

    def _serve(self, callbacks):
        """Wait on ``callbacks``' subscriptions until they change or the receiver stops."""
        handlers = [h for subscription, _ in callbacks for h in subscription.event_handlers]
        with ExitStack() as entered:
            for subscription, _ in callbacks:
                entered.enter_context(subscription.handle)
            for handler in handlers:
                entered.enter_context(handler)
            entered.enter_context(self._wake.handle)
            entered.enter_context(self._context.handle)
            wait_set = _rclpy.WaitSet(len(callbacks), 1, 0, 0, 0, len(handlers),
                                      self._context.handle)
            while self._running() and not self._changed:
                wait_set.clear_entities()
                for subscription, _ in callbacks:
                    wait_set.add_subscription(subscription.handle)
                for handler in handlers:
                    handler.add_to_wait_set(wait_set)
                wait_set.add_guard_condition(self._wake.handle)
                wait_set.wait(WAIT_TIMEOUT_NS)
                ready = set(wait_set.get_ready_entities('subscription'))
                for subscription, (callback, taker, _) in callbacks:
                    if subscription.handle.pointer in ready:
                        self._take_all(taker, callback)
                for handler in handlers:
                    if handler.is_ready(wait_set):
                        self._handle_event(handler)

    def _handle_event(self, handler):
        """Call a QoS event handler's callback with its event, as the executor would."""
        event = handler.take_data()
        if event:
            try:
                handler.callback(event)
            except Exception:  # noqa: B902 - the thread must go on
                self._on_error(f'QoS event callback failed: {traceback.format_exc()}')

    def _take_all(self, taker, callback):
        """Hand every message ``taker``'s subscription holds to ``callback``."""
        while True:
            taken = taker.take()
            if taken is None:
                return
            try:
                callback(*taken)
            except Exception:  # noqa: B902 - the thread must go on; the node counts its own
                self._on_error(f'image callback failed: {traceback.format_exc()}')
