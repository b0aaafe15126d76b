#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# The A/B of results/2026-12-01-node-cpu-3/README.md (base: a git worktree of 6e038a2 at /tmp/base
# holding bench/replay_engine.py; new: this checkout), as it was run.
for round in 1 2; do for v in base new; do if [ $v = base ]; then R=/tmp/base; else R=/work/main; fi; (cd $R; PYTHONPATH=$R timeout 300 python -m xfeat_ros.tools.bench node --images /work/shared/data/tum_fr2_desk --configs ${CONFIGS:-1x30,2x100,4xmax} --duration 6 --backend onnxruntime --node-wrapper "python $R/bench/replay_engine.py" --json /tmp/ov/ab_${v}_$round.json --log-dir /tmp/ov/ab_logs_${v}_$round > /dev/null 2>&1); python3 -c "
import json; r=json.load(open('/tmp/ov/ab_${v}_$round.json'))
for c in r['configs']: print('$v $round', c['label'], 'out', round(c['output_hz'] or 0,1), 'drop', c['dropped'], 'p50', c['latency'].get('median_ms'), 'p99', c['latency'].get('p99_ms'), 'cpu', round(c['node_cpu_percent'] or 0,1), 'queue', c['node_stage_medians_ms']['cam0']['queue'], 'transport', c['node_stage_medians_ms']['cam0']['transport'])
"; done; done
