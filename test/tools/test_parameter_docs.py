# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The parameter table is the one source of config/xfeat.yaml, parameters.md and the README."""

import shutil

import pytest
from xfeat_ros.ros.parameters import CAMERA_PARAMETERS, PARAMETERS
from xfeat_ros.tools import parameter_docs
import yaml


def test_the_shown_tables_are_the_parameter_table():
    assert parameter_docs.stale_files() == [], \
        'run: python -m xfeat_ros.tools.parameter_docs --write'


def test_the_yaml_holds_every_default_and_every_name():
    values = yaml.safe_load(parameter_docs.render_yaml())['/**/xfeat']['ros__parameters']
    everything = {**PARAMETERS, **CAMERA_PARAMETERS}
    assert values == {name: default for name, (default, _) in everything.items()
                      if default is not None}
    text = parameter_docs.render_yaml()
    for name in [n for n, (default, _) in everything.items() if default is None]:
        assert f'    # {name}: [' in text   # an example, commented (an empty list has no type)


def test_every_parameter_and_its_constraint_is_in_the_docs_table():
    table = parameter_docs.render_table()
    for name, (_, descriptor) in PARAMETERS.items():
        row = next(line for line in table.splitlines() if line.startswith(f'| `{name}` |'))
        assert parameter_docs.constraint(descriptor) in row
        assert ('live' in row) == (not descriptor.read_only)
    for name in CAMERA_PARAMETERS:
        assert f'| `c.{name}` |' in table


@pytest.fixture
def repo(tmp_path):
    for name in ('README.md', 'docs/parameters.md', 'config/xfeat.yaml'):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(parameter_docs.REPO / name, tmp_path / name)
    return tmp_path


def test_a_stale_file_is_named_and_write_mends_it(repo, capsys):
    config = repo / 'config' / 'xfeat.yaml'
    config.write_text(config.read_text().replace('top_k: 4096', 'top_k: 2048'))
    assert parameter_docs.main(['--repo', str(repo)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'xfeat.yaml' in err and '--write' in err
    assert parameter_docs.main(['--repo', str(repo), '--write']) == 0
    assert parameter_docs.stale_files(repo) == []
    assert 'top_k: 4096' in config.read_text()


def test_missing_markers_are_one_line(repo, capsys):
    readme = repo / 'README.md'
    readme.write_text(readme.read_text().replace(parameter_docs.END, ''))
    assert parameter_docs.main(['--repo', str(repo)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'README.md' in err and 'parameters:begin' in err
