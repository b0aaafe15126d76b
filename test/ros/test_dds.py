# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
xfeat_ros.ros.dds and the shipped Fast DDS profile (config/fastdds_shm.xml).

The helper's choices are tested on plain dicts. The profile is then loaded by
real ROS processes (test/dds_probe.py): Fast DDS maps its 32 MiB segment,
many processes run side by side and leave no segment behind, UDPv4 stays
available for other hosts, and - with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST -
no DDS packet of this run's domain appears on a non-loopback interface while
two nodes exchange images. The last two need root (a private network
namespace; a packet socket) and are skipped with that reason elsewhere.
"""

import glob
import json
import os
from pathlib import Path
import select
import socket
import struct
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree

import pytest

from xfeat_ros.errors import ParameterError
from xfeat_ros.ros import dds

REPO = Path(__file__).resolve().parents[2]
PROBE = [sys.executable, str(REPO / 'test' / 'dds_probe.py')]
NS = {'f': 'http://www.eprosima.com'}
SEGMENT_BYTES = 32 * 1024 * 1024
RGB_4K_BYTES = 3840 * 2160 * 3
KEYPOINT_BYTES = 2 * 4 + 4 + 64 * 4 + 8 + 4  # xy, score, descriptor, track id, age
KEYPOINTS_65K_BYTES = 65536 * KEYPOINT_BYTES
PORT_DESCRIPTORS = 8192
FRAGMENT_BYTES = 65500  # UDPv4's limit: the fragment size of every transport (rmw adds UDPv4)


def test_shipped_profile_is_found_and_chosen_by_default():
    path = dds.shipped_profile()
    assert path.name == dds.PROFILE_NAME and path.is_file()
    env = {}
    used = dds.ros_environment(env=env)
    assert env[dds.PROFILE_ENV] == str(path)
    assert env[dds.DISCOVERY_ENV] == 'LOCALHOST'
    assert 1 <= int(env[dds.DOMAIN_ENV]) <= 100
    assert used['profile'].source == 'shipped' and used['domain_id'] == int(env[dds.DOMAIN_ENV])


def test_exported_profile_and_domain_win():
    env = {dds.PROFILE_ENV: '/robot/own.xml', dds.DOMAIN_ENV: '42'}
    used = dds.ros_environment(env=env)
    assert env == {dds.PROFILE_ENV: '/robot/own.xml', dds.DOMAIN_ENV: '42',
                   dds.DISCOVERY_ENV: 'LOCALHOST'}
    assert used['profile'].source == 'environment' and not used['profile'].ignored
    assert used['domain_id'] == 42
    # An explicit other profile loses to the exported one, and says so.
    other = dds.decide_profile(str(dds.shipped_profile()), env)
    assert other.path is None and other.ignored and 'no effect' in other.describe()


def test_empty_profile_leaves_environment_alone():
    env = {}
    used = dds.ros_environment('', local=False, env=env)
    assert env == {} and used['profile'].source == 'none' and used['domain_id'] is None


def test_explicit_domain_and_profile_path(tmp_path):
    own = tmp_path / 'mine.xml'
    own.write_text('<dds/>')
    env = {dds.DOMAIN_ENV: '3'}
    dds.ros_environment(str(own), domain_id=17, env=env)
    assert env[dds.DOMAIN_ENV] == '17' and env[dds.PROFILE_ENV] == str(own.resolve())
    for env in ({}, {dds.PROFILE_ENV: str(own)}):  # a typo is reported even where env wins
        with pytest.raises(ParameterError, match='not a file'):
            dds.ros_environment(str(tmp_path / 'absent.xml'), env=env)


def test_profile_argument():
    import argparse
    parser = argparse.ArgumentParser()
    dds.add_profile_argument(parser)
    assert parser.parse_args([]).dds_profile == dds.SHIPPED
    assert parser.parse_args(['--dds-profile', '']).dds_profile == ''


def test_driver_profile_hint_names_the_shipped_profile_for_the_camera_driver():
    profiled = {dds.PROFILE_ENV: '/robot/own.xml'}
    hint = dds.driver_profile_hint(profiled)
    assert 'camera driver' in hint and f'{dds.PROFILE_ENV}={dds.shipped_profile()}' in hint
    assert 'dds_profile' not in hint  # the node has a profile: only the driver is named
    bare = dds.driver_profile_hint({})
    assert bare.startswith(hint) and f'dds_profile:={dds.SHIPPED}' in bare


def test_profile_content():
    root = ElementTree.parse(dds.shipped_profile()).getroot()
    assert root.tag == '{http://www.eprosima.com}dds'
    descriptors = {d.findtext('f:transport_id', namespaces=NS): d
                   for d in root.iterfind('f:profiles/f:transport_descriptors/'
                                          'f:transport_descriptor', NS)}
    [participant] = root.findall('f:profiles/f:participant', NS)
    assert participant.get('is_default_profile') == 'true'
    used = [t.text for t in participant.iterfind('f:rtps/f:userTransports/f:transport_id', NS)]
    kinds = {descriptors[t].findtext('f:type', namespaces=NS): descriptors[t] for t in used}
    assert set(kinds) == {'SHM', 'UDPv4'}
    segment = int(kinds['SHM'].findtext('f:segment_size', namespaces=NS))
    assert segment == SEGMENT_BYTES
    assert segment > max(RGB_4K_BYTES, KEYPOINTS_65K_BYTES)  # the large samples fit whole
    # Eight cameras' 4096-keypoint Keypoints (18 fragments), each fragment pushed twice
    # (rmw_fastrtps's own SHM transport beside this one), 16 messages deep.
    queue = int(kinds['SHM'].findtext('f:port_queue_capacity', namespaces=NS))
    fragments = -(-(4096 * KEYPOINT_BYTES) // FRAGMENT_BYTES)
    assert fragments == 18
    assert queue == PORT_DESCRIPTORS and queue >= 8 * fragments * 2 * 16
    assert participant.findtext('f:rtps/f:useBuiltinTransports', namespaces=NS) == 'false'
    # Only transports: the ROS QoS of the code stay in charge.
    assert root.find('f:profiles/f:data_writer', NS) is None
    assert root.find('f:profiles/f:data_reader', NS) is None


def _guarded(body_seconds, limit_s):
    """Run a process whose teardown holds the interpreter lock in C for ``body_seconds``."""
    code = (
        'import ctypes, sys, time\n'
        'from xfeat_ros.ros import dds\n'
        'def destroy_node():\n'
        f'    ctypes.PyDLL(None).usleep({int(body_seconds * 1e6)})  # in C, lock held\n'
        f'with dds.teardown_guard({limit_s}):\n'
        '    destroy_node()\n'
        f'time.sleep({2 * limit_s})  # past the limit: a cancelled watchdog stays quiet\n'
        'print("exited normally")\n')
    start = time.monotonic()
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)))
    return done, time.monotonic() - start


def test_teardown_guard_ends_a_teardown_stuck_in_c():
    """A teardown spinning in C with the interpreter lock held still ends the process."""
    done, elapsed = _guarded(body_seconds=30, limit_s=1.0)
    assert done.returncode == 1 and 'exited normally' not in done.stdout
    assert elapsed < 20, elapsed  # the 30 s body was cut short
    assert 'Timeout' in done.stderr and 'in destroy_node' in done.stderr, done.stderr


def test_teardown_guard_is_cancelled_once_the_teardown_ends():
    done, _ = _guarded(body_seconds=0.01, limit_s=0.5)
    assert done.returncode == 0 and done.stdout.strip() == 'exited normally', done.stderr
    assert done.stderr == ''


def test_teardown_guard_without_a_file_descriptor_uses_the_process_stderr():
    import io
    with dds.teardown_guard(0.5, stream=io.StringIO()):
        pass
    time.sleep(1.0)  # past the limit: this test's process must still be here to finish it


# -- real processes ------------------------------------------------------------------------------

def probe_env():
    """Return this run's environment with the shipped profile (LOCALHOST, one domain)."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env.pop(dds.PROFILE_ENV, None)
    dds.ros_environment(env=env)
    return env


