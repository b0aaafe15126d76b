# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Node mode: ``xfeat_node`` timed through real ROS 2 transport.

For each configuration (cameras x Hz) :func:`run_node_config` starts the
node (:mod:`xfeat_ros.tools.plumbing`), the camera processes
(:class:`~xfeat_ros.tools.bench.publisher.PublisherProcess`) and a
:class:`Collector` of the Keypoints, warms up, measures, drains, and turns
what arrived into rates, counts, latencies, CPU load and GPU memory.
"""

import os
from pathlib import Path
import shlex
import sys
import tempfile
import time

from xfeat_ros.logs import package_logger
from xfeat_ros.ros import dds
from xfeat_ros.runtime import heap
from xfeat_ros.tools.bench.collector import Collector
from xfeat_ros.tools.bench.frames import default_weights
from xfeat_ros.tools.bench.publisher import (COMPRESSED, NODE_SETTLE_S, PublisherProcess,
                                             ros_environment)
from xfeat_ros.tools.bench.report import node_table, plot_latencies, write_json
from xfeat_ros.tools.bench.stats import cpu_percent, latency_summary
from xfeat_ros.tools.plumbing import (environment, parse_final_counts, parse_stage_medians,
                                      run_text, start_node as start_node_process, stop_process)

LOG = package_logger('xfeat_bench')

DEFAULT_NODE_CONFIGS = '1x30,4x60,8x120,8xmax'


def parse_node_configs(text):
    """``'1x30,8xmax'`` -> ``[(1, 30.0), (8, 0.0)]`` (cameras, Hz; 0: as fast as possible)."""
    out = []
    for item in text.split(','):
        cameras, rate = item.lower().strip().split('x', 1)
        rate = 0.0 if rate in ('max', 'afap', 'inf') else float(rate)
        if int(cameras) < 1 or rate < 0:
            raise ValueError(f'bad node configuration {item!r}')
        out.append((int(cameras), rate))
    return out


def config_label(cameras, rate):
    """``(8, 120.0)`` -> ``'8x120'``; rate 0 -> ``'8xmax'``."""
    return f'{cameras}x{"max" if rate <= 0 else f"{rate:g}"}'


def node_wrapper(text, label):
    """Return the ``--node-wrapper`` command prefix of configuration ``label``."""
    return [word.replace('{label}', label) for word in shlex.split(text or '')]


def start_node(args, cameras, log, label='', name=None):
    """Start ``xfeat_node`` for ``cameras`` with the bench's parameters (``name``: its node)."""
    return start_node_process(
        {'cameras': cameras, 'backend': args.backend, 'weights': args.weights,
         'gpu': args.gpu, 'num_threads': args.threads, 'top_k': args.top_k,
         'max_frames_in_flight': args.max_frames_in_flight, 'queue_size': args.queue_size,
         'descriptor_encoding': args.descriptor_encoding,
         'input_qos_reliability': 'reliable', 'output_qos_reliability': 'reliable',
         'input_transport': 'compressed' if args.encoding in COMPRESSED else 'raw',
         **dict(args.node_param)}, log,
        extra_args=('-r', f'__node:={name}') if name else (),
        wrapper=node_wrapper(args.node_wrapper, label))


class NodeGroup:
    """
    The node processes of one configuration (``--node-processes``), seen as one.

    Cameras are dealt over the processes as over the publishers; each process
    logs to its own file. ``poll`` is None while all run.
    """

    def __init__(self, args, cameras, log_dir, label):
        """Start one node per camera group (named ``xfeat_<k>`` when there are several)."""
        groups = split_cameras(cameras, args.node_processes)
        single = len(groups) == 1
        self.log_paths = [Path(log_dir) / (f'node_{label}.log' if single else
                                           f'node_{label}_{k}.log') for k in range(len(groups))]
        self.processes = []
        for k, (group, path) in enumerate(zip(groups, self.log_paths)):
            with open(path, 'w') as log:
                self.processes.append(start_node(args, group, log, label,
                                                 None if single else f'xfeat_{k}'))

    def poll(self):
        """Return the first exit code among the processes, None while all run."""
        codes = [p.poll() for p in self.processes]
        return next((c for c in codes if c is not None), None)

    @property
    def pids(self):
        """Process ids of the nodes."""
        return [p.pid for p in self.processes]

    def stop(self):
        """Stop every node; return the worst exit code."""
        codes = [stop_process(p) for p in self.processes]
        return next((c for c in codes if c), codes[0] if codes else None)

    def merged_log_lines(self, parse):
        """Merge the per-camera dicts ``parse`` reads from each log (None if any lacks it)."""
        merged = {}
        for path in self.log_paths:
            part = parse(path.read_text(errors='replace'))
            if part is None:
                return None
            merged.update(part)
        return merged


