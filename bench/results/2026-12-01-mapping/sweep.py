# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Measure xfeat_map's pairing and starting-pair angle on a sequence with ground truth.

Per feature type, one database with every pair matched and verified (seed 0) is
built once; each pairing scheme is a copy of it with the other pairs' matches and
two-view geometries deleted (matching and verification are per pair, so this
equals matching only those pairs). COLMAP's incremental mapper then runs for every
starting-pair angle and seed; registered images, APE and RPE (evo) are recorded.

    python bench/results/2026-12-01-mapping/sweep.py ../shared/data/tum_fr2_desk OUT \
        --weights ../shared/models/xfeat_backbone.npz --schemes w2 w4 w8 w4+log all \
        --angles 16 8 4 --seeds 0 1 2
"""

import argparse
import json
from pathlib import Path
import shutil
import time

from xfeat_ros.tools import colmap_db, trajectory
from xfeat_ros.tools.map_sources import open_folder
from xfeat_ros.tools.mapping import create_engine, FeatureStage


def in_scheme(scheme, gap):
    """Whether frames ``gap`` instants apart pair under ``scheme`` (wN, wN+log, all)."""
    if scheme == 'all':
        return True
    window, _, log = scheme[1:].partition('+')
    return gap <= int(window) or (log == 'log' and gap & (gap - 1) == 0)


def build(source_dir, out, features, weights, top_k):
    """Database with every pair matched and verified; returns (source, frames, seconds)."""
    pycolmap = colmap_db.require_backends()[0]
    source = open_folder(source_dir)
    out.mkdir(parents=True)
    database = colmap_db.MapDatabase(out / 'database.db')
    engine = None
    if features != 'sift':
        engine = create_engine('onnxruntime', weights, 0, top_k, 0.05, 0.82)
    tick = time.perf_counter()
    stage = FeatureStage(source, database, engine, None, 0.82)
    frames = stage.run(with_features=features != 'sift')
    database.close()
    pairs = colmap_db.write_pairs(out / 'pairs.txt', stage.pairs)
    if features == 'sift':
        colmap_db.sift(pycolmap, database.path, source.image_root, [f.name for f in frames],
                       pairs, 0, -1)
    else:
        colmap_db.verify(pycolmap, database.path, pairs, 0)
    return source, frames, time.perf_counter() - tick


def subset(pycolmap, path, frames, scheme):
    """Delete the pairs outside ``scheme`` from the database at ``path``; returns pairs kept."""
    rank = {f.name: f.rank for f in frames}
    kept = 0
    with pycolmap.Database.open(str(path)) as db:
        names = {image.image_id: image.name for image in db.read_all_images()}
        pair_ids, _ = db.read_num_matches()
        for pair_id in pair_ids:
            id0, id1 = pycolmap.pair_id_to_image_pair(pair_id)
            if in_scheme(scheme, abs(rank[names[id1]] - rank[names[id0]])):
                kept += 1
                continue
            db.delete_matches(id0, id1)
            db.delete_two_view_geometry(id0, id1)
    return kept


def main():
    """Run the sweep; print one JSON line per mapping and append them to sweep.jsonl."""
    parser = argparse.ArgumentParser()
    parser.add_argument('source', type=Path)
    parser.add_argument('out', type=Path)
    parser.add_argument('--weights', default='')
    parser.add_argument('--top-k', type=int, default=4096)
    parser.add_argument('--features', nargs='+', default=['xfeat', 'sift'])
    parser.add_argument('--schemes', nargs='+', default=['w2', 'w4', 'w8', 'w4+log', 'all'])
    parser.add_argument('--angles', type=float, nargs='+', default=[16, 8, 4])
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--threads', type=int, default=-1)
    args = parser.parse_args()
    pycolmap = colmap_db.require_backends()[0]
    pycolmap.logging.minloglevel = 2
    records = []
    for features in args.features:
        base = args.out / features
        if (base / 'database.db').is_file():  # built by an earlier run: reuse it
            source, build_s = open_folder(args.source), None
            frames = [item.frame for item in source.items()]
        else:
            source, frames, build_s = build(args.source, base, features, args.weights,
                                            args.top_k)
        for scheme in args.schemes:
            for angle in args.angles:
                for seed in args.seeds:
                    run_dir = base / f'{scheme}_a{angle:g}_s{seed}'
                    if run_dir.exists():
                        shutil.rmtree(run_dir)
                    run_dir.mkdir()
                    shutil.copy(base / 'database.db', run_dir / 'database.db')
                    pairs = subset(pycolmap, run_dir / 'database.db', frames, scheme)
                    settings = {'seed': seed, 'threads': args.threads,
                                'init_min_tri_angle': angle}
                    tick = time.perf_counter()
                    models = colmap_db.incremental_mapping(pycolmap, run_dir / 'database.db',
                                                           source.image_root,
                                                           run_dir / 'sparse', settings)
                    record = {'features': features, 'scheme': scheme, 'pairs': pairs,
                              'angle': angle, 'seed': seed,
                              'build_s': build_s and round(build_s, 1),
                              'mapping_s': round(time.perf_counter() - tick, 1),
                              'registered': 0, 'ape_rmse_m': None, 'rpe_rotation_deg': None}
                    if models:
                        model = models[0][1]
                        scores = trajectory.score(
                            trajectory.estimated_poses(model, frames, 'cam0'))
                        record.update(registered=model.num_reg_images(),
                                      reprojection_px=model.compute_mean_reprojection_error())
                        if scores:
                            record.update(ape_rmse_m=scores['ape_rmse_m'],
                                          rpe_rotation_deg=scores['rpe_rotation_deg'])
                    records.append(record)
                    print(json.dumps(record), flush=True)
                    (run_dir / 'database.db').unlink()
    with open(args.out / 'sweep.jsonl', 'a') as handle:
        handle.write(''.join(json.dumps(r) + '\n' for r in records))


if __name__ == '__main__':
    main()
