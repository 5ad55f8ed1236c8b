"""cDSP sessions (multi-PD) of the shared HTP (qnnemu/htp/runtime.py ``SessionPool``): QNN HTP
backend documentation, "Multiple cDSP Sessions", "Model Loading Across Multiple Sessions", "I/O
Buffer Registration Failure" -- the five-model example and the I/O failure example."""
from __future__ import annotations

import pytest

from qnnemu.htp import runtime as rt

GB, MB = rt.GIB, rt.MIB


def five_models(unit):
    return [int(1.5 * unit), int(1.5 * unit), unit, unit, 250 * unit // 1024]


@pytest.mark.parametrize("va, unit", [(4 * GB, GB), (4 * MB, MB)], ids=["real-sizes", "scaled-to-MB"])
def test_five_model_example(va, unit):
    pool = rt.SessionPool(va_bytes=va, limit=4)
    placed = [pool.place(f"model{i}", size) for i, size in enumerate(five_models(unit))]
    assert placed == [0, 0, 1, 1, 0], "1.5 GB, 1.5 GB, 1 GB, 1 GB, 250 MB -> sessions 0, 0, 1, 1, 0"
    assert pool.usable == va * 15 // 16, "3.75 of every 4 GB are usable"


def test_session_size_knob(monkeypatch):
    monkeypatch.setenv(rt.SESSION_VA_ENV, str(4 * MB))
    assert rt.SessionPool().usable == 3840 * 1024, "QNNEMU_SESSION_VA_BYTES scales the session"
    monkeypatch.setenv(rt.SESSION_VA_ENV, "-1")
    with pytest.raises(ValueError, match=rt.SESSION_VA_ENV):
        rt.SessionPool()


def test_context_never_split_and_session_limit():
    pool = rt.SessionPool(va_bytes=4 * MB, limit=2)
    with pytest.raises(rt.SessionError, match="cannot be split"):
        pool.place("huge", 4 * MB)
    pool.place("a", 3 * MB)
    pool.place("b", 3 * MB)
    with pytest.raises(rt.SessionError, match="none of the process's 2 cDSP sessions"):
        pool.place("c", 3 * MB)
    pool.remove("a")
    assert pool.place("c", 3 * MB) == 0, "a freed session takes the next context"


def io_failure_setup(pool):
    """Four contexts that fill session #0 up to 0.25 (of 3.75), a fifth that opens session #1."""
    return [pool.place(f"ctx{i}", size) for i, size in enumerate([MB, MB, MB, MB // 2, 2 * MB])]


def test_io_registration_failure_example():
    pool = rt.SessionPool(va_bytes=4 * MB, limit=4)
    assert io_failure_setup(pool) == [0, 0, 0, 0, 1], "contexts 0-3 on session #0, context 4 on #1"
    pool.map_io("ctx4", "io4", MB)
    pool.map_io("ctx0", "io0", MB // 4)
    with pytest.raises(rt.SessionError, match="session #0 has 0 bytes"):
        pool.map_io("ctx1", "io1", MB // 4)


def test_io_mem_estimation_reserves_io_space():
    pool = rt.SessionPool(va_bytes=4 * MB, limit=4)
    sessions = [pool.place(f"ctx{i}", size, io_reserve=MB // 4)
                for i, size in enumerate([MB, MB, MB, MB // 2, 2 * MB])]
    assert sessions == [0, 0, 0, 1, 1], "with I/O reserved, context 3 no longer fits session #0"
    for i in range(5):
        pool.map_io(f"ctx{i}", f"io{i}", MB // 4)     # every context's I/O now maps


def test_dummy_registration_moves_next_context():
    pool = rt.SessionPool(va_bytes=4 * MB, limit=4)
    for i, size in enumerate([MB, MB, MB]):
        pool.place(f"ctx{i}", size)
    pool.map_io("ctx0", "dummy", MB // 2)              # the workaround: a dummy registration
    assert pool.place("ctx3", MB // 2) == 1, "the dummy registration pushes the next context to session #1"
    pool.unmap_io("dummy")                               # freed once every context is loaded
    pool.map_io("ctx1", "io1", MB // 2)
    pool.map_io("ctx3", "io3", MB // 2)