def split_cameras(cameras, processes):
    """Deal camera names round-robin over ``processes`` publisher processes."""
    processes = max(1, min(processes, len(cameras)))
    return [cameras[i::processes] for i in range(processes)]


def node_counts(final, warmup_published, warmup_delivered):
    """Received / processed by the node in the measurement (warm-up frames subtracted)."""
    if not final:
        return None, None
    received = sum(c['received'] if 'received' in c else  # older nodes: no such counter
                   c.get('accepted', 0) + c.get('dropped_queue_full', 0) + c.get('rejected', 0)
                   for c in final.values())
    processed = sum(c.get('published', 0) for c in final.values())
    return received - warmup_published, processed - warmup_delivered


class _Run:
    """What one node configuration gathered (filled step by step, read once at the end)."""

    def __init__(self):
        """Start empty."""
        self.reports = []
        self.warm_published = self.warm_delivered = 0
        self.ticks = (None, None)
        self.wall_s = 0.0
        self.memory = (None, None)
        self.baseline_mib = None


def _measure(args, rate, collector, node, publishers, run):
    """Warm up, publish for ``args.duration`` s, drain; raises RuntimeError on failure."""
    if not collector.spin_until(collector.node_ready, args.start_timeout,
                                lambda: node.poll() is None):
        raise RuntimeError(f'node not ready (exit code {node.poll()})')
    for pub in publishers:
        if pub.wait_event('ready', args.start_timeout) is None:
            raise RuntimeError('a publisher process did not start')
    # Warm-up (CUDA graphs, workspaces, first allocations): published, then not counted.
    for pub in publishers:
        pub.send(f'warmup {args.warmup_frames} {args.warmup_rate}')
    for pub in publishers:
        event = pub.wait_event('warmup_done', 120.0)
        if event is None:
            raise RuntimeError('a publisher process failed its warm-up')
        if not event.get('all_acked', True):
            LOG.warning('warm-up frames not acknowledged by the node within the timeout')
        run.warm_published += sum(event['published'])
    # Every warm-up frame back, or none for a while: the node's queue (1 frame per
    # camera by default) drops warm-up bursts, and a dropped frame never comes back.
    state = {'count': -1, 'since': time.monotonic()}

    def warmed_up():
        if len(collector.received) != state['count']:
            state['count'], state['since'] = len(collector.received), time.monotonic()
        return (len(collector.received) >= run.warm_published
                or time.monotonic() - state['since'] > args.drain_idle)
    collector.spin_until(warmed_up, 60.0, lambda: node.poll() is None)
    collector.spin(NODE_SETTLE_S)
    run.warm_delivered = len(collector.take_rows())
    heap.freeze_startup_objects()  # no full collection walks start-up's objects mid-run

    before = _cpu_ticks(node.pids)
    start = time.monotonic()
    for pub in publishers:
        pub.send(f'go {rate} {args.duration}')
    pending = list(publishers)
    deadline = start + args.duration + 60.0
    while pending and time.monotonic() < deadline:
        collector.spin(0.02)
        for pub in list(pending):
            event = pub.wait_event('report', 0.0)
            if event is not None:
                run.reports.append(event)
                pending.remove(pub)
            elif pub.process.poll() is not None:
                raise RuntimeError(f'a publisher process exited ({pub.process.returncode})')
    if pending:
        raise RuntimeError('a publisher process did not report')
    run.ticks = (before, _cpu_ticks(node.pids))
    run.wall_s = time.monotonic() - start
    published = sum(sum(r['published']) for r in run.reports)
    # Drain: the node finishes its queues; stop when all arrived or nothing new for a while.
    last_count, last_change = -1, time.monotonic()
    deadline = time.monotonic() + args.drain_timeout
    while time.monotonic() < deadline and len(collector.received) < published:
        collector.spin(0.1)
        if len(collector.received) != last_count:
            last_count, last_change = len(collector.received), time.monotonic()
        elif time.monotonic() - last_change > args.drain_idle:
            break
    run.memory = _gpu_memory(node.pids, run.baseline_mib)


def _cpu_ticks(pids):
    ticks = [proc_cpu_ticks(pid) for pid in pids]
    return None if any(t is None for t in ticks) else sum(ticks)


