# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The COLMAP side of ``xfeat_map``, through pycolmap (4.2.1 API).

* cameras: one per camera of the source, with its known intrinsics, held fixed
  (:func:`pipeline_options`); each camera has a trivial rig and every image
  its own frame (COLMAP 4 keeps images in frames of rigs); after mapping the
  models' cameras are read back and compared with the written ones
  (:func:`read_back_cameras`);
* keypoints and matches are written as this package computes them, shifted
  by +0.5 px: COLMAP puts the centre of the first pixel at (0.5, 0.5), this
  package (like OpenCV and sensor_msgs/CameraInfo) at (0, 0), so the camera's
  principal point is shifted the same way;
* geometric verification of the written matches on the pair list, and
  incremental mapping with fixed seeds;
* COLMAP's own SIFT (extraction and matching on the same pair list) for comparison.
"""

import numpy as np

from xfeat_ros.logs import package_logger
from xfeat_ros.tools.map_sources import MappingError

LOG = package_logger('xfeat_map')
PIXEL_CENTRE = 0.5  # COLMAP pixel (i, j) covers [i, i + 1): its centre is at i + 0.5
PARAM_TOLERANCE = 1e-9  # read-back intrinsics further than this from the written ones changed
INSTALL_HINT = ("xfeat_map needs pycolmap and evo: pip install 'pycolmap==4.2.1' "
                "'evo==1.38.1' (or the package's extra: pip install '.[map]')")


def require_backends():
    """Import and return ``(pycolmap, evo)``, or raise one :class:`MappingError` line."""
    try:
        import evo
        import pycolmap
    except ImportError as exc:
        raise MappingError(f'{INSTALL_HINT} ({exc})') from exc
    return pycolmap, evo


def colmap_camera(model):
    """
    COLMAP ``(model name, params list)`` of a :class:`xfeat_ros.features.camera.CameraModel`.

    none -> PINHOLE; plumb_bob -> OPENCV (FULL_OPENCV when k3 != 0); rational
    -> FULL_OPENCV; equidistant -> OPENCV_FISHEYE. The principal point moves
    by +0.5 px into COLMAP's pixel convention. A skewed K has no COLMAP model.
    """
    k = model.matrix
    if k[0, 1] != 0:
        raise MappingError(f'COLMAP camera models have no skew (K[0, 1] = {k[0, 1]})')
    base = [k[0, 0], k[1, 1], k[0, 2] + PIXEL_CENTRE, k[1, 2] + PIXEL_CENTRE]
    c = [float(v) for v in model.coeffs]
    if model.distortion_model == 'none':
        return 'PINHOLE', base
    if model.distortion_model == 'equidistant':
        return 'OPENCV_FISHEYE', base + c
    if model.distortion_model == 'plumb_bob' and c[4] == 0:
        return 'OPENCV', base + c[:4]
    return 'FULL_OPENCV', base + (c + [0.0, 0.0, 0.0])[:8]


def to_colmap_pixels(keypoints):
    """Convert this package's keypoints float [N, 2] to COLMAP's float32 [N, 2] (+0.5)."""
    return (np.asarray(keypoints, dtype=np.float32).reshape(-1, 2)
            + np.float32(PIXEL_CENTRE)).astype(np.float32)


def from_colmap_pixels(keypoints):
    """Convert COLMAP keypoints float [N, >=2] to this package's pixels float32 [N, 2]."""
    return np.asarray(keypoints, dtype=np.float32)[:, :2] - np.float32(PIXEL_CENTRE)


