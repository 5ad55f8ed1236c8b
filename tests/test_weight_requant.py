"""The HTP's symmetric requantization of static 8-bit weights at graphFinalize
(qnnemu/spec/quant.py ``htp_int8_weights``; QNN HTP backend documentation, "QNN HTP Precision"):
the one-pass C helper (csrc/eng_prepare.c) gives the numpy formula's bytes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from qnnemu.spec import quant

kernels = pytest.importorskip("qnnemu._kernels")


def _both(monkeypatch, w, axis):
    monkeypatch.delenv("QNNEMU_KERNELS", raising=False)
    fast = quant.htp_int8_weights(w, axis)
    monkeypatch.setenv("QNNEMU_KERNELS", "reference")
    ref = quant.htp_int8_weights(w, axis)
    monkeypatch.delenv("QNNEMU_KERNELS")
    return fast, ref


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 40), st.integers(1, 24), st.integers(0, 1), st.integers(0, 2**32 - 1))
def test_c_requant_matches_numpy(monkeypatch, rows, channels, axis, seed):
    rng = np.random.default_rng(seed)
    # zero-point-adjusted uint8 codes: channels with offsets far from 128 leave [-128, 127]
    codes = rng.integers(0, 256, size=(rows, channels)).astype(np.float64)
    offsets = rng.integers(-255, 1, size=channels).astype(np.float64)
    w = codes + offsets
    if axis == 0:
        w = np.ascontiguousarray(w.T)
    (fw, ff), (rw, rf) = _both(monkeypatch, w, axis)
    assert fw.tobytes() == rw.tobytes(), "C and numpy requantized weights differ"
    assert ff.tobytes() == rf.tobytes(), "C and numpy per-channel factors differ"
    assert np.all(np.abs(fw) <= 128), "requantized weights stay in the int8 range"


def test_c_requant_keeps_in_range_channels(monkeypatch):
    w = np.array([[1.0, -200.0], [127.0, 30.0], [-128.0, 250.0]])
    (fw, ff), (rw, rf) = _both(monkeypatch, w, 1)
    assert fw[:, 0].tolist() == [1.0, 127.0, -128.0], "a channel inside [-128, 127] is left as it is"
    assert ff[0] == 1.0 and ff[1] > 1.0, "only the out-of-range channel gets a factor"
    assert fw.tobytes() == rw.tobytes(), "C and numpy agree on a mixed array"
