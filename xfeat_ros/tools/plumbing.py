# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
What the tools share: upstream XFeat, records of the run's environment, a node process.

* :func:`load_upstream` imports upstream XFeat from a checkout (``modules/``)
  and loads a weights dict into its network (``xfeat_bench --upstream``,
  ``xfeat_eval --upstream``).
* :func:`environment`, :func:`versions`, :func:`cpu_model`, :func:`git_commit`,
  :func:`git_dirty`, :func:`gpu_rows`
  record where and with what a measurement ran; :func:`gpu_present` tells a
  GPU machine (nvidia-smi lists a GPU).
* :func:`start_node` / :func:`stop_process` start ``xfeat_node`` as its own
  process with ``--ros-args`` parameters and stop it as Ctrl-C would;
  :func:`parse_final_counts` reads the counts it logs on the way out. The node
  benchmark, the demo, the soak script and the test harness start their nodes
  through these.
"""

import ast
import datetime
import os
from pathlib import Path
import platform
import re
import signal
import subprocess
import sys

import numpy as np

from xfeat_ros.errors import BackendError, WeightsError

REPO = Path(__file__).resolve().parents[2]


# -- upstream XFeat ------------------------------------------------------------------------------

def load_upstream(directory, weights, top_k, threshold, device='cpu'):
    """
    Return upstream's ``XFeat`` from a checkout, with ``weights`` loaded, on ``device``, in eval.

    ``directory`` holds ``modules/xfeat.py``; ``weights`` is the dict of
    :func:`xfeat_ros.features.weights.load_weights` (upstream's fine matcher may be
    absent). Raises :class:`BackendError` when torch, the checkout or a module
    it imports (such as tqdm) is missing and :class:`WeightsError` when the
    network does not take the weights.
    """
    try:
        import torch
    except ModuleNotFoundError as exc:
        raise BackendError('--upstream needs PyTorch (the torch module), which is not '
                           'installed') from exc
    directory = str(Path(directory).resolve())
    if not (Path(directory) / 'modules' / 'xfeat.py').is_file():
        raise BackendError(f'{directory} has no modules/xfeat.py (an upstream checkout)')
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        from modules.xfeat import XFeat
    except ModuleNotFoundError as exc:
        raise BackendError(f'upstream XFeat ({directory}) needs the Python module '
                           f'{exc.name!r}, which is not installed') from exc
    model = XFeat(weights=None, top_k=top_k, detection_threshold=threshold)
    state = {key: torch.from_numpy(np.asarray(value)) for key, value in weights.items()}
    missing, unexpected = model.net.load_state_dict(state, strict=False)
    missing = [key for key in missing if not key.startswith('fine_matcher.')]
    if missing or unexpected:
        raise WeightsError(f'upstream net does not take these weights: missing {missing}, '
                           f'unexpected {unexpected}')
    model.dev = torch.device(device)
    return model.to(model.dev).eval()


# -- environment record --------------------------------------------------------------------------

def module_version(module):
    """Return ``module.__version__``, or None where the module is missing or broken."""
    try:
        return __import__(module).__version__
    except Exception:  # noqa: B902 - a missing or broken package is just not recorded
        return None


def run_text(args, timeout=10):
    """Return the stripped stdout of a command that succeeded, else None."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit(directory=REPO, short=False):
    """Return the commit checked out in ``directory`` (``--short`` with ``short``), or None."""
    return run_text(['git', '-C', str(directory), 'rev-parse', *(['--short'] if short else []),
                     'HEAD']) or None


def git_dirty(directory=REPO):
    """Tell whether tracked files in ``directory`` differ from its commit (None without git)."""
    status = run_text(['git', '-C', str(directory), 'status', '--porcelain',
                       '--untracked-files=no'])
    return None if status is None else bool(status)


def cpu_model():
    """Return the CPU's model name from /proc/cpuinfo, or None."""
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return None