class MapDatabase:
    """A new COLMAP database: cameras (each with a trivial rig), images, keypoints, matches."""

    def __init__(self, path):
        """Create the database file ``path`` (it must not exist)."""
        self.pycolmap = require_backends()[0]
        if path.exists():
            raise MappingError(f'{path} exists already; give a new --out folder')
        self.db = self.pycolmap.Database.open(str(path))
        self.path = path
        self.cameras = {}   # key -> (camera_id, rig_id, camera)
        self.images = {}    # name -> image_id

    def add_camera(self, key, model, width, height):
        """Write camera ``key`` (fixed intrinsics) of an image size; returns its id."""
        if model.width and model.height and (model.width, model.height) != (width, height):
            raise MappingError(f'camera {key} is calibrated for {model.width}x{model.height} '
                               f'but its images are {width}x{height}')
        name, params = colmap_camera(model)
        camera = self.pycolmap.Camera(model=name, width=int(width), height=int(height),
                                      params=params)
        # Known intrinsics. Without this flag COLMAP takes the focal length for unknown:
        # it verifies pairs with a fundamental matrix or a shared-focal solver instead
        # of the essential matrix, and seeds the camera with the focal length that the
        # starting pair's solver estimates, whatever the refinement options say.
        camera.has_prior_focal_length = True
        camera.camera_id = self.db.write_camera(camera)
        rig = self.pycolmap.Rig()
        rig.add_ref_sensor(camera.sensor_id)
        self.cameras[key] = (camera.camera_id, self.db.write_rig(rig), camera)
        return camera.camera_id

    def written_cameras(self):
        """Return ``{key: pycolmap.Camera}`` of the cameras written."""
        return {key: camera for key, (_, _, camera) in self.cameras.items()}

    def add_image(self, name, key):
        """Write image ``name`` of camera ``key`` in its own frame; returns its id."""
        camera_id, rig_id, _ = self.cameras[key]
        image = self.pycolmap.Image(name=name, camera_id=camera_id)
        image.image_id = self.db.write_image(image)
        frame = self.pycolmap.Frame()
        frame.rig_id = rig_id
        frame.add_data_id(image.data_id)
        self.db.write_frame(frame)
        self.images[name] = image.image_id
        return image.image_id

    def write_keypoints(self, image_id, keypoints):
        """Write this package's keypoints [N, 2] of an image (shifted to COLMAP's convention)."""
        self.db.write_keypoints(image_id, to_colmap_pixels(keypoints))

    def write_matches(self, image_id0, image_id1, idx0, idx1):
        """Write matches (keypoint indices [M] each) of an image pair; returns M."""
        pairs = np.stack([np.asarray(idx0, dtype=np.uint32),
                          np.asarray(idx1, dtype=np.uint32)], axis=1)
        if len(pairs):
            self.db.write_matches(image_id0, image_id1, pairs)
        return len(pairs)

    def close(self):
        """Close the database (pycolmap's own steps open it again by path)."""
        self.db.close()


def write_pairs(path, pairs):
    """Write the image pair list (``name0 name1`` per line) COLMAP's steps read."""
    path.write_text(''.join(f'{a} {b}\n' for a, b in pairs))
    return path


def two_view_options(pycolmap, seed):
    """Return COLMAP's two-view geometry options (its defaults) with the RANSAC seed fixed."""
    options = pycolmap.TwoViewGeometryOptions()
    options.ransac.random_seed = int(seed)
    return options


def pipeline_options(pycolmap, settings, image_root, camera_ids=()):
    """
    Incremental mapping options: COLMAP's defaults with fixed intrinsics and seeds.

    ``settings``: dict with ``seed``, ``threads`` and ``init_min_tri_angle``
    (degrees, the starting pair's minimum triangulation angle; see
    docs/mapping.md). The intrinsics stay as written: no bundle adjustment
    or pose refinement changes them, and the cameras ``camera_ids`` are
    constant (COLMAP then neither estimates nor refines them).
    """
    options = pycolmap.IncrementalPipelineOptions()
    options.constant_cameras = {int(c) for c in camera_ids}
    options.random_seed = int(settings['seed'])
    options.num_threads = int(settings['threads'])
    options.ba_refine_focal_length = False
    options.ba_refine_principal_point = False
    options.ba_refine_extra_params = False
    options.extract_colors = image_root is not None
    if image_root is not None:
        options.image_path = str(image_root)
    mapper = options.mapper
    mapper.random_seed = int(settings['seed'])
    mapper.num_threads = int(settings['threads'])
    mapper.abs_pose_refine_focal_length = False
    mapper.abs_pose_refine_extra_params = False
    mapper.init_min_tri_angle = float(settings['init_min_tri_angle'])
    options.mapper = mapper
    return options


