# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""``python -m xfeat_ros.tools.evaluation``: the same as ``xfeat_eval``."""

import sys

from xfeat_ros.tools.evaluation.cli import main

sys.exit(main())
