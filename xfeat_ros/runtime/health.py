# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
A camera stream's health as the node reports it on ``/diagnostics``, without ROS.

:func:`stream_health` turns a stream's counters and the node's state into a
level (``'OK'``, ``'WARN'``, ``'ERROR'``: the names of diagnostic_msgs'
levels) and a message; :func:`recent_rate` and :func:`latency_values` give
the rate and latency entries of the status. The node wraps them in a
``DiagnosticStatus`` (``XFeatNode.camera_status``).
"""

WINDOW_S = 5.0   # the output rate is measured over the frames published this recently
# counters of frames that reached no subscriber (each is also counted under its own name)
LOST = ('dropped_queue_full', 'dropped_shutdown', 'dropped_engine_failure',
        'dropped_internal_error', 'dropped_output_error', 'lost_before_node')


def recent_rate(published_at, now, window_s=WINDOW_S):
    """Frames a second over the publication times within ``window_s`` of ``now`` (0 if < 2)."""
    recent = [t for t in published_at if now - t <= window_s]
    if len(recent) > 1 and recent[-1] > recent[0]:
        return (len(recent) - 1) / (recent[-1] - recent[0])
    return 0.0


def latency_values(latency_ms):
    """Return the median and largest latency as /diagnostics strings (empty before a frame)."""
    ordered = sorted(latency_ms)
    if not ordered:
        return {'latency_median_ms': '', 'latency_max_ms': ''}
    return {'latency_median_ms': f'{ordered[len(ordered) // 2]:.1f}',
            'latency_max_ms': f'{ordered[-1]:.1f}'}


def stream_health(counts, failure=None, fallback=None, publishers=0):
    """
    Return ``(level, message)`` of one camera's stream.

    ``counts`` is the stream's counters (a ``Counter``), ``failure`` the
    node's fatal engine failure and ``fallback`` its CPU fallback notice (or
    None), ``publishers`` the image publishers matched now. An error is the
    failure; a warning lists the fallback, the frames lost and the images
    rejected; otherwise the stream is waiting or healthy.
    """
    if failure:
        return 'ERROR', failure
    lost = sum(counts[k] for k in LOST)
    if fallback or lost or counts['rejected']:
        parts = [fallback] if fallback else []
        if lost:
            parts.append(f'{lost} frames dropped or lost')
        if counts['rejected']:
            parts.append(f'{counts["rejected"]} images rejected')
        return 'WARN', '; '.join(parts)
    if not counts['published']:
        return 'OK', 'waiting for images' if publishers else 'no image publisher matched'
    return 'OK', 'tracking input healthy'
