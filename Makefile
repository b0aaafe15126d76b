# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# make demo       set up on first use (CPU), then run the node on a sample sequence
# make test       set up on first use (CPU + test tools), then run the tests;
#                 PYTEST_ARGS picks files/options: make test PYTEST_ARGS=test/tools/test_play.py
# make setup      create/refresh .venv for the CPU path (ROS 2 wheels, messages, this package)
# make setup-gpu  the same plus PyTorch, NVRTC and CuPy for the GPU path

SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c

# Every process that creates a ROS node keeps DDS on this machine and uses its
# own domain, drawn at random (an exported ROS_DOMAIN_ID is kept; scripts/ros_env.sh does
# the same).
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
ifndef ROS_DOMAIN_ID
export ROS_DOMAIN_ID := $(shell echo $$(( RANDOM % 100 + 1 )))
endif

PYTEST_ARGS ?=
DEMO_ARGS ?=

.PHONY: setup setup-test setup-gpu test demo lint clean

setup:
	XFEAT_SETUP_PROFILE=user bash scripts/setup_venv.sh

setup-test:
	XFEAT_SETUP_PROFILE=test bash scripts/setup_venv.sh

setup-gpu:
	XFEAT_SETUP_PROFILE=gpu bash scripts/setup_venv.sh

# Without PYTEST_ARGS naming files, pytest runs testpaths (test/, setup.cfg).
test: setup-test
	source scripts/ros_env.sh
	python -m pytest -q -ra $(PYTEST_ARGS)

demo: setup
	source scripts/ros_env.sh
	python -m xfeat_ros.tools.demo $(DEMO_ARGS)

lint: setup-test
	source scripts/ros_env.sh
	python -m pytest -q test/test_flake8.py test/test_pep257.py test/test_copyright.py

clean:
	rm -rf build install log demo_output
