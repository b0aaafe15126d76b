# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``python -m xfeat_ros.tools.parameter_docs``: the parameter table, written where it is shown.

The node's parameter table (:data:`xfeat_ros.ros.parameters.PARAMETERS` and
:data:`~xfeat_ros.ros.parameters.CAMERA_PARAMETERS`, each with its
``ParameterDescriptor``) is the one source of ``config/xfeat.yaml``, of the
table in ``docs/parameters.md`` and of the short table in ``README.md``
(between ``<!-- parameters:begin -->`` and ``<!-- parameters:end -->``).
``--check`` says which file differs (test/tools/test_parameter_docs.py runs
it); ``--write`` rewrites them.
"""

import argparse
from pathlib import Path
import sys
import textwrap

from rcl_interfaces.msg import ParameterType

from xfeat_ros.cli import one_line_errors
from xfeat_ros.errors import XFeatError
from xfeat_ros.ros.parameters import CAMERA_PARAMETERS, PARAMETERS

REPO = Path(__file__).resolve().parents[2]
BEGIN, END = '<!-- parameters:begin -->', '<!-- parameters:end -->'
# The README's short table: what most users set.
README_PARAMETERS = ('backend', 'weights', 'top_k', 'threshold', 'min_cossim', 'cameras',
                     'queue_size', 'input_qos_reliability', 'descriptor_encoding',
                     'publish_vins_features', 'stereo_pairs')
# Unset lists, shown commented out with an example (an empty YAML list has no type).
EXAMPLES = {'stereo_pairs': "['cam0:cam1']",
            'intrinsics': '[458.654, 457.296, 367.215, 248.375]  # EuRoC cam0: fx, fy, cx, cy',
            'distortion_coeffs': '[-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05]'}
YAML_HEADER = """\
# Parameters of the xfeat node (xfeat_ros), with their defaults. Written from the node's
# parameter table by `python -m xfeat_ros.tools.parameter_docs --write`: edit the table
# (xfeat_ros/ros/parameters.py), not this file. Live ones can be changed while the node
# runs (`ros2 param set /xfeat top_k 2048`); an invalid value is refused with its reason
# and changes nothing. The rest are read at start-up.
"""


class ParameterDocsError(XFeatError):
    """A file that shows the parameter table is missing its markers or is out of date."""


def constraint(descriptor):
    """Return the allowed values of a descriptor in words ('' when unconstrained)."""
    if descriptor.integer_range:
        r = descriptor.integer_range[0]
        return f'range [{r.from_value}, {r.to_value}]'
    if descriptor.floating_point_range:
        r = descriptor.floating_point_range[0]
        return f'range [{r.from_value:g}, {r.to_value:g}]'
    return descriptor.additional_constraints


def is_live(descriptor):
    """Tell whether a parameter may change while the node runs."""
    return not descriptor.read_only


def yaml_value(default, descriptor):
    """Return ``default`` as the YAML the node reads back (None: left out)."""
    if default is None:
        return None
    if isinstance(default, bool):
        return 'true' if default else 'false'
    if isinstance(default, str):
        return f"'{default}'" if default == '' else default
    if isinstance(default, list):
        return '[' + ', '.join(f"'{v}'" if isinstance(v, str) else str(v)
                               for v in default) + ']'
    if descriptor.type == ParameterType.PARAMETER_DOUBLE:
        return repr(float(default))
    return str(default)


def markdown_value(default):
    """Return a default as the tables show it."""
    if default is None:
        return 'unset'
    if isinstance(default, bool):
        return '`true`' if default else '`false`'
    if default == '':
        return "`''`"
    return f'`{default}`'


def describe(descriptor):
    """Return a descriptor's description with its constraint and whether it is live."""
    text = descriptor.description.replace(' (live)', '')
    extra = [c for c in (constraint(descriptor),) if c]
    if is_live(descriptor):
        extra.append('live')
    return text + (f' ({"; ".join(extra)})' if extra else '')


def render_yaml():
    """Return ``config/xfeat.yaml``: every parameter with its description and default."""
    lines = [YAML_HEADER.rstrip('\n'), '/**/xfeat:', '  ros__parameters:']
    for name, (default, descriptor) in PARAMETERS.items():
        lines += yaml_entry(name, default, descriptor)
    lines.append('    # Per camera c as c.<name> ("/" in c becomes "."); the unnamed camera of '
                 'the')
    lines.append("    # default cameras [''] uses the plain names below.")
    for name, (default, descriptor) in CAMERA_PARAMETERS.items():
        lines += yaml_entry(name, default, descriptor)
    return '\n'.join(lines) + '\n'


def yaml_entry(name, default, descriptor):
    """Return the comment and value lines of one parameter (unset: an example, commented)."""
    lines = textwrap.wrap(describe(descriptor), 88, initial_indent='    # ',
                          subsequent_indent='    # ', break_on_hyphens=False)
    value = yaml_value(default, descriptor)
    lines.append(f'    {name}: {value}' if value is not None else
                 f'    # {name}: {EXAMPLES[name]}')
    return lines


def render_table(names=None, camera=True):
    """Return the markdown table of ``names`` (every parameter when None)."""
    rows = ['| parameter | default | meaning |', '|---|---|---|']
    for name in names or PARAMETERS:
        default, descriptor = PARAMETERS[name]
        rows.append(f'| `{name}` | {markdown_value(default)} | {describe(descriptor)} |')
    if camera:
        for name, (default, descriptor) in CAMERA_PARAMETERS.items():
            rows.append(f'| `c.{name}` | {markdown_value(default)} | per camera c: '
                        f'{describe(descriptor)} |')
    return '\n'.join(rows)


def replace_between_markers(text, table, where):
    """Return ``text`` with the part between the markers replaced by ``table``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ParameterDocsError(f'{where}: needs one {BEGIN} ... {END} pair')
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f'{head}{BEGIN}\n{table}\n{END}{tail}'


def expected_files(repo=REPO):
    """Return ``{path: content}`` of every file that shows the parameter table."""
    docs, readme = repo / 'docs' / 'parameters.md', repo / 'README.md'
    return {
        repo / 'config' / 'xfeat.yaml': render_yaml(),
        docs: replace_between_markers(docs.read_text(), render_table(), docs),
        readme: replace_between_markers(readme.read_text(),
                                        render_table(README_PARAMETERS, camera=False), readme),
    }


def stale_files(repo=REPO):
    """Return the paths whose content differs from the table."""
    return [path for path, content in expected_files(repo).items()
            if not path.is_file() or path.read_text() != content]


@one_line_errors('parameter_docs')
def main(argv=None):
    """Check (default) or rewrite the files that show the parameter table."""
    parser = argparse.ArgumentParser(prog='parameter_docs', description=__doc__.split('\n')[1])
    parser.add_argument('--write', action='store_true', help='rewrite the files')
    parser.add_argument('--repo', type=Path, default=REPO, help='repository root')
    args = parser.parse_args(argv)
    if args.write:
        for path, content in expected_files(args.repo).items():
            path.write_text(content)
        return 0
    stale = stale_files(args.repo)
    if stale:
        raise ParameterDocsError('out of date: ' + ', '.join(str(p) for p in stale) +
                                 ' (python -m xfeat_ros.tools.parameter_docs --write)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