def _gpu_memory(pids, baseline_mib):
    readings = [gpu_memory_of(pid, baseline_mib if len(pids) == 1 else None) for pid in pids]
    if any(mib is None for mib, _ in readings):
        return None, readings[0][1] if len(pids) == 1 else 'n/a (a node pid not listed)'
    return sum(mib for mib, _ in readings), readings[0][1] + (
        f', sum of {len(pids)} node processes' if len(pids) > 1 else '')


def run_node_config(args, cameras_count, rate, log_dir):
    """One node configuration end to end: node, collector, publishers; its result dict."""
    label = config_label(cameras_count, rate)
    cameras = [f'cam{i}' for i in range(cameras_count)]
    result = {'label': label, 'cameras': cameras_count, 'rate_hz': rate,
              'target_hz': cameras_count * rate if rate > 0 else None,
              'duration_s': args.duration, 'error': None}
    result['shm_ports_before'] = dds.shm_ports()  # leftovers a new participant may wait on
    pub_log_path = Path(log_dir) / f'publisher_{label}.log'
    run = _Run()
    run.baseline_mib = gpu_memory_used_mib()
    collector = Collector(cameras, args.collector_take)
    result['collector_take'] = collector.take
    with open(pub_log_path, 'w') as pub_log:
        node = NodeGroup(args, cameras, log_dir, label)
        node_log_path = node.log_paths[0]
        publishers = [PublisherProcess(group, args, pub_log)
                      for group in split_cameras(cameras, args.publisher_processes)]
        try:
            _measure(args, rate, collector, node, publishers, run)
        except RuntimeError as exc:
            result['error'] = f'{exc}; see {node_log_path} and {pub_log_path}'
            LOG.error('%s: %s', label, result['error'])
        finally:
            for pub in publishers:
                pub.stop()
            code = node.stop()
            rows = list(collector.received)
            collector.close()
    if collector.errors:   # a callback on the receiver's thread failed: rows may be missing
        result['collector_errors'] = collector.errors[:5]
        LOG.error('%s: the collector failed %d times, first: %s', label,
                  len(collector.errors), collector.errors[0])
    final = node.merged_log_lines(parse_final_counts)
    received, processed = node_counts(final, run.warm_published, run.warm_delivered)
    measured = [row for row in rows if not row[1].startswith('w')]
    latencies = [(row[3] - row[2]) / 1e6 for row in measured]
    at_reader = [(row[5] - row[2]) / 1e6 for row in measured]
    delivered = len({(row[0], row[1]) for row in measured})
    published = sum(sum(r['published']) for r in run.reports)
    pub_s = ((max(r['end_ns'] for r in run.reports) - min(r['start_ns'] for r in run.reports))
             / 1e9 if run.reports else 0.0)
    first_stamp = min((row[2] for row in measured), default=0)
    last_arrived = max((row[5] for row in measured), default=0)
    result.update({
        'published': published,
        'publish_hz': published / max(args.duration, pub_s) if published else None,
        'node_received': received, 'node_processed': processed, 'delivered': delivered,
        'dropped': published - delivered,
        'publish_failed': sum(sum(r.get('failed', ())) for r in run.reports),
        'duplicates': len(measured) - delivered,
        'delivered_per_camera': [sum(1 for row in measured if row[0] == i)
                                 for i in range(cameras_count)],
        'output_hz': (delivered / max(args.duration, (last_arrived - first_stamp) / 1e9)
                      if delivered else None),
        'latency': latency_summary(latencies),
        'latency_at_reader': latency_summary(at_reader),
        'keypoints_transport': latency_summary([(row[5] - row[4]) / 1e6 for row in measured]),
        'collector_wait': latency_summary([(row[3] - row[5]) / 1e6 for row in measured]),
        'node_cpu_percent': cpu_percent(*run.ticks, run.wall_s, os.sysconf('SC_CLK_TCK')),
        'gpu_memory_mib': run.memory[0], 'gpu_memory_source': run.memory[1],
        'warmup': {'published': run.warm_published, 'delivered': run.warm_delivered},
        'node_exit_code': code, 'node_counts': final,
        'node_processes': len(node.processes),
        'node_stage_medians_ms': node.merged_log_lines(parse_stage_medians),
        'publisher_reports': run.reports,
        'latencies_ms': [round(v, 3) for v in latencies],
        'latencies_at_reader_ms': [round(v, 3) for v in at_reader]})
    if result['publish_failed']:
        first = next(r['first_error'] for r in run.reports if r.get('first_error'))
        LOG.warning('%s: the cameras could not publish %d images (%s); not counted as '
                    'published or dropped', label, result['publish_failed'], first)
    return result


