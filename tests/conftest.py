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


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "soc(name): run with QNNEMU_SOC_MODEL=name, the default device of our backend "
        "(the documented default is SM8350, v68); for tests written against another SoC's numbers")
    config.addinivalue_line(
        "markers", "float_math(value): run with QNNEMU_FLOAT_MATH=value (float32: exact float32 "
        "reference runs, for tests comparing with float32 results such as ONNX Runtime's CPU EP)")


@pytest.fixture(autouse=True)
def _emulator_environment(request, monkeypatch):
    """``@pytest.mark.soc("SM8550")`` (on a test or a module's ``pytestmark``) makes that SoC
    our backend's default device for the test (QNNEMU_SOC_MODEL, read whenever a default
    device is made); ``@pytest.mark.float_math("float32")`` sets QNNEMU_FLOAT_MATH (read at
    graphFinalize).  Without a marker the variable is removed, so a developer's own setting
    cannot change what the tests see."""
    for marker_name, variable in (("soc", "QNNEMU_SOC_MODEL"), ("float_math", "QNNEMU_FLOAT_MATH")):
        marker = request.node.get_closest_marker(marker_name)
        if marker is not None:
            monkeypatch.setenv(variable, marker.args[0])
        else:
            monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def isolated_votes():
    """Perf votes are process-wide (qnnemu/htp/perf.py PERF): other tests' ids are set aside
    while the test votes, so the clocks it sees come from its own votes only, and are put back
    (without the test's) after it."""
    from qnnemu.htp.perf import PERF
    with PERF.lock:
        others = dict(PERF.configs)
        PERF.configs.clear()
    yield
    with PERF.lock:
        PERF.configs.clear()
        PERF.configs.update(others)


# ---- one Backend per module for each library, default device (tests that need another device
# or options define their own fixture of the same name)
@pytest.fixture(scope="module")
def our_backend():
    """qnnemu's libQnnHtpEmu.so through the real C ABI (qnnemu.client.Backend)."""
    from vendor import our_library

    from qnnemu.client import Backend
    lib = our_library()
    if lib is None:
        pytest.skip("our libQnnHtpEmu.so is not built")
    with Backend(str(lib), log_level="error") as be:
        yield be


@pytest.fixture(scope="module")
def vendor_backend():
    """The vendor's libQnnHtp.so through the same client; skips when onnxruntime-qnn is absent."""
    from vendor import vendor_library

    from qnnemu.client import Backend
    lib = vendor_library()
    if lib is None:
        pytest.skip("onnxruntime_qnn (vendor libQnnHtp.so) not installed")
    with Backend(str(lib), log_level="error") as be:
        yield be
