# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Trajectories of ``xfeat_map``: camera poses of a reconstruction, TUM files, evo scores, plots.

Poses are camera-to-world float64 [4, 4] (the TUM convention). A monocular
reconstruction has no scale, so the estimate is aligned to the ground truth
with Sim(3) (Umeyama, through evo) before the absolute trajectory error
(APE, translation part, metres); the relative rotation error (RPE, degrees,
between consecutive registered frames) needs no alignment.
"""

import copy

import numpy as np

from xfeat_ros.tools.map_sources import MappingError

MIN_ALIGNED_POSES = 3  # Sim(3) from fewer poses is not determined


def world_from_camera(image):
    """
    Return the camera-to-world 4x4 of a registered ``pycolmap.Image``.

    ``cam_from_world()`` is a method in pycolmap 4.2.1 (a property before).
    """
    world = image.cam_from_world().inverse()
    pose = np.eye(4)
    pose[:3, :3] = world.rotation.matrix()
    pose[:3, 3] = world.translation
    return pose


def estimated_poses(reconstruction, frames, camera):
    """``[(FrameInfo, pose 4x4)]`` of the registered images of ``camera``, in time order."""
    by_name = {f.name: f for f in frames if f.camera == camera}
    rows = []
    for image in reconstruction.images.values():
        frame = by_name.get(image.name)
        if frame is not None and image.has_pose:
            rows.append((frame, world_from_camera(image)))
    return sorted(rows, key=lambda row: row[0].rank)


def frame_time(frame):
    """Seconds of a frame: its stamp, or its rank where the source has no stamps."""
    return frame.stamp_ns / 1e9 if frame.stamp_ns is not None else float(frame.rank)


def frame_time_text(frame):
    """:func:`frame_time` as exact decimal text (integer nanoseconds, no float rounding)."""
    if frame.stamp_ns is None:
        return f'{frame.rank}.000000000'
    return f'{frame.stamp_ns // 10 ** 9}.{frame.stamp_ns % 10 ** 9:09d}'


def quaternion_xyzw(rotation):
    """Return the unit quaternion (x, y, z, w), w >= 0, of a rotation matrix [3, 3]."""
    from scipy.spatial.transform import Rotation
    q = Rotation.from_matrix(rotation).as_quat()
    return q if q[3] >= 0 else -q


def tum_text(rows):
    """TUM trajectory text (``t tx ty tz qx qy qz qw`` per line) of ``[(FrameInfo, pose)]``."""
    lines = ['# xfeat_map camera-to-world poses (TUM format; t = stamp in s, or frame index)']
    for frame, pose in rows:
        values = list(pose[:3, 3]) + list(quaternion_xyzw(pose[:3, :3]))
        lines.append(f'{frame_time_text(frame)} ' + ' '.join(f'{v:.9f}' for v in values))
    return '\n'.join(lines) + '\n'


def _evo_trajectory(poses, times):
    from evo.core.trajectory import PoseTrajectory3D
    return PoseTrajectory3D(poses_se3=[np.array(p) for p in poses],
                            timestamps=np.asarray(times, dtype=np.float64))


def score(rows):
    """
    Score ``[(FrameInfo, pose)]`` against the frames' ground truth with evo (or None).

    Returns a dict: ``ape_rmse_m``, ``ape_mean_m``, ``ape_max_m``,
    ``rpe_rotation_deg`` (RMSE over consecutive scored frames),
    ``sim3_scale``, ``scored_frames``, and, for the plot, ``times``,
    ``reference_xyz``, ``aligned_xyz`` and ``ape_m`` per frame. None when
    fewer than :data:`MIN_ALIGNED_POSES` registered frames have ground truth.
    """
    from evo.core import metrics
    from evo.core.units import Unit
    scored = [(f, p) for f, p in rows if f.pose is not None]
    if len(scored) < MIN_ALIGNED_POSES:
        return None
    times = [frame_time(f) for f, _ in scored]
    reference = _evo_trajectory([f.pose for f, _ in scored], times)
    estimate = _evo_trajectory([p for _, p in scored], times)
    aligned = copy.deepcopy(estimate)
    try:
        _, _, scale = aligned.align(reference, correct_scale=True)
        ape = metrics.APE(metrics.PoseRelation.translation_part)
        ape.process_data((reference, aligned))
        rpe = metrics.RPE(metrics.PoseRelation.rotation_angle_deg, delta=1,
                          delta_unit=Unit.frames)
        rpe.process_data((reference, estimate))
    except Exception as exc:  # evo raises its own error types for degenerate input
        raise MappingError(f'evo could not score the trajectory: {exc}') from exc
    stat = metrics.StatisticsType
    return {'ape_rmse_m': float(ape.get_statistic(stat.rmse)),
            'ape_mean_m': float(ape.get_statistic(stat.mean)),
            'ape_max_m': float(ape.get_statistic(stat.max)),
            'rpe_rotation_deg': float(rpe.get_statistic(stat.rmse)),
            'rpe_delta_frames': 1, 'alignment': 'sim3 (evo, Umeyama)',
            'sim3_scale': float(scale), 'scored_frames': len(scored),
            'times': times, 'reference_xyz': reference.positions_xyz,
            'aligned_xyz': aligned.positions_xyz, 'ape_m': ape.error}


def plot(path, rows, scores, title):
    """
    Write a PNG: estimated (Sim(3)-aligned) vs ground-truth positions, and APE per frame.

    Without ground truth (``scores`` None) the estimate alone, unaligned. The
    view is onto the two axes along which the trajectory spreads most.
    """
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot
    if scores is not None:
        reference, estimate = scores['reference_xyz'], scores['aligned_xyz']
    else:
        reference, estimate = None, np.array([p[:3, 3] for _, p in rows]).reshape(-1, 3)
    spread = np.ptp(reference if reference is not None else estimate, axis=0) \
        if len(estimate) else np.zeros(3)
    a, b = sorted(np.argsort(spread)[-2:])
    figure, axes = pyplot.subplots(1, 2 if scores is not None else 1,
                                   figsize=(9, 3.8) if scores is not None else (5, 4.2),
                                   squeeze=False)
    view = axes[0, 0]
    if reference is not None:
        view.plot(reference[:, a], reference[:, b], 'o-', color='0.3', ms=3, lw=1,
                  label='ground truth')
    view.plot(estimate[:, a], estimate[:, b], 'x-', color='tab:red', ms=4, lw=1,
              label='xfeat_map' + (' (Sim(3)-aligned)' if scores is not None else ''))
    view.set_xlabel('xyz'[a] + ' (m)')
    view.set_ylabel('xyz'[b] + ' (m)')
    view.set_aspect('equal', adjustable='datalim')
    view.legend(fontsize=8)
    view.grid(alpha=0.3)
    if scores is not None:
        errors = axes[0, 1]
        times = np.asarray(scores['times']) - scores['times'][0]
        errors.plot(times, np.asarray(scores['ape_m']) * 100, 'o-', color='tab:red', ms=3)
        errors.set_xlabel('time (s)')
        errors.set_ylabel('position error after Sim(3) (cm)')
        errors.set_title(f"APE RMSE {scores['ape_rmse_m'] * 100:.2f} cm, "
                         f"RPE rot {scores['rpe_rotation_deg']:.2f} deg", fontsize=9)
        errors.grid(alpha=0.3)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    pyplot.close(figure)
    return path