def verify(pycolmap, database, pairs_path, seed):
    """Geometric verification (two-view geometry) of the written matches of every listed pair."""
    pycolmap.verify_matches(str(database), str(pairs_path), two_view_options(pycolmap, seed))


def sift(pycolmap, database, image_root, names, pairs_path, seed, threads):
    """Run COLMAP's SIFT on the database's images; match and verify the same pair list."""
    extraction = pycolmap.FeatureExtractionOptions()
    extraction.num_threads = int(threads)
    pycolmap.extract_features(str(database), str(image_root), image_names=list(names),
                              extraction_options=extraction, device=pycolmap.Device.cpu)
    matching = pycolmap.FeatureMatchingOptions()
    matching.num_threads = int(threads)
    pairing = pycolmap.ImportedPairingOptions()
    pairing.match_list_path = str(pairs_path)
    pycolmap.match_image_pairs(str(database), matching, pairing,
                               two_view_options(pycolmap, seed), device=pycolmap.Device.cpu)


def incremental_mapping(pycolmap, database, image_root, out_dir, settings, camera_ids=()):
    """
    Run COLMAP's incremental mapper; returns ``[(index, Reconstruction)]``, largest first.

    COLMAP writes each model to ``out_dir/<index>/``; ``camera_ids`` are held constant.
    """
    pycolmap.set_random_seed(int(settings['seed']))
    out_dir.mkdir(parents=True, exist_ok=True)
    models = pycolmap.incremental_mapping(
        str(database), str(image_root or out_dir), str(out_dir),
        pipeline_options(pycolmap, settings, image_root, camera_ids))
    return sorted(models.items(), key=lambda item: item[1].num_reg_images(), reverse=True)


def camera_record(camera):
    """Return the JSON record of a pycolmap camera: ``{'model', 'params'}``."""
    return {'model': camera.model.name, 'params': [float(v) for v in camera.params]}


def _difference(written, found):
    """Describe how camera ``found`` differs from ``written``, or return None."""
    if found.model.name != written.model.name:
        return f'model {written.model.name} -> {found.model.name}'
    if (found.width, found.height) != (written.width, written.height):
        return f'size {written.width}x{written.height} -> {found.width}x{found.height}'
    before, after = np.asarray(written.params, float), np.asarray(found.params, float)
    changed = np.flatnonzero(np.abs(after - before) > PARAM_TOLERANCE)
    if not len(changed):
        return None
    names = str(written.params_info).replace(' ', '').split(',')
    return ', '.join(f'{names[i] if i < len(names) else i} {before[i]:.10g} -> '
                     f'{after[i]:.10g}' for i in changed)


def read_back_cameras(models, written):
    """
    Read the cameras of the reconstructions back and compare them with the written ones.

    ``models``: ``[(index, Reconstruction)]``, largest first; ``written``:
    ``{key: pycolmap.Camera}`` as written to the database. Returns
    ``(cameras, changes)``: ``{key: {'model', 'params'} or None}`` of the
    largest model (None: the camera is not in it; all None without a
    model), and ``['sparse/<index> <key>: what changed', ...]`` over every model.
    """
    cameras = dict.fromkeys(written)
    changes = []
    for rank, (index, model) in enumerate(models):
        for key, camera in written.items():
            if camera.camera_id not in model.cameras:
                continue
            found = model.cameras[camera.camera_id]
            if rank == 0:
                cameras[key] = camera_record(found)
            difference = _difference(camera, found)
            if difference is not None:
                changes.append(f'sparse/{index} {key}: {difference}')
    return cameras, changes


def database_counts(pycolmap, database):
    """Count a database's images, keypoints, matched and verified pairs, inlier matches."""
    with pycolmap.Database.open(str(database)) as db:
        return {'images': db.num_images(), 'keypoints': db.num_keypoints(),
                'matched_pairs': db.num_matched_image_pairs(), 'matches': db.num_matches(),
                'verified_pairs': db.num_verified_image_pairs(),
                'inlier_matches': db.num_inlier_matches()}
