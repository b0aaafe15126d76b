# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""What the benchmarks write: JSON files, text tables, ratios and the latency histogram."""

import json
from pathlib import Path

import numpy as np

from xfeat_ros.tools.bench.stats import ratio


def write_json(path, data):
    """Write ``data`` as indented JSON (atomically: a killed run leaves the last complete file)."""
    if not path:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp')
    tmp.write_text(json.dumps(data, indent=1) + '\n')
    tmp.replace(path)


def pipeline_table(results, ours='xfeat_ros'):
    """Text table of pipeline results: ``ours`` at each N next to reference / upstream, ratios."""
    by_key = {(r['resolution'], r['contender'], r['in_flight'], r.get('repeat', 0)): r
              for r in results['results']}
    has_upstream = any(r['contender'] == 'upstream' for r in results['results'])
    on_gpu = any('device' in r for r in results['results'])
    dev_head = f' {"(device)":>8}' if on_gpu else ''
    head = (f'{"resolution":>10} {"N":>3} | {ours[:20] + " ms/frame [p10-p90]":>30} '
            f'{"(device)":>9} | {"reference":>9} {"ref/ours":>8}{dev_head}')
    if has_upstream:
        head += f' | {"upstream":>9} {"up/ours":>8}{dev_head}'
    lines = [head, '-' * len(head)]
    for r in results['results']:
        if r['contender'] != ours:
            continue
        res, n, rep = r['resolution'], r['in_flight'], r.get('repeat', 0)
        wall = r['wall']
        device = r.get('device', {}).get('median_ms')
        cells = [f'{res:>10} {n:>3} | {wall["median_ms"]:9.3f} '
                 f'[{wall["p10_ms"]:8.3f}-{wall["p90_ms"]:8.3f}] '
                 f'{"" if device is None else f"({device:.3f})":>9}']
        for name in ('reference', 'upstream') if has_upstream else ('reference',):
            other = by_key.get((res, name, n, rep))
            if other is None:
                cells.append(f'{"-":>9} {"-":>8}' + (f' {"":>8}' if on_gpu else ''))
            else:
                dev = ratio(other.get('device', {}).get('median_ms'), device)
                cells.append(f'{other["wall"]["median_ms"]:9.3f} '
                             f'{ratio(other["wall"]["median_ms"], wall["median_ms"]):7.2f}x'
                             + ('' if dev is None else f' {f"({dev:.2f}x)":>8}'))
        lines.append(' | '.join(cells))
    return '\n'.join(lines) + '\n'


def by_repeat(rows):
    """Rows grouped by their ``repeat`` index (``xfeat_bench pipeline --repeat``; none: 0)."""
    groups = {}
    for row in rows:
        groups.setdefault(row.get('repeat', 0), []).append(row)
    return list(groups.values())


def median_of_repeats(entries, keys):
    """
    Merge the entries of several repeats that agree on ``keys`` into one.

    A number becomes the median over the repeats; a ratio (``*_over_ours*``) also
    keeps every repeat's value under ``<name>_runs``, and an integer that differs
    between repeats (the best N) becomes the list of its values. One repeat:
    the entries unchanged.
    """
    groups = {}
    for entry in entries:
        groups.setdefault(tuple(entry.get(k) for k in keys), []).append(entry)
    out = []
    for group in groups.values():
        if len(group) == 1:
            out.append(group[0])
            continue
        merged = dict(group[0], repeats=len(group))
        for name, first in group[0].items():
            if name in keys or isinstance(first, bool) or not isinstance(first, (int, float)):
                continue
            values = [e[name] for e in group if e.get(name) is not None]
            if isinstance(first, int):
                merged[name] = first if len(set(values)) == 1 else values
                continue
            merged[name] = float(np.median(values))
            if '_over_ours' in name:
                merged[f'{name}_runs'] = values
        out.append(merged)
    return out


def pipeline_ratios(rows, contender='xfeat_ros'):
    """
    Per resolution and N: reference / ours and upstream / ours, wall and device medians.

    Rows of several repeats: the ratios of each repeat, then their median
    (:func:`median_of_repeats`), so that a slow or fast run of one contender
    is not paired with another run of the other.
    """
    entries = [entry for group in by_repeat(rows) for entry in _ratios(group, contender)]
    return median_of_repeats(entries, ('resolution', 'in_flight', 'contender'))


def _ratios(rows, contender):
    by_key = {(r['resolution'], r['contender'], r['in_flight']): r for r in rows}
    out = []
    for (res, name, n), ours in by_key.items():
        if name != contender:
            continue
        entry = {'resolution': res, 'in_flight': n, 'xfeat_ros_ms': ours['wall']['median_ms'],
                 'xfeat_ros_device_ms': ours.get('device', {}).get('median_ms'),
                 'xfeat_ros_device_work_ms': ours.get('device_work', {}).get('median_ms')}
        if contender != 'xfeat_ros':
            entry['contender'] = contender
        for other in ('reference', 'upstream'):
            row = by_key.get((res, other, n))
            if row is not None:
                entry[f'{other}_ms'] = row['wall']['median_ms']
                entry[f'{other}_over_ours'] = ratio(row['wall']['median_ms'],
                                                    ours['wall']['median_ms'])
                device = row.get('device', {}).get('median_ms')
                if device is not None:
                    entry[f'{other}_device_ms'] = device
                    entry[f'{other}_over_ours_device'] = ratio(device,
                                                               entry['xfeat_ros_device_ms'])
        out.append(entry)
    return out


