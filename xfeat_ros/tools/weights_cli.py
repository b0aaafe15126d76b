# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""``xfeat_weights``: which weights file is used, the upstream download, a file's check."""

import argparse
import logging
from pathlib import Path
import sys

from xfeat_ros.cli import one_line_errors
from xfeat_ros.features.weights import (cache_dir, CACHE_NAME, download_weights, ENV_VAR,
                                        load_weights, sha256_file, weights_summary)


@one_line_errors('xfeat_weights')
def main(argv=None):
    """Entry point of ``xfeat_weights``: which file is used, download, check a file."""
    parser = argparse.ArgumentParser(
        prog='xfeat_weights', description='XFeat weights: the file in use (lookup: --weights, '
        f'${ENV_VAR}, the user cache, the packaged copy), the download of the upstream '
        'file into the cache, a check of a file.')
    sub = parser.add_subparsers(dest='command', required=True)
    which = sub.add_parser('which', help='print the weights file the node would use, and why')
    which.add_argument('--weights', default='', help='as the weights parameter of the node')
    download = sub.add_parser('download', help="fetch upstream's weights/xfeat.pt (pinned "
                              'commit, git blob id checked) into the user cache')
    download.add_argument('--force', action='store_true', help='replace a cached file')
    check = sub.add_parser('check', help='load a weights file and check every tensor')
    check.add_argument('path', type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
    if args.command == 'which':
        print(weights_summary(args.weights))
    elif args.command == 'download':
        cached = cache_dir() / CACHE_NAME
        if cached.is_file() and not args.force:
            print(f'{cached} is already there (--force replaces it)')
        else:
            print(f'downloaded {download_weights(cached)}')
    else:
        tensors = load_weights(args.path)
        print(f'{args.path}: {len(tensors)} XFeat tensors, sha256 {sha256_file(args.path)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