def versions(modules):
    """Return ``{name: version}`` of Python and of the importable ``modules`` (others left out)."""
    out = {'python': platform.python_version()}
    for module in modules:
        version = module_version(module)
        if version is not None:
            out['opencv' if module == 'cv2' else module] = version
    return out


def gpu_rows(query='name,driver_version,memory.total'):
    """
    Return nvidia-smi's CSV rows of ``query``, one per GPU; ``[]`` without a GPU or nvidia-smi.

    How the tools tell a GPU machine: the benchmark records, and the launch
    file's note on CUDA MPS (said only where the nodes use a GPU).
    """
    text = run_text(['nvidia-smi', f'--query-gpu={query}', '--format=csv,noheader'])
    return [row.strip() for row in (text or '').splitlines() if row.strip()]


def gpu_present():
    """Tell whether nvidia-smi lists a GPU on this machine."""
    return bool(gpu_rows('name'))


def environment():
    """Date, command, machine, GPU, driver and library versions of this run."""
    env = {'date_utc': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
           'command': [Path(sys.argv[0]).name] + sys.argv[1:],
           'git_commit': git_commit(REPO, short=True), 'git_dirty': git_dirty(REPO),
           'python': platform.python_version(), 'machine': platform.machine(),
           'cpu': cpu_model(), 'cores': os.cpu_count(), 'load_average': list(os.getloadavg()),
           'numpy': np.__version__,
           'onnxruntime': module_version('onnxruntime'), 'torch': module_version('torch')}
    gpu = gpu_rows()
    if gpu:
        env['gpu'] = gpu[0]
        env['cupy'] = module_version('cupy')
        try:
            import torch
            env['torch_cuda'] = torch.version.cuda
        except ImportError:
            pass
    return env


# -- a node process ------------------------------------------------------------------------------

def ros_param(value):
    """Format a Python value for ``--ros-args -p name:=value`` (strings in lists quoted)."""
    if isinstance(value, (list, tuple)):
        return '[' + ','.join(f"'{v}'" if isinstance(v, str) else ros_param(v)
                              for v in value) + ']'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value if value else "''"
    return repr(value)


def node_command(params, extra_args=()):
    """Return the command line of ``python -m xfeat_ros.ros.node`` with ``params`` set."""
    command = [sys.executable, '-m', 'xfeat_ros.ros.node', '--ros-args', *extra_args]
    for name, value in params.items():
        command += ['-p', f'{name}:={ros_param(value)}']
    return command


def start_node(params, log, extra_args=(), wrapper=()):
    """
    Start ``xfeat_node`` with ``params`` (``{name: value}``); returns its ``Popen``.

    ``wrapper``: a command prefix the node runs under (a profiler such as
    ``py-spy record -o out.txt --``), empty for none.

    Its stdout and stderr go to ``log``, an open file or a path (opened here;
    the child keeps its own handle). The child inherits this process's
    environment (ROS_DOMAIN_ID, ROS_AUTOMATIC_DISCOVERY_RANGE, the DDS profile)
    and runs unbuffered so that its log is current.
    """
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    command = [*wrapper, *node_command(params, extra_args)]
    if isinstance(log, (str, Path)):
        with open(log, 'w') as handle:
            return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def stop_process(process, timeout=20.0):
    """SIGINT a child (as Ctrl-C) and wait; kill after ``timeout`` s. Returns its exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def parse_final_counts(log_text, line='final counts'):
    """Per-camera counters of the node's last ``final counts: {...}`` log line, else None."""
    found = re.findall(re.escape(line) + r': (\{.*\})', log_text)
    if not found:
        return None
    try:
        return ast.literal_eval(found[-1])
    except (ValueError, SyntaxError):
        return None


def parse_stage_medians(log_text):
    """Per camera ``{stage: median ms}`` of the node's ``stage medians, ms: {...}`` line."""
    return parse_final_counts(log_text, 'stage medians, ms')
