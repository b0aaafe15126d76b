# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/refine_phases.py without a GPU: its stamps find their places, its phases add up."""

import numpy as np
from script_loader import load_script

refine_phases = load_script('bench/refine_phases.py', 'refine_phases')


def test_every_stamp_finds_its_place_once():
    """Each anchor of the shipped source is found once: the instrumented copy builds."""
    source = refine_phases.instrumented_source()
    stamps = [line for line in source.splitlines()
              if 'XF_STAMP' in line and '#define' not in line]
    assert len(stamps) == len(refine_phases.PATCHES) + 1  # the round's start stamp: 2 lines
    assert source.count('XF_STAMP_AT(') == 1 + len(refine_phases.KERNEL_SLOTS)  # define + uses


def test_phases_are_the_differences_of_consecutive_stamps():
    """A phase is its stamp minus the one before; a round that broke stops at its last stamp."""
    clock = np.zeros(64, np.int64)
    slots = refine_phases.KERNEL_SLOTS
    clock[slots['start']], clock[slots['picked']], clock[slots['first_counted']] = 100, 150, 300
    clock[0:8] = 1000 + 10 * np.arange(8) ** 2       # round 0, every phase
    clock[8:11] = 2000 + np.arange(3)                 # round 1 broke after its spread
    clock[slots['rounds_done']], clock[slots['masked']] = 5000, 5200
    phases = refine_phases.phases_of(clock)
    assert phases['pick'] == 50 and phases['first_count'] == 150 and phases['mask'] == 200
    assert [phases[f'round0_{p}'] for p in refine_phases.ROUND_PHASES] == [
        10 * (i * i - (i - 1) * (i - 1)) for i in range(1, 8)]
    assert phases['round1_centre'] == 1 and phases['round1_spread'] == 1
    assert 'round1_ata' not in phases and not any(k.startswith('round2') for k in phases)
