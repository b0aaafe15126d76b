# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""``python -m xfeat_ros.tools.bench``: the same as ``xfeat_bench``."""

import sys

from xfeat_ros.tools.bench.cli import main

sys.exit(main())
