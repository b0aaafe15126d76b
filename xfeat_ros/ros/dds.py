# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The DDS environment of every process that creates a ROS node (no rclpy here).

One helper, :func:`ros_environment`, is called by every tool that starts ROS
nodes (``xfeat_play``, ``xfeat_demo``, ``xfeat_bench``, the tests) *before*
``rclpy.init`` and before child processes start, so that the node and its
peers share the same transport settings:

* ``FASTDDS_DEFAULT_PROFILES_FILE`` (the variable Fast DDS 3.x, ROS 2 kilted's
  default middleware, reads once per process when its first participant is
  created) points at the shipped profile :data:`PROFILE_FILE`: a shared-memory
  segment large enough for several 4K images or a 65k-keypoint Keypoints
  message, UDPv4 kept for other hosts. Without it, any sample larger than
  Fast DDS's default 512 KiB segment (one 640x480 RGB image already is) goes
  over UDP fragments.
* optionally ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` and a
  ``ROS_DOMAIN_ID`` (an exported one is kept, else 1..100 at random).

The profile choice, the same everywhere (the launch file's ``dds_profile``
argument, ``--dds-profile`` of the tools):

* :data:`SHIPPED` (``'shipped'``, the default): the shipped profile;
* a path: that XML file;
* ``''``: leave the environment alone (Fast DDS defaults, or whatever the
  user exported).

An already exported ``FASTDDS_DEFAULT_PROFILES_FILE`` always wins: a user or a
robot with a profile of its own keeps it. ``RMW_FASTRTPS_USE_QOS_FROM_XML`` is
never set: ROS QoS (reliability, depth) stay those of the code, the profile
only configures the participant's transports.

:func:`teardown_guard` bounds a ROS process's teardown: Fast DDS 3.2 (the
PyPI wheels) can spin for minutes, holding the interpreter lock and deaf to
SIGINT and SIGTERM, when it deletes a participant while a discovery callback
is in flight (eProsima/Fast-DDS#6513; seen here when several processes ended
at once).
"""

from contextlib import contextmanager
from dataclasses import dataclass
import faulthandler
import os
from pathlib import Path
import random
import sys
import time

from xfeat_ros.errors import ParameterError

PACKAGE = 'xfeat_ros'
PROFILE_ENV = 'FASTDDS_DEFAULT_PROFILES_FILE'
PROFILE_NAME = 'fastdds_shm.xml'
SHIPPED = 'shipped'
DISCOVERY_ENV = 'ROS_AUTOMATIC_DISCOVERY_RANGE'
DOMAIN_ENV = 'ROS_DOMAIN_ID'
TEARDOWN_LIMIT_S = 10.0


def _candidate_dirs():
    """Config folders, installed share directory first, then the repository's."""
    for prefix in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep):
        if prefix:
            yield Path(prefix) / 'share' / PACKAGE / 'config'
    yield Path(sys.prefix) / 'share' / PACKAGE / 'config'
    yield Path(__file__).resolve().parents[2] / 'config'


def shipped_profile():
    """Return the absolute Path of the shipped Fast DDS profile (config/fastdds_shm.xml)."""
    tried = []
    for folder in _candidate_dirs():
        path = folder / PROFILE_NAME
        if path.is_file():
            return path.resolve()
        tried.append(str(folder))
    raise ParameterError(f'{PROFILE_NAME} not found (looked in {", ".join(tried)})')


@dataclass(frozen=True)
class ProfileDecision:
    """
    What to do about ``FASTDDS_DEFAULT_PROFILES_FILE`` for one requested profile.

    ``path`` is the value to set (None: set nothing); ``source`` says why:
    ``'shipped'``, ``'argument'``, ``'environment'`` (an exported value kept)
    or ``'none'`` (left alone on request); ``ignored`` is True when an explicit
    request was overridden by the environment.
    """

    path: str
    source: str
    ignored: bool = False

    def describe(self):
        """One line for logs and benchmark records."""
        if self.source == 'environment':
            note = ' (the requested profile has no effect)' if self.ignored else ''
            return f'{PROFILE_ENV} from the environment{note}'
        if self.source == 'none':
            return 'Fast DDS default transports (no profile)'
        return f'{PROFILE_ENV}={self.path} ({self.source})'


def decide_profile(requested=SHIPPED, env=None):
    """
    Decide the profile for ``requested`` (``'shipped'``, a path, or ``''``) given ``env``.

    Pure: reads ``env`` (default ``os.environ``) and the file system, changes
    nothing. Raises :class:`ParameterError` for a path that is not a file (also
    when an exported profile would win).
    """
    env = os.environ if env is None else env
    requested = '' if requested is None else str(requested).strip()
    exported = env.get(PROFILE_ENV, '')
    if not requested:
        return ProfileDecision(None, 'none')
    path = None
    if requested != SHIPPED:  # a typo is an error even where the environment wins
        path = Path(requested).expanduser()
        if not path.is_file():
            raise ParameterError(f'DDS profile {requested!r} is not a file')
        path = path.resolve()
    if exported:
        explicit = path is not None and path != _same_file(exported)
        return ProfileDecision(None, 'environment', ignored=explicit)
    if path is None:
        return ProfileDecision(str(shipped_profile()), 'shipped')
    return ProfileDecision(str(path), 'argument')


def driver_profile_hint(env=None):
    """
    Return the fix for large images lost between a best-effort camera driver and the node.

    Fast DDS keeps a sample in the *publisher's* shared-memory segment (512 KiB
    by default): a camera driver on Fast DDS defaults drops most large images a
    best-effort reader asks for (docs/transport.md). The fix is the shipped
    profile in the driver's environment; the node's own (``env``, default
    ``os.environ``) is named too when it lacks one (the launch file's
    ``dds_profile`` gives it).
    """
    env = os.environ if env is None else env
    try:
        path = shipped_profile()
    except ParameterError:
        path = f'<share>/{PACKAGE}/config/{PROFILE_NAME}'
    hint = (f'start the camera driver with the shipped Fast DDS profile, {PROFILE_ENV}={path} '
            '(on Fast DDS defaults its 512 KiB shared memory drops large images; '
            'docs/transport.md)')
    if not env.get(PROFILE_ENV):
        hint += (f'; this node runs without a profile too: launch it with '
                 f'dds_profile:={SHIPPED} (the default) or the same variable')
    return hint


def _same_file(path):
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return path


def ros_environment(profile=SHIPPED, local=True, domain_id=None, env=None):
    """
    Prepare ``env`` (default ``os.environ``) for ROS nodes; returns what was used.

    ``profile`` as :func:`decide_profile`. ``local``: set
    ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` and make sure a
    ``ROS_DOMAIN_ID`` is set (``domain_id`` if given, else the exported one,
    else 1..100 at random). Call before ``rclpy.init`` (Fast DDS reads its profile
    file once per process) and before starting child processes (they inherit
    ``os.environ``). Returns a dict: ``profile`` (the
    :class:`ProfileDecision`), ``domain_id`` (int or None) and
    ``discovery_range`` (str or None).
    """
    env = os.environ if env is None else env
    decision = decide_profile(profile, env)
    if decision.path is not None:
        env[PROFILE_ENV] = decision.path
    if local:
        env[DISCOVERY_ENV] = 'LOCALHOST'
        if domain_id is not None:
            env[DOMAIN_ENV] = str(int(domain_id))
        elif not env.get(DOMAIN_ENV):
            env[DOMAIN_ENV] = str(random.randint(1, 100))
    domain = env.get(DOMAIN_ENV)
    return {'profile': decision, 'domain_id': int(domain) if domain else None,
            'discovery_range': env.get(DISCOVERY_ENV)}


def add_profile_argument(parser):
    """Add ``--dds-profile`` (shipped | PATH | '') to an argparse parser."""
    parser.add_argument(
        '--dds-profile', default=SHIPPED, metavar='PROFILE',
        help=f"Fast DDS profile of this tool's ROS processes: '{SHIPPED}' (default: "
             f"{PROFILE_NAME}, shared memory for large messages), a path, or '' for "
             f'Fast DDS defaults; an exported {PROFILE_ENV} always wins')


SHM_DIR = Path('/dev/shm')


def shm_ports(directory=SHM_DIR, now=None):
    """
    Fast DDS shared-memory port files in ``directory``: ``[(name, age in s)]``, by name.

    A port file outlives a process that was killed; a new participant that
    opens it checks whether its listener is alive and may wait ~1/3 of the
    transport's health-check timeout doing so (``docs/design-notes.md``: the rare
    ~0.3 s stalls). The benchmark records them before each run.
    """
    now = time.time() if now is None else now
    try:
        entries = sorted(Path(directory).glob('fastdds_port*'))
    except OSError:
        return []
    found = []
    for path in entries:
        try:
            found.append((path.name, round(now - path.stat().st_mtime, 1)))
        except OSError:
            continue  # removed meanwhile
    return found


@contextmanager
def teardown_guard(limit_s=TEARDOWN_LIMIT_S, stream=None):
    """
    End the process (exit status 1) if the body has not finished after ``limit_s`` seconds.

    For the ``destroy_node`` / ``rclpy.shutdown`` of a process about to exit. The watchdog is
    :func:`faulthandler.dump_traceback_later`'s C thread, which needs no interpreter lock (a
    Python thread could not run while Fast DDS spins with it held); it writes every thread's
    Python stack to ``stream`` (default stderr; the process's own stderr where that one has
    no file descriptor, as under a test's capture) before it exits.
    """
    armed = False
    for target in (sys.stderr if stream is None else stream, sys.__stderr__):
        try:
            faulthandler.dump_traceback_later(limit_s, exit=True, file=target)
        except (AttributeError, ValueError, OSError):  # no file descriptor (a test's capture)
            continue
        armed = True
        break
    try:
        yield
    finally:
        if armed:
            faulthandler.cancel_dump_traceback_later()
