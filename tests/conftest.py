"""Shared test configuration.

Hypothesis profiles, selected with the environment variable ``HYPOTHESIS_PROFILE``:

- ``ci`` (default): bounded, so the lifecycle state machine stays well under a minute on 2 cores;
- ``dev``: many more examples and longer runs, for local bug hunting.

Fixture ``qnn_abi`` (session): the raw function table of libQnnHtpEmu.so (tests/abi.py); it
skips the tests that use it when the library has not been built.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=100, stateful_step_count=40, deadline=None, derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True)
settings.register_profile(
    "dev", max_examples=1000, stateful_step_count=100, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def qnn_abi():
    import abi
    if not abi.library_available():
        pytest.skip(f"ABI tests need the built backend library {abi.library_path()} "
                    f"(run `pip install -e .` to build it)")
    return abi.table()