def best_against_best(rows, contender='xfeat_ros'):
    """Per resolution: each contender's lowest median wall ms/frame over N, and ratios to ours."""
    entries = [entry for group in by_repeat(rows) for entry in _best(group, contender)]
    return median_of_repeats(entries, ('resolution', 'contender'))


def _best(rows, contender):
    best = {}
    for row in rows:
        key = (row['resolution'], row['contender'])
        if key not in best or row['wall']['median_ms'] < best[key]['wall']['median_ms']:
            best[key] = row
    out = []
    for res in dict.fromkeys(row['resolution'] for row in rows):
        ours = best.get((res, contender))
        if ours is None:
            continue
        entry = {'resolution': res, 'xfeat_ros_ms': ours['wall']['median_ms'],
                 'xfeat_ros_n': ours['in_flight']}
        if contender != 'xfeat_ros':
            entry['contender'] = contender
        for other in ('reference', 'upstream'):
            row = best.get((res, other))
            if row is not None:
                entry[f'{other}_ms'] = row['wall']['median_ms']
                entry[f'{other}_n'] = row['in_flight']
                entry[f'{other}_over_ours'] = ratio(row['wall']['median_ms'],
                                                    ours['wall']['median_ms'])
        out.append(entry)
    return out


def node_table(results):
    """Text table of node results."""
    head = (f'{"config":>8} {"target Hz":>9} {"pub Hz":>8} {"out Hz":>8} | {"published":>9} '
            f'{"received":>8} {"processed":>9} {"delivered":>9} {"dropped":>7} | '
            f'{"lat p50":>8} {"p99":>8} {"max ms":>8} | {"reader p50":>10} {"p99":>8} | '
            f'{"CPU %":>6} {"GPU MiB":>8}')
    lines = [head, '-' * len(head)]

    def num(value, fmt):
        return '-' if value is None else format(value, fmt)
    for r in results['configs']:
        lat = r.get('latency', {})
        reader = r.get('latency_at_reader', {})
        lines.append(
            f'{r["label"]:>8} {num(r.get("target_hz"), ".0f"):>9} '
            f'{num(r.get("publish_hz"), ".1f"):>8} {num(r.get("output_hz"), ".1f"):>8} | '
            f'{num(r.get("published"), "d"):>9} {num(r.get("node_received"), "d"):>8} '
            f'{num(r.get("node_processed"), "d"):>9} {num(r.get("delivered"), "d"):>9} '
            f'{num(r.get("dropped"), "d"):>7} | {num(lat.get("median_ms"), ".2f"):>8} '
            f'{num(lat.get("p99_ms"), ".2f"):>8} {num(lat.get("max_ms"), ".2f"):>8} | '
            f'{num(reader.get("median_ms"), ".2f"):>10} {num(reader.get("p99_ms"), ".2f"):>8} | '
            f'{num(r.get("node_cpu_percent"), ".0f"):>6} '
            f'{num(r.get("gpu_memory_mib"), ".0f"):>8}'
            + (f'  ERROR: {r["error"]}' if r.get('error') else ''))
    return '\n'.join(lines) + '\n'


def plot_latencies(results, png):
    """Latency histogram (one step curve per configuration, log-spaced bins) as a PNG."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    values = [v for r in results['configs'] for v in r.get('latencies_ms', []) if v > 0]
    if values:
        bins = np.geomspace(max(min(values), 1e-2), max(values) * 1.01, 60)
        for r in results['configs']:
            lat = np.asarray([v for v in r.get('latencies_ms', []) if v > 0])
            if lat.size == 0:
                continue
            summary = r['latency']
            ax.hist(lat, bins=bins, histtype='step', linewidth=1.5,
                    weights=np.full(lat.size, 1.0 / lat.size),
                    label=f'{r["label"]}: p50 {summary["median_ms"]:.1f}, '
                          f'p99 {summary["p99_ms"]:.1f} ms ({lat.size} frames)')
        ax.set_xscale('log')
        ax.legend(fontsize=8)
    settings = results.get('settings', {})
    env = results.get('environment', {})
    ax.set_xlabel('latency, image stamp -> Keypoints received (ms)')
    ax.set_ylabel('share of frames')
    ax.set_title(f'xfeat_node {settings.get("backend", "")} on '
                 f'{env.get("gpu", env.get("cpu", "")) or ""}'.strip()[:90], fontsize=9)
    ax.grid(True, which='both', alpha=0.3)
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)