def run_node(args):
    """Node mode: every configuration, then the table, JSON and PNG."""
    domain = ros_environment(args.domain_id, args.dds_profile)
    malloc = heap.keep_large_buffers()  # the collector's takes (node and publishers: their own)
    configs = parse_node_configs(args.configs)
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix='xfeat_bench_'))
    log_dir.mkdir(parents=True, exist_ok=True)
    if not args.weights:
        args.weights = default_weights()
    results = {'mode': 'node', 'environment': environment(),
               'settings': {'backend': args.backend, 'top_k': args.top_k,
                            'resolution': args.resolution, 'encoding': args.encoding,
                            'duration_s': args.duration,
                            'max_frames_in_flight': args.max_frames_in_flight,
                            'queue_size': args.queue_size,
                            'descriptor_encoding': args.descriptor_encoding,
                            'input_qos_reliability': 'reliable',
                            'warmup_frames_per_camera': args.warmup_frames,
                            'publisher_processes': args.publisher_processes,
                            'node_processes': args.node_processes,
                            'node_params': dict(args.node_param),
                            'images': str(args.images), 'ros_domain_id': domain,
                            'ros_automatic_discovery_range': 'LOCALHOST',
                            'dds_profile': os.environ.get(dds.PROFILE_ENV, ''),
                            'collector_heap': malloc,
                            'collector_take': args.collector_take,
                            'latency': 'image header stamp (set just before publish) to '
                                       'receipt of its Keypoints in the collector process '
                                       '(its Python callback); latency_at_reader: to the '
                                       "collector's DDS reader receiving it (the sample's "
                                       'reception timestamp), so without the collector '
                                       "process's own backlog (collector_wait); "
                                       'keypoints_transport: from the node writing the '
                                       'Keypoints (source timestamp) to that reception',
                            'node_counts': "from the node's final counts log line, warm-up "
                                           'frames subtracted', 'log_dir': str(log_dir)},
               'configs': []}
    sys.stdout.write(f'xfeat_bench node: {args.backend}, {args.resolution} {args.encoding}, '
                     f'top_k {args.top_k}, {args.duration:g} s per configuration, ROS_DOMAIN_ID '
                     f'{domain} (LOCALHOST), logs in {log_dir}\n')
    for cameras, rate in configs:
        row = run_node_config(args, cameras, rate, log_dir)
        results['configs'].append(row)
        lat = row.get('latency', {})
        sys.stdout.write(f'  {row["label"]}: published {row.get("published")}, delivered '
                         f'{row.get("delivered")}, p99 {lat.get("p99_ms")} ms'
                         + (f', error: {row["error"]}' if row['error'] else '') + '\n')
        sys.stdout.flush()
        write_json(args.json, results)
    sys.stdout.write('\n' + node_table(results))
    if args.png:
        try:
            plot_latencies(results, args.png)
        except ImportError as exc:
            sys.stdout.write(f'no PNG ({exc}); later: xfeat_bench plot {args.json} '
                             f'--png {args.png}\n')
    return 0 if all(not r['error'] for r in results['configs']) else 1


def proc_cpu_ticks(pid):
    """Return user + system CPU ticks of a process (psutil, else /proc), or None."""
    try:
        import psutil
        times = psutil.Process(pid).cpu_times()
        return (times.user + times.system) * os.sysconf('SC_CLK_TCK')
    except ImportError:
        pass
    except Exception:  # noqa: B902 - the process is gone
        return None
    try:
        text = Path(f'/proc/{pid}/stat').read_text()
    except OSError:
        return None
    fields = text[text.rindex(')') + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)


def gpu_memory_used_mib():
    """``memory.used`` of GPU 0 in MiB (nvidia-smi), or None."""
    text = run_text(['nvidia-smi', '--query-gpu=memory.used', '--format=csv,noheader,nounits'])
    try:
        return float(text.splitlines()[0]) if text else None
    except ValueError:
        return None


def gpu_memory_of(pid, baseline_mib):
    """GPU memory of process ``pid``: (MiB, how it was read) or (None, why not)."""
    text = run_text(['nvidia-smi', '--query-compute-apps=pid,used_memory',
                     '--format=csv,noheader,nounits'])
    if text is None:
        return None, 'n/a (no nvidia-smi)'
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(',')]
        if len(parts) == 2 and parts[0] == str(pid):
            return float(parts[1]), 'nvidia-smi, node pid'
    used = gpu_memory_used_mib()
    if used is not None and baseline_mib is not None:
        return used - baseline_mib, 'nvidia-smi memory.used minus before the node started'
    return None, 'n/a (node pid not listed)'
