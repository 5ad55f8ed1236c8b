"""The C engine's recurrent family (qnnemu/core/engine/lower_rnn.py, csrc/eng_rnn.c; issue 13):
Lstm and Gru (QNN op definitions "Lstm", "Gru") lower to C steps without fallbacks in every
variant the ops run -- float32, float16 math (SM8550) and fixed point (uint8 / uint16 codes,
dequantized and requantized by the core's converters) -- and their results equal the Python
plan's byte for byte.  The ops' fast path (the same C functions, qnnemu/ops/_fast_rnn.py) stays
within float32 rounding of their numpy reference formulas."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, STATIC, GraphBuilder, desc, new_context, param, ref
from hypothesis import given, strategies as st
from optest import run_checked

from qnnemu.core.device import model_from_configs
from qnnemu.core.engine import check_plan
from qnnemu.core.graph import OpConfigDesc
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.ops import _fast

pytestmark = pytest.mark.skipif(not _fast.available() or _fast.gemm_backend() != "c",
                                reason="qnnemu._kernels is not built or QNNEMU_GEMM=blas")

F16_SOC = Q.QNN_SOC_MODEL_SM8550   # float16 math (QNN HTP backend documentation, "QNN HTP Precision")
F32 = Q.QNN_DATATYPE_FLOAT_32
U8, U16 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_16
NULL = Q.QNN_TENSOR_TYPE_NULL
FIXED = {"u8": (U8, np.uint8, 255), "u16": (U16, np.uint16, 65535)}


def builder(name: str, fp16: bool) -> GraphBuilder:
    """A graph on SM8550 (v73: the HTP creates Lstm and Gru there, not on v68), in its float16
    math or in exact float32 math (the emulator's qnnemu_float_math finalize config)."""
    ctx = new_context(model=model_from_configs(F16_SOC, None, None))
    configs = None if fp16 else {"htp_finalize_config": {"qnnemu_float_math": "float32"}}
    return GraphBuilder(ctx, name, configs)


def add_node(b: GraphBuilder, op: str, name: str, inputs, outputs, **params):
    """graphAddNode with ``None`` inputs passed as NULL tensors (as ONNX Runtime's EP does)."""
    ins = [desc(f"{name}.null{i}", (0,), F32, NULL) if t is None else ref(t)
           for i, t in enumerate(inputs)]
    cfg = OpConfigDesc(1, name, "qti.aisw", op, [param(k, v) for k, v in params.items()], ins,
                       [ref(t) for t in outputs])
    b.graph.add_node(cfg)


class Tensors:
    """Makes a node's tensors: float32, or fixed point (codes from random reals) with ``kind``."""

    def __init__(self, b: GraphBuilder, rng, kind: str, static: bool):
        self.b, self.rng, self.kind, self.static = b, rng, kind, static
        self.feeds: dict[int, np.ndarray] = {}
        self.values: dict[int, np.ndarray] = {}     # tensor id -> the real values (float32)

    def _quant(self, values):
        dtype, np_type, top = FIXED[self.kind]
        lo, hi = min(float(values.min()), 0.0), max(float(values.max()), 0.0)
        scale = max(hi - lo, 1e-3) / top
        offset = round(lo / scale)
        codes = np.clip(np.round(values / scale) - offset, 0, top).astype(np_type)
        return dtype, (scale, offset), codes

    def input(self, name, shape, scale=1.0, weight=True):
        values = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        static = self.static and weight
        if self.kind == "f32":
            t = self.b.tensor(name, shape, F32, STATIC if static else APP_WRITE,
                              data=values if static else None)
            data = values
        else:
            dtype, q, data = self._quant(values)
            t = self.b.tensor(name, shape, dtype, STATIC if static else APP_WRITE,
                              data=data if static else None, quant=q)
        if not static:
            self.feeds[t.id] = data
        self.values[t.id] = values
        return t

    def output(self, name, shape, scale=2.0):
        if self.kind == "f32":
            return self.b.tensor(name, shape, F32, APP_READ)
        dtype, _, top = FIXED[self.kind]
        return self.b.tensor(name, shape, dtype, APP_READ, quant=(2 * scale / top, -(top + 1) // 2))


def check(b: GraphBuilder, feeds: dict, what: str, op_type: str) -> None:
    """Finalizes ``b``: the op runs as a C step (no fallback), and every value of the C program
    equals the Python plan's."""
    try:
        b.graph.finalize()
        engine = b.graph.plan.engine
        assert engine is not None, f"{what}: the engine compiled a program"
        assert engine.fallbacks == [], f"{what}: every step runs in C, fallbacks {engine.fallbacks}"
        assert engine.summary()["fallback_ops"] == {}, f"{what}: summary() counts no fallback"
        check_plan(b.graph.plan, feeds)
    finally:
        HANDLES.release(b.handle)


# ---- Lstm ------------------------------------------------------------------------------------
def lstm_graph(kind, fp16, static, cifg, peephole, layer_norm, projection, proj_bias, states,
               steps, batch, n_in, n, p, time_major, x2d, reverse, cell_clip, out_clip, seed):
    rng = np.random.default_rng(seed)
    p = p if projection else n
    b = builder("lstm", fp16)
    t = Tensors(b, rng, kind, static)
    x_shape = (batch, n_in) if x2d else ((steps, batch, n_in) if time_major else (batch, steps, n_in))
    ins = [None] * 24
    ins[0] = t.input("x", x_shape, weight=False)
    for i in (1, 2, 3):
        ins[i] = t.input(f"wx{i}", (n, n_in), 0.5)
    for i in (4, 5, 6):
        ins[i] = t.input(f"wh{i}", (n, p), 0.5)
    for i in (7, 8, 9):
        ins[i] = t.input(f"b{i}", (n,))
    if states:
        ins[10] = t.input("h0", (batch, p), weight=False)
        ins[11] = t.input("c0", (batch, n), weight=False)
    if not cifg:
        ins[16] = t.input("wxi", (n, n_in), 0.5)
        ins[17] = t.input("whi", (n, p), 0.5)
        ins[21] = t.input("bi", (n,))
    if peephole:
        ins[19], ins[20] = t.input("wcf", (n,)), t.input("wco", (n,))
        if not cifg:
            ins[18] = t.input("wci", (n,))
    if layer_norm:
        for i in (13, 14, 15):
            ins[i] = t.input(f"ln{i}", (n,))
        if not cifg:
            ins[12] = t.input("ln12", (n,))
    if projection:
        ins[22] = t.input("wproj", (p, n), 0.5)
        if proj_bias:
            ins[23] = t.input("bproj", (p,))
    while ins[-1] is None:
        ins.pop()
    outs = [t.output("y", x_shape[:-1] + (p,)), t.output("c", (batch, n), 4.0),
            t.output("h", (batch, p))]
    add_node(b, "Lstm", "lstm", ins, outs, direction=int(reverse), time_major=time_major,
             cell_clip_threshold=cell_clip, output_clip_threshold=out_clip)
    what = (f"Lstm {kind} fp16={fp16} static={static} cifg={cifg} peephole={peephole} "
            f"ln={layer_norm} proj={projection}/{proj_bias} states={states} x{list(x_shape)} "
            f"n={n} p={p} time_major={time_major} reverse={reverse} clips={cell_clip}/{out_clip}")
    b.arrays = [None if x is None else t.values[x.id] for x in ins]
    return b, t.feeds, what


lstm_variants = dict(
    static=st.booleans(), cifg=st.booleans(), peephole=st.booleans(), layer_norm=st.booleans(),
    projection=st.booleans(), proj_bias=st.booleans(), states=st.booleans(),
    steps=st.integers(1, 5), batch=st.sampled_from([1, 2, 3, 8, 9]), n_in=st.integers(1, 40),
    n=st.integers(1, 40), p=st.integers(1, 24), time_major=st.booleans(), x2d=st.booleans(),
    reverse=st.booleans(), cell_clip=st.sampled_from([0.0, 0.5, 3.0]),
    out_clip=st.sampled_from([0.0, 0.25, 2.0]), seed=st.integers(0, 2**31))


@given(fp16=st.booleans(), **lstm_variants)
def test_lstm_float_bit_identical(fp16, **kw):
    b, feeds, what = lstm_graph("f32", fp16, **kw)
    check(b, feeds, what, "Lstm")


@given(kind=st.sampled_from(["u8", "u16"]), **lstm_variants)
def test_lstm_fixed_point_bit_identical(kind, **kw):
    b, feeds, what = lstm_graph(kind, False, **kw)
    check(b, feeds, what, "Lstm")


def test_lstm_silero_shape_in_float16_math():
    """Silero VAD's decoder cell as ONNX Runtime's QNN EP builds it: one 2-D step, 128 units,
    dynamic initial states, SM8550 (float16 math)."""
    b, feeds, what = lstm_graph("f32", True, static=True, cifg=False, peephole=False,
                                layer_norm=False, projection=False, proj_bias=False, states=True,
                                steps=1, batch=1, n_in=128, n=128, p=128, time_major=False,
                                x2d=True, reverse=False, cell_clip=0.0, out_clip=0.0, seed=5)
    check(b, feeds, what, "Lstm")


# ---- Gru -------------------------------------------------------------------------------------
def gru_graph(kind, fp16, static, steps, batch, n_in, h, time_major, x2d, reverse, lbr, h0, seed):
    rng = np.random.default_rng(seed)
    b = builder("gru", fp16)
    t = Tensors(b, rng, kind, static)
    x_shape = (batch, n_in) if x2d else ((steps, batch, n_in) if time_major else (batch, steps, n_in))
    ins = [t.input("x", x_shape, weight=False)]
    ins += [t.input(f"wx{i}", (h, n_in), 0.5) for i in range(3)]
    ins += [t.input(f"wh{i}", (h, h), 0.5) for i in range(3)]
    ins += [t.input(f"b{i}", (h,)) for i in range(6)]
    if h0:
        ins.append(t.input("h0", (batch, h), weight=False))
    last = (batch, h) if x2d else (1, batch, h)
    outs = [t.output("y", x_shape[:-1] + (h,)), t.output("h", last)]
    add_node(b, "Gru", "gru", ins, outs, direction=int(reverse), linear_before_reset=int(lbr),
             time_major=time_major)
    what = (f"Gru {kind} fp16={fp16} static={static} x{list(x_shape)} h={h} time_major={time_major} "
            f"reverse={reverse} lbr={lbr} h0={h0}")
    return b, t.feeds, what


gru_variants = dict(
    static=st.booleans(), steps=st.integers(1, 5), batch=st.sampled_from([1, 2, 3, 9]),
    n_in=st.integers(1, 40), h=st.integers(1, 40), time_major=st.booleans(), x2d=st.booleans(),
    reverse=st.booleans(), lbr=st.booleans(), h0=st.booleans(), seed=st.integers(0, 2**31))


@given(fp16=st.booleans(), **gru_variants)
def test_gru_float_bit_identical(fp16, **kw):
    b, feeds, what = gru_graph("f32", fp16, **kw)
    check(b, feeds, what, "Gru")


@given(kind=st.sampled_from(["u8", "u16"]), **gru_variants)
def test_gru_fixed_point_bit_identical(kind, **kw):
    b, feeds, what = gru_graph(kind, False, **kw)
    check(b, feeds, what, "Gru")


# ---- the fast path against the numpy reference ------------------------------------------------
def _both(op_type, arrays, params):
    saved = _fast.config.kernels
    try:
        _fast.config.kernels = "fast"
        fast = run_checked(op_type, arrays, params)
        _fast.config.kernels = "reference"
        reference = run_checked(op_type, arrays, params)
    finally:
        _fast.config.kernels = saved
    return fast, reference


@given(kw=st.fixed_dictionaries(lstm_variants))
def test_lstm_fast_path_close_to_the_numpy_formula(kw):
    b, _, what = lstm_graph("f32", False, **kw)
    HANDLES.release(b.handle)
    arrays = b.arrays
    params = {"direction": int(kw["reverse"]), "time_major": kw["time_major"],
              "cell_clip_threshold": kw["cell_clip"], "output_clip_threshold": kw["out_clip"]}
    fast, reference = _both("Lstm", arrays, params)
    for k, (a, r) in enumerate(zip(fast, reference)):
        err = np.abs(a.astype(np.float64) - r) / (1.0 + np.abs(r.astype(np.float64)))
        assert a.dtype == r.dtype == np.float32 and float(err.max(initial=0.0)) < 1e-4, \
            f"{what}: out[{k}] of the C fast path within 1e-4 of the numpy formula (got {err.max()})"


def test_reference_kernels_fall_back(monkeypatch):
    """With QNNEMU_KERNELS=reference the ops run numpy, which C does not reproduce: the steps
    fall back, with the reason counted."""
    monkeypatch.setattr(_fast.config, "kernels", "reference")
    for make in (lambda: lstm_graph("f32", False, True, False, False, False, False, False, True,
                                    2, 1, 3, 4, 4, True, False, False, 0.0, 0.0, 1),
                 lambda: gru_graph("f32", False, True, 2, 1, 3, 4, True, False, False, False, True, 1)):
        b, feeds, what = make()
        try:
            b.graph.finalize()
            reasons = " ".join(str(f) for f in b.graph.plan.engine.fallbacks)
            assert "numpy" in reasons, f"{what}: falls back with the reference kernels ({reasons})"
        finally:
            HANDLES.release(b.handle)


# ---- the kernels' ISA clones ------------------------------------------------------------------
_ISA_SCRIPT = r"""
import hashlib, sys
import numpy as np
from qnnemu.ops import _fast_rnn
digest = hashlib.sha256()
for seed in range(12):
    rng = np.random.default_rng(seed)
    n_in, n = (int(v) for v in rng.integers(1, 70, 2))
    batch, steps = int(rng.integers(1, 8)), int(rng.integers(1, 6))
    arrays = [None] * 24
    arrays[0] = rng.standard_normal((steps, batch, n_in)).astype(np.float32)
    for i in (1, 2, 3, 16):
        arrays[i] = rng.standard_normal((n, n_in)).astype(np.float32)
    for i in (4, 5, 6, 17):
        arrays[i] = rng.standard_normal((n, n)).astype(np.float32)
    for i in (7, 8, 9, 21):
        arrays[i] = rng.standard_normal(n).astype(np.float32)
    dims = _fast_rnn.lstm_dims(arrays[0].shape, n, n, True, False)
    for out in _fast_rnn.lstm(arrays, dims, 0.0, 0.0, (steps, batch, n)):
        digest.update(out.tobytes())
    g = [arrays[0]] + [rng.standard_normal((n, n_in)).astype(np.float32) for _ in range(3)]
    g += [rng.standard_normal((n, n)).astype(np.float32) for _ in range(3)]
    g += [rng.standard_normal(n).astype(np.float32) for _ in range(6)] + [None]
    for lbr in (0, 1):
        dims = _fast_rnn.gru_dims(arrays[0].shape, n, True, False, lbr)
        for out in _fast_rnn.gru(g, dims, (steps, batch, n), (1, batch, n)):
            digest.update(out.tobytes())
print("DIGEST", digest.hexdigest())
"""


def _isa_digest(isa: str | None) -> str:
    import os
    import subprocess
    import sys
    from pathlib import Path
    env = dict(os.environ)
    env.pop("QNNEMU_KERNELS_ISA", None)
    if isa:
        env["QNNEMU_KERNELS_ISA"] = isa
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _ISA_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("DIGEST ")]
    assert line, f"the kernel script ({isa or 'default ISA'}) printed a digest: {proc.stderr[-800:]}"
    return line[-1].split()[1]


def test_isa_clones_compute_the_same_bytes():
    """The dot-product kernel's AVX-512, AVX2 and baseline clones (and the element-wise
    functions it calls) give the same bytes: a result does not depend on the machine's ISA
    (products of fewer than 8 rows only: larger ones are the C GEMM's, which does)."""
    default = _isa_digest(None)
    for isa in ("avx2", "sse"):
        assert _isa_digest(isa) == default, \
            f"Lstm / Gru results with QNNEMU_KERNELS_ISA={isa} equal the default ISA's"
