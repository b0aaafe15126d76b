# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""ament_python setup of xfeat_ros."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = 'xfeat_ros'

setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    # The packaged backbone weights (upstream's, Apache-2.0) and their notice.
    package_data={PACKAGE: ['data/xfeat_backbone.npz', 'data/NOTICE.md']},
    data_files=[
        ('share/ament_index/resource_index/packages', [f'resource/{PACKAGE}']),
        (f'share/{PACKAGE}', ['package.xml']),
        (f'share/{PACKAGE}/launch', glob('launch/*.launch.py')),
        (f'share/{PACKAGE}/config', glob('config/*.yaml') + glob('config/*.xml')),
        (f'share/{PACKAGE}/kernels', glob('kernels/*.cu') + glob('kernels/*.cuh')),
    ],
    install_requires=['setuptools', 'numpy', 'onnx', 'onnxruntime'],
    # The CPU path needs none of the GPU packages; `make setup-gpu` installs them.
    extras_require={'test': ['pytest', 'scipy', 'hypothesis'],
                    'gpu': ['torch', 'cupy-cuda13x', 'nvidia-cuda-nvrtc'],
                    'map': ['pycolmap==4.2.1', 'evo==1.38.1']},
    zip_safe=False,  # the weights are read from the package directory
    maintainer='xfeat_ros maintainers',
    maintainer_email='maintainers@xfeat-ros.org',
    description='XFeat learned features and matches for ROS 2 (CPU and GPU paths)',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'xfeat_node = xfeat_ros.ros.node:main',
            'xfeat_play = xfeat_ros.tools.play:main',
            'xfeat_export = xfeat_ros.tools.export:main',
            'xfeat_demo = xfeat_ros.tools.demo:main',
            'xfeat_eval = xfeat_ros.tools.evaluation.cli:main',
            'xfeat_bench = xfeat_ros.tools.bench.cli:main',
            'xfeat_offline = xfeat_ros.tools.offline:main',
            'xfeat_weights = xfeat_ros.tools.weights_cli:main',
            'xfeat_map = xfeat_ros.tools.mapping:main',
            'xfeat_tracks = xfeat_ros.tools.evaluation.tracking:main',
        ],
    },
)
