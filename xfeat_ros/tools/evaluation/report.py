# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
What ``xfeat_eval`` reports: per-method summaries, Markdown tables and JSON-ready results.

Metric conventions are in :mod:`xfeat_ros.tools.evaluation.metrics`: MHA at 1/3/5 px of corner
error, pose AUC at 5/10/20 degrees of ``max(rotation, translation)`` error.
"""

from pathlib import Path
import re

import numpy as np

from xfeat_ros.tools.evaluation.metrics import accuracy_at, pose_auc

MHA_THRESHOLDS = (1.0, 3.0, 5.0)
AUC_THRESHOLDS = (5.0, 10.0, 20.0)


def _finite(value):
    value = float(value)
    return value if np.isfinite(value) else None


def _median(values):
    values = [v for v in values if np.isfinite(v)]
    return float(np.median(values)) if values else float('inf')


def summarize_encoding(records):
    """
    Summarize the encoding fields of records (empty dict where records have none).

    ``bytes_per_frame``: median over the distinct frames of the pairs of the
    encoded descriptor bytes (N * D * itemsize); ``match_agreement``: share of
    all the engine's float32 matches over the pairs that the encoded
    descriptors reproduce (1.0 when there are none).
    """
    if not records or 'descriptor_bytes0' not in records[0]:
        return {}
    frame_bytes = {}
    for r in records:
        frame_bytes[r['image0']] = r['descriptor_bytes0']
        frame_bytes[r['image1']] = r['descriptor_bytes1']
    reference = sum(r['float32_matches'] for r in records)
    reproduced = sum(r['float32_matches_reproduced'] for r in records)
    return {'bytes_per_frame': float(np.median(list(frame_bytes.values()))),
            'match_agreement': reproduced / reference if reference else 1.0}


def summarize_orders(records, key, metric, names):
    """
    Summarize the ``--fit-orders`` errors of records (empty dict where records have none).

    ``records[i][key]``: list of N errors (one per order); ``metric(errors,
    thresholds)`` the accuracy of one order's errors over the records;
    ``names``: ``{threshold: metric name}``. Returns ``fit_orders`` N and, per
    threshold, ``<name>_orders_mean`` and ``<name>_orders_std``: the mean and
    population standard deviation over the N orders of the metric of each
    order.
    """
    if not records or key not in records[0]:
        return {}
    thresholds = list(names)
    errors = np.array([r[key] for r in records], dtype=np.float64)  # [pairs, orders]
    per_order = np.array([metric(errors[:, k], thresholds) for k in range(errors.shape[1])],
                         dtype=np.float64).reshape(errors.shape[1], len(thresholds))
    summary = {'fit_orders': errors.shape[1]}
    for t, values in zip(thresholds, per_order.T):
        summary[f'{names[t]}_orders_mean'] = float(values.mean())
        summary[f'{names[t]}_orders_std'] = float(values.std())
    return summary


def summarize_homography(records):
    """Summarize homography records: pairs, MHA at 1/3/5 px, mean error, medians."""
    errors = [r['corner_error_px'] for r in records]
    mha = accuracy_at(errors, MHA_THRESHOLDS)
    finite = [e for e in errors if np.isfinite(e)]
    return {'pairs': len(records),
            **{f'mha@{t:g}px': float(a) for t, a in zip(MHA_THRESHOLDS, mha)},
            'mean_corner_error_px': float(np.mean(errors)) if records else float('inf'),
            'failures': len(errors) - len(finite),
            'median_matches': _median([r['matches'] for r in records]),
            'median_inliers': _median([r['inliers'] for r in records]),
            **summarize_orders(records, 'corner_error_px_orders', accuracy_at,
                               {t: f'mha@{t:g}px' for t in MHA_THRESHOLDS}),
            **summarize_encoding(records)}


def summarize_pose(records):
    """
    Summarize pose records: pairs, AUC at 5/10/20 deg, median errors and counts.

    No records (a gap longer than the sequence): AUCs and medians are None,
    shown as '-', not as an AUC of 0.
    """
    if not records:
        return {'pairs': 0, **{f'auc@{t:g}deg': None for t in AUC_THRESHOLDS},
                'median_rotation_error_deg': None, 'median_translation_error_deg': None,
                'failures': 0, 'median_matches': None, 'median_inliers': None}
    auc = pose_auc([r['pose_error_deg'] for r in records], AUC_THRESHOLDS)
    return {'pairs': len(records),
            **{f'auc@{t:g}deg': float(a) for t, a in zip(AUC_THRESHOLDS, auc)},
            'median_rotation_error_deg': _median([r['rotation_error_deg'] for r in records]),
            'median_translation_error_deg': _median(
                [r['translation_error_deg'] for r in records]),
            'failures': sum(not np.isfinite(r['pose_error_deg']) for r in records),
            'median_matches': _median([r['matches'] for r in records]),
            'median_inliers': _median([r['inliers'] for r in records]),
            **summarize_orders(records, 'pose_error_deg_orders', pose_auc,
                               {t: f'auc@{t:g}deg' for t in AUC_THRESHOLDS}),
            **summarize_encoding(records)}


def slug(text):
    """Return the file-name form of a method or dataset name."""
    return re.sub(r'[^A-Za-z0-9]+', '_', text).strip('_').lower()


def fmt(value, digits=2):
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return 'fail' if value is not None else '-'
    if isinstance(value, float):
        return f'{value:.{digits}f}'
    return str(value)


def _encoding_cells(summary, shown):
    """Return the Markdown cells of bytes per frame and match agreement (where ``shown``)."""
    if not shown:
        return ''
    if 'bytes_per_frame' not in summary:
        return ' - | - |'
    return (f" {fmt(summary['bytes_per_frame'], 0)} | "
            f"{fmt(summary['match_agreement'], 4)} |")


def _order_cells(summary, names, digits):
    """Return the Markdown cells 'mean +- std' of the ``--fit-orders`` metrics ``names``."""
    cells = ''
    for name in names:
        mean = summary.get(f'{name}_orders_mean')
        std = summary.get(f'{name}_orders_std')
        cells += (' - |' if mean is None
                  else f' {fmt(mean, digits)} +- {fmt(std, digits)} |')
    return cells


def _fmt_range(values):
    """Return 'median (min-max)' of float errors (None: failed fit), 'fail' when all failed."""
    finite = [v for v in values if v is not None and np.isfinite(v)]
    if not finite:
        return 'fail'
    failed = len(values) - len(finite)
    text = f'{fmt(float(np.median([v if v is not None else np.inf for v in values])))}'
    text += f' ({fmt(min(finite))}-{fmt(max(finite))}'
    return text + (f', {failed} failed)' if failed else ')')


def markdown_tables(results):
    """
    Return the results as Markdown: per dataset a summary table and a per-pair table.

    Where a method ran with a descriptor encoding, the summary tables get two
    more columns: bytes per frame and match agreement with float32. With
    ``--fit-orders`` N > 0 they get the order-averaged MHA / AUC (mean +- std
    over the N orders) after the single-fit ones, and the per-pair table the
    median (min-max) corner error over the orders.
    """
    lines = []
    for data in results['datasets']:
        methods = list(data['summary'])
        lines += [f"### {data['name']} ({data['layout']}, {data['kind']})", '']
        summaries = [s.get('all', s) for s in data['summary'].values()]
        shown = any('bytes_per_frame' in s for s in summaries)
        head = ' bytes/frame | agreement with float32 |' if shown else ''
        rule = '---|---|' if shown else ''
        orders = max((s.get('fit_orders', 0) for s in summaries), default=0)
        if data['kind'] == 'homography':
            names = [f'mha@{t:g}px' for t in MHA_THRESHOLDS] if orders else []
            order_head = ''.join(f' MHA@{t:g}px {orders} orders |' for t in MHA_THRESHOLDS)
            lines += ['| method | pairs | MHA@1px | MHA@3px | MHA@5px |'
                      + (order_head if orders else '') + ' mean corner err px | '
                      'median matches | median inliers |' + head,
                      '|---|---|---|---|---|' + '---|' * len(names) + '---|---|---|' + rule]
            for m in methods:
                s = data['summary'][m]
                lines.append(f"| {m} | {s['pairs']} | {fmt(s['mha@1px'])} | "
                             f"{fmt(s['mha@3px'])} | {fmt(s['mha@5px'])} |"
                             + _order_cells(s, names, 3)
                             + f" {fmt(s['mean_corner_error_px'])} | "
                             f"{fmt(s['median_matches'], 0)}"
                             f" | {fmt(s['median_inliers'], 0)} |" + _encoding_cells(s, shown))
            per_order = ' | '.join(f'{m}: corner err px over {orders} orders, median (min-max)'
                                   for m in methods)
            lines += ['', '| pair | ' + ' | '.join(
                f'{m}: corner err px (matches / inliers)' for m in methods)
                + (' | ' + per_order if orders else '') + ' |',
                '|---|' + '---|' * len(methods) * (2 if orders else 1)]
            for k, record in enumerate(data['pairs'][methods[0]]):
                cells = []
                for m in methods:
                    r = data['pairs'][m][k]
                    cells.append(f"{fmt(r['corner_error_px'])} ({r['matches']} / "
                                 f"{r['inliers']})")
                if orders:
                    cells += [_fmt_range(data['pairs'][m][k].get('corner_error_px_orders', []))
                              for m in methods]
                lines.append(f"| {record['pair']} | " + ' | '.join(cells) + ' |')
        else:
            names = [f'auc@{t:g}deg' for t in AUC_THRESHOLDS] if orders else []
            order_head = ''.join(f' AUC@{t:g} {orders} orders |' for t in AUC_THRESHOLDS)
            lines += ['| method | gap | pairs | AUC@5 | AUC@10 | AUC@20 |'
                      + (order_head if orders else '') + ' median rot err deg | '
                      'median transl err deg | failures | median matches | median inliers |'
                      + head, '|---|---|---|---|---|---|' + '---|' * len(names)
                      + '---|---|---|---|---|' + rule]
            for m in methods:
                for gap, s in data['summary'][m].items():
                    lines.append(
                        f"| {m} | {gap} | {s['pairs']} | {fmt(s['auc@5deg'], 3)} | "
                        f"{fmt(s['auc@10deg'], 3)} | {fmt(s['auc@20deg'], 3)} |"
                        + _order_cells(s, names, 3)
                        + f" {fmt(s['median_rotation_error_deg'])} | "
                        f"{fmt(s['median_translation_error_deg'])} | {s['failures']} | "
                        f"{fmt(s['median_matches'], 0)} | {fmt(s['median_inliers'], 0)} |"
                        + _encoding_cells(s, shown))
        lines.append('')
    return '\n'.join(lines)


def json_ready(value):
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()
                if k not in ('points0', 'points1', 'inlier_mask')}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return _finite(value)  # inf (failure) -> null
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (np.ndarray, Path)):
        return value.tolist() if isinstance(value, np.ndarray) else str(value)
    return value
