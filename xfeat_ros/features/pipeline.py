# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The CPU pipeline: decode -> model space -> backbone -> detection -> matching."""

from dataclasses import dataclass

import numpy as np

from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.features.carry import DenseMap
from xfeat_ros.features.image_codec import decode_image_msg
from xfeat_ros.features.match import mutual_nn_match
from xfeat_ros.features.postprocess import detect, l2_normalize
from xfeat_ros.features.preprocess import to_model_space
from xfeat_ros.features.spread import NO_SPREAD

DESCRIPTOR_SIZE = 64


@dataclass
class Features:
    """
    Hold the features of one image, on the host.

    ``keypoints`` float32 [N, 2] (x, y) in original pixels, ``scores`` float32
    [N] descending, ``descriptors`` float32 [N, 64] unit length, ``image_hw``
    the original (height, width). ``wire``: the uint8 block the three arrays
    lie in when the GPU engine copied them to a message's places (an armed
    frame, :mod:`xfeat_ros.ros.transport.keypoints_wire`), else None.
    ``spread``: None for final features; an active
    :class:`xfeat_ros.features.spread.Spread` (its ``top_k`` the cap) where
    these are the candidates of a spread selection, made once the frame's
    tracks are known (:meth:`xfeat_ros.runtime.stream.CameraStream.advance`).
    ``dense``: the frame's :class:`xfeat_ros.features.carry.DenseMap` where
    the selection carries lost tracks (``spread.carry_frames`` > 0), else None.
    ``selected``: the :class:`xfeat_ros.features.spread.Selected` an engine
    made on its device for these candidates, else None.
    """

    keypoints: np.ndarray
    scores: np.ndarray
    descriptors: np.ndarray
    image_hw: tuple
    wire: object = None
    spread: object = None
    dense: object = None
    selected: object = None

    def __len__(self):
        """Return the number of keypoints."""
        return int(self.keypoints.shape[0])


@dataclass
class ContinuedTracks:
    """
    Track ids an engine continued through a frame's verified matches.

    ``ids`` uint64 [N] / ``ages`` uint32 [N] of the frame's keypoints and
    ``next_id`` the camera's next new id after them, as
    :func:`xfeat_ros.features.tracks.propagate_tracks` makes them from ``made_from``:
    the caller's token for the previous frame's tracks and the next id before
    this frame. Valid only where the caller's state still is ``made_from``.
    """

    ids: np.ndarray
    ages: np.ndarray
    next_id: int
    made_from: tuple


@dataclass
class MatchResult:
    """
    Hold mutual-NN matches: ``idx0``/``idx1`` int64 [M], ``similarity`` float32 [M].

    ``verified`` bool [M] where the engine already checked the matches against
    an epipolar geometry (the GPU engine does, on the device); None otherwise
    (the tracks then run the check on the host). ``tracks``: a
    :class:`ContinuedTracks` where the engine also continued the camera's
    track ids through the verified matches (an armed GPU frame), else None.
    """

    idx0: np.ndarray
    idx1: np.ndarray
    similarity: np.ndarray
    verified: object = None
    tracks: object = None

    def __len__(self):
        """Return the number of matches."""
        return int(self.idx0.shape[0])


class CpuPipeline:
    """Detect, describe and match on the CPU with a host backbone."""

    def __init__(self, backbone, top_k=TOP_K, threshold=THRESHOLD, spread=NO_SPREAD,
                 min_cossim=MIN_COSSIM):
        """
        Wrap a backbone with ``run(image [mh, mw]) -> (feats, logits, reliability)``.

        ``spread`` (:class:`xfeat_ros.features.spread.Spread`): when active,
        the frame's features are candidates of the selection
        (:meth:`~xfeat_ros.features.spread.Spread.candidates` of ``top_k``
        detected), with the dense descriptor map where it carries tracks;
        ``min_cossim`` the matching threshold it is told.
        """
        self.backbone = backbone
        self.top_k = int(top_k)
        self.threshold = float(threshold)
        self.spread = spread
        self.min_cossim = float(min_cossim)

    def extract(self, grey):
        """Features of a grey float32 [H, W] image in [0, 1]."""
        model_image, (rh, rw) = to_model_space(grey)
        feats, logits, reliability = self.backbone.run(model_image)
        spread, dense = None, None
        if self.spread.active:
            spread = self.spread.for_frame(self.top_k, self.min_cossim)
        count = self.top_k if spread is None else spread.candidates(self.top_k)
        keypoints, scores, descriptors = detect(feats, logits, reliability, count,
                                                self.threshold)
        if spread is not None and spread.carry_frames > 0:
            dense = DenseMap(l2_normalize(feats, axis=0), model_image.shape, (rw, rh))
        keypoints = keypoints * np.array([rw, rh], dtype=np.float32)
        return Features(keypoints, scores, descriptors, grey.shape, spread=spread, dense=dense)

    def extract_msg(self, msg):
        """Features of a ``sensor_msgs/Image`` (raises the typed decode errors)."""
        return self.extract(decode_image_msg(msg))

    @staticmethod
    def match(previous, current, min_cossim=MIN_COSSIM):
        """Mutual-NN matches between two :class:`Features`."""
        return MatchResult(*mutual_nn_match(previous.descriptors, current.descriptors,
                                            min_cossim))
