# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# make demo   set up on first use, then run the node on a sample sequence
# make test   set up on first use, then run every test
# make setup  create/refresh .venv (ROS 2 wheels, xfeat_ros_msgs, this package)

SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c

# Every process that creates a ROS node keeps DDS on this machine and uses its
# own domain (scripts/ros_env.sh keeps an exported ROS_DOMAIN_ID).
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export ROS_DOMAIN_ID ?= $(shell echo $$(( $$$$ % 100 + 1 )))

PYTEST_ARGS ?=
DEMO_ARGS ?=

.PHONY: setup test demo lint clean

setup:
	bash scripts/setup_venv.sh

test: setup
	source scripts/ros_env.sh
	python -m pytest -q -ra $(PYTEST_ARGS) test

demo: setup
	source scripts/ros_env.sh
	python -m xfeat_ros.demo $(DEMO_ARGS)

lint: setup
	source scripts/ros_env.sh
	python -m pytest -q test/test_flake8.py test/test_pep257.py test/test_copyright.py

clean:
	rm -rf build install log demo_output
