# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
package.xml declares exactly what the code imports, as keys rosdep can resolve.

Every key must exist in the public rosdistro index, or ``rosdep install`` /
``rosdep check --from-paths . --ignore-src`` stops at it; the keys that exist are
listed in test/rosdep_keys.yaml with the index's repository, commit and file.
"""

import ast
import re
import sys
import xml.etree.ElementTree as ElementTree

from conftest import REPO
import pytest
import yaml

# Python modules -> rosdep keys (ROS packages are their own module names).
ROSDEP_KEYS = {'cv2': 'python3-opencv', 'numpy': 'python3-numpy', 'yaml': 'python3-yaml',
               'onnxruntime': 'python3-onnxruntime-pip',
               'matplotlib': 'python3-matplotlib', 'rosbags': 'python3-rosbags-pip',
               'skimage': 'python3-skimage', 'scipy': 'python3-scipy',
               'pytest': 'python3-pytest', 'hypothesis': 'python3-hypothesis',
               'packaging': 'python3-packaging'}
INDEX = yaml.safe_load((REPO / 'test' / 'rosdep_keys.yaml').read_text())
# Needed, but no key of the index installs them: docs/install.md installs them with pip.
NO_KEY = INDEX['no_key']
DEPEND_TAGS = ('depend', 'build_depend', 'buildtool_depend', 'build_export_depend',
               'exec_depend', 'test_depend', 'doc_depend')
# Packages of this repository: `rosdep ... --from-paths . --ignore-src` resolves none of them.
WORKSPACE = {'xfeat_ros', 'xfeat_ros_msgs'}
# Imported only where present, each with a message or a fallback (not declared).
# pycolmap and evo: xfeat_map's 'map' extra (setup.py), with a one-line install hint.
# importlinter: test_layers.py skips without it (no key in the index; make setup-test has it).
# torchvision: the GPU engine's nvJPEG decoder (features/gpu/jpeg.py), with the GPU stack.
OPTIONAL = {'torch', 'cupy', 'tensorrt', 'psutil', 'modules', 'tqdm', 'pycolmap', 'evo',
            'importlinter', 'torchvision'}
# The package and the tests' own helper modules (test/*.py import each other by name).
OWN = {'xfeat_ros'} | {path.stem for path in (REPO / 'test').rglob('*.py')}


def imported_modules(folders):
    """Return the top-level modules imported by the .py files under ``folders``."""
    found = set()
    for folder in folders:
        for path in (REPO / folder).rglob('*.py'):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split('.')[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split('.')[0])
                elif (isinstance(node, ast.Call) and getattr(node.func, 'attr', '') ==
                      'importorskip' and isinstance(node.args[0], ast.Constant)):
                    found.add(node.args[0].value.split('.')[0])  # pytest.importorskip('x')
    return {m for m in found if m not in sys.stdlib_module_names and m not in OWN}


def keys(modules):
    return {ROSDEP_KEYS.get(m, m) for m in modules if m not in OPTIONAL and m not in NO_KEY}


def declared(*tags, manifest='package.xml'):
    root = ElementTree.parse(REPO / manifest).getroot()
    return {e.text.strip() for tag in tags for e in root.findall(tag)}


def test_runtime_dependencies_are_exactly_what_the_package_imports():
    runtime = keys(imported_modules(['xfeat_ros', 'launch']))
    assert declared('exec_depend', 'depend') == runtime


def test_test_dependencies_are_exactly_what_the_tests_add():
    runtime = declared('exec_depend', 'depend')
    tests = keys(imported_modules(['test'])) - runtime
    assert declared('test_depend') == tests


def test_cv_bridge_is_not_used_and_geometry_msgs_is_declared():
    assert 'cv_bridge' not in declared('exec_depend', 'depend', 'test_depend')
    assert 'geometry_msgs' in declared('exec_depend')


@pytest.mark.parametrize('manifest', ['package.xml', 'xfeat_ros_msgs/package.xml'])
def test_every_key_is_in_the_rosdistro_index(manifest):
    keys = declared(*DEPEND_TAGS, manifest=manifest) - WORKSPACE
    assert keys and sorted(keys - set(INDEX['keys'])) == []


def test_the_key_list_names_its_source():
    source = INDEX['source']
    assert source['repository'] == 'ros/rosdistro'
    assert re.fullmatch('[0-9a-f]{40}', source['commit'])
    assert {entry['file'] for entry in INDEX['keys'].values()} <= set(source['files'])


def test_modules_without_a_key_are_installed_with_pip():
    """Each is needed by the runtime, in setup.py's requirements, and pip-installed by the docs."""
    runtime = imported_modules(['xfeat_ros', 'launch'])
    setup_py = (REPO / 'setup.py').read_text()
    install = (REPO / 'docs' / 'install.md').read_text()
    for module, entry in NO_KEY.items():
        assert module in runtime
        assert f"'{entry['pip']}'" in setup_py
        assert re.search(rf'pip install [^\n]*\b{entry["pip"]}\b', install), entry['pip']


def test_the_docs_name_the_nested_message_package_to_rosdep():
    """rosdep, like colcon, finds no package inside a package: xfeat_ros_msgs is named."""
    install = (REPO / 'docs' / 'install.md').read_text()
    commands = re.findall(r'rosdep (?:install|check) [^\n`]*', install)
    assert commands and all('src/xfeat_ros/xfeat_ros_msgs' in c for c in commands), commands