def run_probes(commands, env, timeout=90):
    """Run probe processes side by side; return their (last JSON line, stderr) each."""
    processes = [subprocess.Popen(PROBE + command, env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for command in commands]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=timeout)
        lines = [json.loads(line) for line in out.splitlines() if line.startswith('{')]
        assert process.returncode == 0, err[-2000:]
        results.append((lines[-1], err))
    return results


def test_fast_dds_maps_the_profile_segment():
    [(report, err)] = run_probes([['hold']], probe_env())
    sizes = sorted(report['segments'].values())
    # The profile's 32 MiB segment (plus Fast DDS's bookkeeping), and rmw_fastrtps's own
    # default 512 KiB one, which it adds under ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST.
    assert len(sizes) == 2 and sizes[0] < 1024 * 1024
    assert SEGMENT_BYTES <= sizes[1] < SEGMENT_BYTES + 4 * 1024 * 1024
    assert 'Error' not in err, err


def created_ports(env, tries=8):
    """
    Sizes of the SHM port files a ``hold`` probe created itself: {path: bytes}.

    A port file outlives a killed process, and a later process of the same
    domain opens it as it is: its size then tells the dead process's queue.
    The probe runs in domains of its own (ports are numbered by domain) until
    one holds no port file from before it.
    """
    domains = [int(env['ROS_DOMAIN_ID']) + k for k in range(tries)]
    for domain in (d % 200 + 1 for d in domains):
        before = set(glob.glob('/dev/shm/fastdds_port*'))
        [(report, err)] = run_probes([['hold']], dict(env, ROS_DOMAIN_ID=str(domain)))
        assert 'Error' not in err, err
        assert report['ports'], report  # its own unicast ports at least
        if not before & set(report['ports']):
            return report['ports']
    pytest.fail(f'every domain of {domains} (mod 200) had stale SHM port files in /dev/shm')


