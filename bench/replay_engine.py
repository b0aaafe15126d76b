# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
r"""
The node with an engine that costs nothing: what the node itself costs per frame.

``ReplayEngine`` keeps the engine contract (:mod:`xfeat_ros.features.engine`) and hands
every frame the same results at once: ``top_k`` keypoints with unit
descriptors and, against the previous frame, ``matches`` mutual matches of
which ``verified`` are epipolar inliers (as the GPU engine reports them). So
receipt, queues, threads, tracks, messages and publishing run as in the real
node, and the device time is zero.

Used as the node wrapper of ``xfeat_bench node`` (the node's own command line
follows, and this script runs it in-process with the replay engine)::

    xfeat_bench node --configs 2x60 --node-wrapper "python bench/replay_engine.py"
    xfeat_bench node --configs 2x60 --node-wrapper \
        "py-spy record --gil -r 200 -f raw -o p_{label}.txt -- python bench/replay_engine.py"

With ``XFEAT_REPLAY_BUFFERS=1`` in its environment the engine also offers image
buffers (plain memory from a :class:`xfeat_ros.features.gpu.image_pool.ImagePool`, as the
GPU engine offers pinned ones), so the node takes images and publishes messages
through rcl's own calls as it does with the GPU engine: the GPU node's host path
on a machine without a GPU::

    xfeat_bench node --configs 1x30 --node-wrapper \
        "env XFEAT_REPLAY_BUFFERS=1 python bench/replay_engine.py"
"""

import os
import sys

import numpy as np

from xfeat_ros.features.engine import Capabilities, NO_CAPABILITIES
from xfeat_ros.features.pipeline import Features, MatchResult

MATCHES = 2600   # TUM fr2/desk at top_k 4096: 2500-2900 mutual matches
VERIFIED = 0.85  # the share of them that are epipolar inliers there


class ReplaySlot:
    """One in-flight position: the image size of its frame, whether it was matched."""

    def __init__(self):
        """Start empty."""
        self.shape = None
        self.matched = False


class ReplayEngine:
    """Engine contract with precomputed results (see the module docstring)."""

    name = 'replay'
    device = 'replay'
    capabilities = NO_CAPABILITIES

    def __init__(self, top_k=4096, matches=MATCHES, seed=0):
        """Make one frame's features and one pair's matches, reused for every frame."""
        rng = np.random.default_rng(seed)
        self.top_k = int(top_k)
        self.count = int(matches)
        self.rng = rng
        self.descriptors = rng.normal(size=(self.top_k, 64)).astype(np.float32)
        self.descriptors /= np.linalg.norm(self.descriptors, axis=1, keepdims=True)
        self.scores = np.sort(rng.uniform(0.05, 1.0, self.top_k).astype(np.float32))[::-1]
        self._features = {}
        count = min(self.count, self.top_k)
        self.match = MatchResult(np.sort(rng.choice(self.top_k, count, replace=False)),
                                 rng.choice(self.top_k, count, replace=False),
                                 rng.uniform(0.82, 1.0, count).astype(np.float32),
                                 rng.uniform(size=count) < VERIFIED)

    def configure(self, top_k=None, threshold=None, min_cossim=None):
        """Ignore settings: the results are replayed."""

    def alloc_slot(self):
        """Return a new slot."""
        return ReplaySlot()

    def submit(self, msg, slot):
        """Take the frame's size; nothing else is computed."""
        slot.shape = (int(msg.height), int(msg.width))
        slot.matched = False

    def submit_match(self, previous, slot):
        """Mark the slot matched against its camera's previous frame."""
        slot.matched = True

    def match_features(self, features0, features1):
        """Return the replayed matches (stereo pairs)."""
        return self.match

    def synchronize(self):
        """Return at once: nothing runs anywhere."""

    def features(self, slot):
        """Return the replayed features, keypoints spread over the frame's size."""
        if slot.shape not in self._features:
            height, width = slot.shape
            keypoints = self.rng.uniform([0, 0], [width - 1, height - 1],
                                         (self.top_k, 2)).astype(np.float32)
            self._features[slot.shape] = (keypoints, slot.shape)
        keypoints, shape = self._features[slot.shape]
        return Features(keypoints, self.scores, self.descriptors, shape)

    def matches(self, slot):
        """Return the replayed matches of a matched slot, else None."""
        return self.match if slot.matched else None

    def results(self, slots):
        """``[(features, matches)]`` of ``slots``."""
        return [(self.features(slot), self.matches(slot)) for slot in slots]


class BufferedReplayEngine(ReplayEngine):
    """:class:`ReplayEngine` that offers image buffers as the GPU engine does (plain memory)."""

    capabilities = Capabilities(image_buffers=True)

    def __init__(self, top_k=4096, **kwargs):
        """Start with an empty pool."""
        super().__init__(top_k, **kwargs)
        from xfeat_ros.features.gpu.image_pool import ImagePool
        self._pool = ImagePool(lambda size: np.empty(size, np.uint8))

    def image_buffer(self, nbytes):
        """Return a reusable uint8 buffer of at least ``nbytes`` to take an image into."""
        return self._pool.get(nbytes)


def node_arguments(argv):
    """Return the node's own arguments in ``argv`` (after ``-m xfeat_ros.ros.node``, if given)."""
    if 'xfeat_ros.ros.node' in argv:
        return argv[argv.index('xfeat_ros.ros.node') + 1:]
    return argv


def main(argv=None):
    """Run ``xfeat_ros.ros.node.main`` with the replay engine."""
    from xfeat_ros.ros import node
    kind = BufferedReplayEngine if os.environ.get('XFEAT_REPLAY_BUFFERS') == '1' else ReplayEngine
    node.create_engine = lambda config, logger=None: kind(config.top_k)
    return node.main(node_arguments(sys.argv[1:] if argv is None else argv))


if __name__ == '__main__':
    sys.exit(main())
