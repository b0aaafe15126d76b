# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The pictures of ``xfeat_eval``: accuracy curves, errors along a sequence, drawn matches.

Every function writes one PNG (matplotlib, Agg backend; OpenCV for the drawn pairs).
"""

import numpy as np

from xfeat_ros.errors import XFeatError
from xfeat_ros.tools.evaluation.metrics import accuracy_at
from xfeat_ros.tools.evaluation.report import fmt, slug
from xfeat_ros.tools.image_files import read_image

DRAWN_MATCHES = 300


def _pyplot():
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def _width(index):
    """Line width of the index-th method: later ones thinner, so equal curves all show."""
    return max(3.5 - 1.3 * index, 1.0)


def plot_mha(data, path):
    """Write MHA vs corner-error threshold (0..10 px), one curve per method."""
    plt = _pyplot()
    grid = np.linspace(0.0, 10.0, 201)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for m, (method, records) in enumerate(data['pairs'].items()):
        errors = [r['corner_error_px'] for r in records]
        ax.plot(grid, accuracy_at(errors, grid), label=method, linewidth=_width(m))
    ax.set(xlabel='corner error threshold (px)', ylabel='MHA (share of pairs)',
           title=f"{data['name']}: homography accuracy", ylim=(-0.02, 1.02), xlim=(0, 10))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_pose_cdf(data, path):
    """Write the CDFs of rotation, translation and pose (max) error, per method and gap."""
    plt = _pyplot()
    grid = np.linspace(0.0, 20.0, 401)
    keys = (('rotation_error_deg', 'rotation'), ('translation_error_deg', 'translation'),
            ('pose_error_deg', 'max(rotation, translation)'))
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), dpi=100, sharey=True)
    for m, (method, records) in enumerate(data['pairs'].items()):
        colour = f'C{m}'
        for g, gap in enumerate(sorted({r['gap'] for r in records})):
            chosen = [r for r in records if r['gap'] == gap]
            for ax, (key, _) in zip(axes, keys):
                ax.plot(grid, accuracy_at([r[key] for r in chosen], grid), color=colour,
                        linestyle=('-', '--', ':', '-.')[g % 4], linewidth=_width(m),
                        label=f'{method}, gap {gap}')
    for ax, (_, title) in zip(axes, keys):
        ax.set(xlabel=f'{title} error (deg)', title=f"{data['name']}: {title}",
               ylim=(-0.02, 1.02), xlim=(0, 20))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel('share of pairs with error <= x')
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_pose_along(data, path):
    """Write rotation and translation errors along the sequence, one panel per gap."""
    plt = _pyplot()
    gaps = sorted({r['gap'] for records in data['pairs'].values() for r in records})
    fig, axes = plt.subplots(len(gaps), 1, figsize=(9, 2.6 * len(gaps)), dpi=100, sharex=True,
                             squeeze=False)
    for ax, gap in zip(axes[:, 0], gaps):
        for m, (method, records) in enumerate(data['pairs'].items()):
            chosen = [r for r in records if r['gap'] == gap]
            x = [r['frame0'] for r in chosen]
            for key, style, what in (('rotation_error_deg', 'o-', 'rotation'),
                                     ('translation_error_deg', 's--', 'translation')):
                y = np.array([r[key] for r in chosen], dtype=np.float64)
                ax.plot(x, np.where(np.isfinite(y), y, np.nan), style, color=f'C{m}',
                        markersize=3, label=f'{method} {what}')
                failed = ~np.isfinite(y)
                if failed.any():
                    top = np.nanmax(np.r_[np.where(np.isfinite(y), y, np.nan), 1.0])
                    ax.plot(np.asarray(x)[failed], np.full(failed.sum(), top), 'x',
                            color=f'C{m}', markersize=8)
        ax.set(ylabel='error (deg)', title=f"{data['name']}: frame i -> i+{gap}")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel('frame i (x: failed)')
    axes[0, 0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def draw_pair(path0, path1, points0, points1, inlier_mask, title, path):
    """
    Write two images side by side with match lines: inliers green, outliers red.

    ``points0/1`` float [M, 2] pixels, ``inlier_mask`` bool [M]; at most
    :data:`DRAWN_MATCHES` matches are drawn (evenly spaced), over dimmed grey
    images, inliers on top.
    """
    import cv2
    images = []
    for image_path in (path0, path1):
        pixels, encoding = read_image(image_path)
        if encoding == 'mono16':
            pixels = (pixels // 257).astype(np.uint8)
        grey = pixels.astype(np.float32).mean(axis=2, keepdims=True)  # dimmed grey: colours show
        images.append(np.repeat((60 + 0.6 * grey).astype(np.uint8), 3, axis=2))
    banner = 28
    height = max(i.shape[0] for i in images) + banner
    canvas = np.full((height, images[0].shape[1] + images[1].shape[1], 3), 255, np.uint8)
    canvas[banner:banner + images[0].shape[0], :images[0].shape[1]] = images[0]
    canvas[banner:banner + images[1].shape[0], images[0].shape[1]:] = images[1]
    offset0 = np.array([0.0, banner])
    offset1 = np.array([images[0].shape[1], banner])
    order = np.r_[np.nonzero(~inlier_mask)[0], np.nonzero(inlier_mask)[0]]
    if len(order) > DRAWN_MATCHES:
        keep = np.zeros(len(inlier_mask), bool)
        keep[np.linspace(0, len(inlier_mask) - 1, DRAWN_MATCHES).astype(int)] = True
        order = order[keep[order]]
    for k in order:
        colour = (0, 190, 0) if inlier_mask[k] else (0, 0, 255)
        a = tuple(int(round(v)) for v in points0[k] + offset0)
        b = tuple(int(round(v)) for v in points1[k] + offset1)
        cv2.line(canvas, a, b, colour, 1, cv2.LINE_AA)
        cv2.circle(canvas, a, 2, colour, -1, cv2.LINE_AA)
        cv2.circle(canvas, b, 2, colour, -1, cv2.LINE_AA)
    cv2.putText(canvas, title, (6, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1,
                cv2.LINE_AA)
    if not cv2.imwrite(str(path), canvas):
        raise XFeatError(f'cannot write {path}')


def draw_best_and_worst(data, dataset, out):
    """Draw the best and the worst pair of each method; returns the written paths."""
    key = 'corner_error_px' if data['kind'] == 'homography' else 'pose_error_deg'
    unit = 'px' if data['kind'] == 'homography' else 'deg'
    written = []
    for method, records in data['pairs'].items():
        if not records:
            continue
        ranked = sorted(records, key=lambda r: (r[key], -r['inliers']))
        for label, record in (('best', ranked[0]), ('worst', ranked[-1])):
            name = record.get('pair') or f"{record['frame0']}-{record['frame1']}"
            if data['kind'] in ('homography', 'pairs'):
                paths = next((p.path0, p.path1) for p in dataset.pairs if p.name == name)
            else:
                paths = (dataset.frames[record['frame0']].path,
                         dataset.frames[record['frame1']].path)
            title = (f'{method} {dataset.name} {name} ({label}): error {fmt(record[key])} '
                     f"{unit}, {record['matches']} matches, {record['inliers']} inliers")
            path = out / f'matches_{slug(dataset.name)}_{slug(method)}_{label}.png'
            draw_pair(paths[0], paths[1], record['points0'], record['points1'],
                      record['inlier_mask'], title, path)
            written.append(path)
    return written