def test_profile_port_queue_reaches_fast_dds(tmp_path):
    # The same profile without port_queue_capacity (Fast DDS's 512) as the yardstick: the
    # ports through which a process is reached are files whose size follows the capacity
    # of the transport that created them, the profile's (registered before rmw's own).
    plain = tmp_path / 'plain.xml'
    text = dds.shipped_profile().read_text()
    plain.write_text(text.replace(f'<port_queue_capacity>{PORT_DESCRIPTORS}</port_queue_capacity>',
                                  ''))
    assert plain.read_text() != text
    sizes = {}
    for name, profile in (('shipped', None), ('plain', plain)):
        env = probe_env()
        if profile is not None:
            env[dds.PROFILE_ENV] = str(profile)
        sizes[name] = set(created_ports(env).values())
    # every port of the process holds the larger queue: >= 16 bytes a descriptor more
    assert min(sizes['shipped']) - max(sizes['plain']) >= (PORT_DESCRIPTORS - 512) * 16, sizes


def start_probe(env, mode, topic, *args):
    """Start a ``--linger`` probe (it ends when its stdin closes, see end_one_at_a_time)."""
    return subprocess.Popen(PROBE + [mode, '--topic', topic, '--linger', *args], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def report_in(line):
    """Return the probe's report that ``line`` holds, or None (its ``ready`` event, other text)."""
    if line.startswith('{') and json.loads(line).get('event') != 'ready':
        return json.loads(line)
    return None


def read_report(process, deadline):
    """Return the first JSON line ``process`` prints after its ``ready`` event, by ``deadline``."""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = process.stdout.readline()
        if not line:
            break
        found = report_in(line)
        if found is not None:
            return found
    raise AssertionError(f'probe {process.args[2:]} sent no report in time')


def end_one_at_a_time(processes, timeout=30):
    """Close each probe's stdin and wait for its exit before the next; return their stderr.

    Fast DDS 3.2 (the PyPI wheels) can spin for minutes in ``delete_participant`` when a
    discovery callback is in flight while it deletes (a participant listener's
    ``set_listener`` wait, eProsima/Fast-DDS#6513): seven processes ending in the same
    instant hit that about once in thirty runs here. One process ends at a time, each
    after the previous one has exited.
    """
    errors = []
    try:
        for process in processes:
            process.stdin.close()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise AssertionError(f'probe {process.args[2:]} did not exit within '
                                     f'{timeout} s of its stdin closing') from None
            errors.append(process.stderr.read())
            assert process.returncode == 0, errors[-1][-2000:]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return errors


def test_many_processes_share_memory_and_leave_nothing_behind():
    env = probe_env()
    publishers, per_publisher = 6, 3
    sub = start_probe(env, 'sub', 'many', '--count', str(publishers * per_publisher))
    assert json.loads(sub.stdout.readline()) == {'event': 'ready'}
    pubs = [start_probe(env, 'pub', 'many', '--count', str(per_publisher))
            for _ in range(publishers)]
    deadline = time.monotonic() + 90
    try:
        reports = [read_report(pub, deadline) for pub in pubs]
        received = read_report(sub, deadline)
    finally:
        errors = end_one_at_a_time(pubs + [sub])
    assert received['received'] == publishers * per_publisher
    assert received['sizes'] == [480 * 640 * 3]
    segments = dict(received['segments'])
    for report, pub_err in zip(reports, errors):
        assert report['acked'] and 'Error' not in pub_err, pub_err
        assert max(report['segments'].values()) >= SEGMENT_BYTES
        segments.update(report['segments'])
    assert len(segments) == 2 * (publishers + 1)  # every process had its own
    assert 'Error' not in errors[-1], errors[-1]
    left = [path for path in segments if Path(path).exists()]
    assert left == [], f'segments left in /dev/shm after a clean exit: {left}'


def domain_ports():
    """[low, high) of the RTPS UDP ports of this run's domain (port base 7400, gain 250)."""
    domain = int(os.environ[dds.DOMAIN_ENV])
    return 7400 + 250 * domain, 7400 + 250 * (domain + 1)


def interface_up(name):
    """Tell whether a network interface is up (IFF_UP); a down one carries nothing."""
    try:
        return bool(int(Path(f'/sys/class/net/{name}/flags').read_text(), 16) & 0x1)
    except (OSError, ValueError):
        return True


def _root_only(what):
    if os.geteuid() != 0:
        pytest.skip(f'{what} needs root')


def test_udpv4_kept_for_other_hosts(tmp_path):
    """Without LOCALHOST, the profile's participant still listens on UDPv4 (private netns)."""
    _root_only('a private network namespace (unshare -n)')
    low, high = domain_ports()
    # Control: the same profile without its UDPv4 transport must show no such port.
    shipped = dds.shipped_profile().read_text()
    udp = '          <transport_id>xfeat_udpv4</transport_id>\n'
    assert udp in shipped
    shm_only = tmp_path / 'shm_only.xml'
    shm_only.write_text(shipped.replace(udp, ''))
    script = 'ip link set lo up && ip link set lo multicast on && exec "$@"'
    ports = {}
    for profile in (dds.shipped_profile(), shm_only):
        env = probe_env()
        env[dds.DISCOVERY_ENV] = 'SUBNET'  # inside a namespace whose only interface is lo
        env[dds.PROFILE_ENV] = str(profile)
        done = subprocess.run(['unshare', '-n', 'sh', '-c', script, 'sh'] + PROBE + ['hold'],
                              env=env, input='', capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        ports[profile.name] = json.loads(done.stdout.splitlines()[-1])['udp_ports']
    assert [p for p in ports[dds.PROFILE_NAME] if low <= p < high], ports
    assert ports['shm_only.xml'] == []


ETH_P_ALL = 0x0003


def rtps_ports(frame):
    """(source port, destination port) of an RTPS-over-UDP Ethernet frame, else None."""
    if len(frame) < 14:
        return None
    ethertype, offset = struct.unpack_from('!H', frame, 12)[0], 14
    if ethertype == 0x8100:  # VLAN tag
        ethertype, offset = struct.unpack_from('!H', frame, 16)[0], 18
    if ethertype == 0x0800 and len(frame) >= offset + 20 and frame[offset + 9] == 17:
        udp = offset + (frame[offset] & 0x0F) * 4
    elif ethertype == 0x86DD and len(frame) >= offset + 40 and frame[offset + 6] == 17:
        udp = offset + 40
    else:
        return None
    if frame[udp + 8:udp + 12] != b'RTPS':
        return None
    return struct.unpack_from('!HH', frame, udp)


def test_localhost_discovery_stays_on_this_machine():
    """While two nodes exchange images, no RTPS packet of this domain leaves through a NIC."""
    _root_only('a packet socket (AF_PACKET)')
    low, high = domain_ports()
    interfaces = [name for _, name in socket.if_nameindex() if interface_up(name)]
    sockets = {}
    for name in interfaces:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        sock.bind((name, 0))
        sock.setblocking(False)
        sockets[sock] = name
    counts = dict.fromkeys(interfaces, 0)
    env = probe_env()

    def capture(done, deadline, report=None):
        """Count the domain's RTPS packets per interface until ``done()`` or ``deadline``."""
        while not done() and time.monotonic() < deadline:
            watched = list(sockets) + ([report.stdout] if report is not None else [])
            ready, _, _ = select.select(watched, [], [], 0.1)
            for sock in ready:
                if report is not None and sock is report.stdout:
                    found = report_in(report.stdout.readline())
                    if found is not None:
                        reports.append(found)
                    continue
                while True:
                    try:
                        frame = sock.recv(65535)
                    except BlockingIOError:
                        break
                    ports = rtps_ports(frame)
                    if ports and any(low <= p < high for p in ports):
                        counts[sockets[sock]] += 1

    reports = []
    sub = start_probe(env, 'sub', 'capture', '--count', '20')
    pub = start_probe(env, 'pub', 'capture', '--count', '20')
    try:
        deadline = time.monotonic() + 90
        capture(lambda: reports, deadline, report=sub)  # the exchange, until sub reports
        for process in (pub, sub):  # then their ends, one at a time (see end_one_at_a_time)
            process.stdin.close()
            capture(lambda: process.poll() is not None, deadline)
    finally:
        for sock in sockets:
            sock.close()
        errors = []
        for process in (pub, sub):
            if process.poll() is None:
                process.kill()
            process.wait()
            errors.append(process.stderr.read())
    assert reports and reports[0]['received'] == 20  # the nodes did talk
    assert pub.returncode == 0 and sub.returncode == 0, errors
    assert counts.get('lo', 0) > 0, 'the capture saw no RTPS packet on lo at all'
    outside = {name: n for name, n in counts.items() if name != 'lo' and n}
    assert outside == {}, f'RTPS packets of domain ports {low}-{high} on {outside}'


def test_shm_ports_lists_port_files_with_their_age(tmp_path):
    """The benchmark's record of shared-memory port files left in /dev/shm."""
    for name in ('fastdds_port7411', 'fastdds_port26911', 'fastdds_1e2444cb', 'other'):
        (tmp_path / name).write_bytes(b'')
    os.utime(tmp_path / 'fastdds_port7411', (1000.0, 1000.0))
    os.utime(tmp_path / 'fastdds_port26911', (1090.0, 1090.0))
    assert dds.shm_ports(tmp_path, now=1100.0) == [('fastdds_port26911', 10.0),
                                                   ('fastdds_port7411', 100.0)]
    assert dds.shm_ports(tmp_path / 'missing') == []
