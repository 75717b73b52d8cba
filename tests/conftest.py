"""Registers the shared fixtures (tests/fixtures/) once, for every test module.

Tests mirror the packages: tests/pipeline/... and tests/train/... hold the tests of the modules
with the same path; cross-cutting end-to-end tests sit at the top.
"""

pytest_plugins = ["tests.fixtures.synthetic", "tests.fixtures.servers", "tests.fixtures.storage",
                  "tests.fixtures.trainer", "tests.fixtures.docs", "tests.fixtures.full_imagenet",
                  "tests.fixtures.slurm"]
