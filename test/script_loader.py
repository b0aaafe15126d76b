# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Import a script of the repository that is no package module (bench/*.py, the launch file)."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_script(relative_path, name):
    """Import ``REPO / relative_path`` as module ``name``; returns the module."""
    spec = importlib.util.spec_from_file_location(name, REPO / relative_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
