# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""package.xml declares exactly what the code imports (rosdep keys)."""

import ast
import sys
import xml.etree.ElementTree as ElementTree

from conftest import REPO

# Python modules -> rosdep keys (ROS packages are their own module names).
ROSDEP_KEYS = {'cv2': 'python3-opencv', 'numpy': 'python3-numpy', 'yaml': 'python3-yaml',
               'onnx': 'python3-onnx', 'onnxruntime': 'python3-onnxruntime',
               'matplotlib': 'python3-matplotlib', 'rosbags': 'python3-rosbags',
               'skimage': 'python3-skimage', 'scipy': 'python3-scipy',
               'pytest': 'python3-pytest', 'hypothesis': 'python3-hypothesis'}
# Imported only where present, each with a message or a fallback (not declared).
# pycolmap and evo: xfeat_map's 'map' extra (setup.py), with a one-line install hint.
OPTIONAL = {'torch', 'cupy', 'tensorrt', 'psutil', 'modules', 'tqdm', 'pycolmap', 'evo'}
# The package and the tests' own helper modules (test/*.py import each other by name).
OWN = {'xfeat_ros'} | {path.stem for path in (REPO / 'test').glob('*.py')}


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
    return {ROSDEP_KEYS.get(m, m) for m in modules if m not in OPTIONAL}


def declared(*tags):
    root = ElementTree.parse(REPO / 'package.xml').getroot()
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
