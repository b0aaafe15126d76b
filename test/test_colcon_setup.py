# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The venv's set-up leaves colcon usable: setuptools stays within colcon-core's range."""

from importlib import metadata
import os
import re
import subprocess

from conftest import REPO
from packaging.requirements import Requirement
from packaging.version import Version
import pytest

SETUP = REPO / 'scripts' / 'setup_venv.sh'
# colcon-core 0.21.3's own requirement (its wheel's METADATA); read from the installed
# colcon-core instead where there is one.
COLCON_CORE_SETUPTOOLS = Requirement('setuptools>=30.3.0,<80')
TORCH_SETUPTOOLS = Requirement('setuptools>=77.0.3')  # torch 2.13's METADATA
RELEASES = ['30.3.0', '65.5.0', '77.0.3', '79.0.1', '80.0.0', '80.9.0', '84.2.1']


def requirements(profile):
    """Return the requirements scripts/setup_venv.sh installs for ``profile``."""
    env = dict(os.environ, XFEAT_SETUP_PROFILE=profile, XFEAT_SETUP_LIST='1')
    listed = subprocess.run(['bash', str(SETUP)], capture_output=True, text=True, env=env,
                            timeout=60, check=True).stdout
    return [Requirement(line) for line in listed.split()]


def colcon_core_requirement():
    """Return colcon-core's setuptools requirement: the installed one's, else the known one."""
    try:
        found = [Requirement(r) for r in metadata.requires('colcon-core') or []]
    except metadata.PackageNotFoundError:
        return COLCON_CORE_SETUPTOOLS
    return next(r for r in found if r.name == 'setuptools')


@pytest.mark.parametrize('profile', ['user', 'test', 'gpu'])
def test_setuptools_is_pinned_within_what_colcon_core_accepts(profile):
    pins = [r for r in requirements(profile) if r.name == 'setuptools']
    assert len(pins) == 1, "no setuptools pin: pip upgrades it past colcon-core's bound"
    pin, colcon = pins[0].specifier, colcon_core_requirement().specifier
    allowed = [v for v in RELEASES if pin.contains(v)]
    assert allowed and all(colcon.contains(v) for v in allowed), (str(pin), str(colcon))
    assert any(TORCH_SETUPTOOLS.specifier.contains(v) for v in allowed)


def test_pip_upgrades_setuptools_only_within_the_pin():
    """The bootstrap ``pip install --upgrade`` line names the pin, not bare setuptools."""
    for line in SETUP.read_text().splitlines():
        if re.search(r'\binstall\b.*--upgrade', line) and not line.lstrip().startswith('#'):
            assert 'setuptools' not in line.replace('SETUPTOOLS_REQUIREMENT', ''), line


def test_installed_setuptools_suits_colcon_core():
    """Where colcon is installed beside the package (a colcon workspace), it can run."""
    try:
        metadata.version('colcon-core')
    except metadata.PackageNotFoundError:
        pytest.skip('colcon-core is not installed here (the venv of make setup-test has none)')
    installed = Version(metadata.version('setuptools'))
    assert colcon_core_requirement().specifier.contains(installed), installed
