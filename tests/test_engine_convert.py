"""The C engine's fused Quantize (csrc/eng_convert.c qe_k_quantize_f32, lowered by
qnnemu/core/engine/lower_convert.py; issue 13): float32 -> 8/16-bit codes in one vectorised pass
equals the engine's two converter kernels (nan_to_num, then requantize in Quantize's rounding
modes) on every float32 class, and a Quantize graph's codes equal the Python plan's."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, GraphBuilder, new_context
from hypothesis import given, settings, strategies as st

from qnnemu.core.engine import check_plan
from qnnemu.headers import Q
from qnnemu.ops import _fast
from qnnemu.ops.base import QuantSpec
from qnnemu.spec.quant import Requantize, rounding_for

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")

lib, ffi = _fast.library()
ENC = Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET
CODE_TYPES = {Q.QNN_DATATYPE_UFIXED_POINT_8: (np.uint8, 0), Q.QNN_DATATYPE_SFIXED_POINT_8: (np.int8, 1),
              Q.QNN_DATATYPE_UFIXED_POINT_16: (np.uint16, 2), Q.QNN_DATATYPE_SFIXED_POINT_16: (np.int16, 3)}
MODES = {"fp16_half_away_from_zero": 3, "exact_half_away_from_zero": 4}


def call(kernel: str, arrays, ints=(), dbls=()) -> None:
    ptrs = ffi.new("void *[]", [ffi.cast("void *", a.ctypes.data) for a in arrays])
    ivals = ffi.new("int64_t[]", list(ints) or [0])
    dvals = ffi.new("double[]", list(dbls) or [0.0])
    args = ffi.new("qe_args *", {"p": ptrs, "i": ivals, "d": dvals, "np": len(arrays),
                                 "ni": len(ints), "nd": len(dbls)})
    assert getattr(lib, kernel)(args) == 0, f"{kernel} returned an error"


def float32_bits(n: int, seed: int) -> np.ndarray:
    """Random float32 bit patterns (zeros, subnormals, normals, inf, NaN) plus float16 edges."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([0.0, -0.0, 2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-25, 65504.0, 65520.0, np.inf, np.nan,
                      0.5, 1.5, 2.5, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11], np.float32)
    return np.concatenate([x, edges, -edges])


def chain(x: np.ndarray, conv: Requantize, code: int) -> np.ndarray:
    """The unfused steps: qe_k_nan_to_num, then qe_k_requant."""
    clean = np.empty_like(x)
    call("qe_k_nan_to_num", [x, clean], (x.size,))
    y = np.empty(x.shape, conv.np_dtype)
    call("qe_k_requant", [clean, y], (x.size, code, MODES[conv.mode], conv.lo, conv.hi),
         (float(conv.inv), float(conv.offset)))
    return y


@settings(max_examples=60)
@given(dtype=st.sampled_from(sorted(CODE_TYPES)), scale=st.floats(2.0**-20, 1024.0, width=32),
       offset=st.integers(-70000, 70000), seed=st.integers(0, 2**31), n=st.integers(1, 700))
def test_fused_quantize_equals_the_converter_chain(dtype, scale, offset, seed, n):
    conv = Requantize(QuantSpec(ENC, float(scale), offset), dtype, rounding_for("Quantize"))
    np_dtype, code = CODE_TYPES[dtype]
    with np.errstate(all="ignore"):
        x = float32_bits(n, seed) * np.float32(1e-30)
    x = np.concatenate([x, float32_bits(n // 4, seed + 1),
                        np.float32(scale) * np.arange(-300, 300, 0.25, dtype=np.float32)[: 4 * n]])
    y = np.empty(x.shape, np_dtype)
    call("qe_k_quantize_f32", [x, y], (x.size, code, MODES[conv.mode], conv.lo, conv.hi),
         (float(conv.inv), float(conv.offset)))
    ref = chain(x, conv, code)
    assert y.tobytes() == ref.tobytes(), f"qe_k_quantize_f32 ({conv.mode}, {np.dtype(np_dtype)}) equals the chain"


@pytest.mark.parametrize("dtype", sorted(CODE_TYPES))
def test_quantize_graph_runs_the_fused_kernel_bit_identical(dtype):
    """A Quantize node of 1000 values (vector tails included) lowers to qe_k_quantize_f32 alone,
    and its codes equal the Python plan's."""
    b = GraphBuilder(new_context(), "q")
    try:
        x = b.tensor("x", (8, 125), type_=APP_WRITE)
        quant = (0.05, -100) if CODE_TYPES[dtype][0] in (np.uint8,) else \
            (0.0007, -30000) if CODE_TYPES[dtype][0] is np.uint16 else (0.03, 5)
        y = b.tensor("y", (8, 125), dtype, APP_READ, quant=quant)
        b.node("Quantize", "quant", [x], [y])
        b.graph.finalize()
        engine = b.graph.plan.engine
        assert engine.fallbacks == [], f"Quantize lowers to C: {engine.fallbacks}"
        fn = int(ffi.cast("intptr_t", ffi.addressof(lib, "qe_k_quantize_f32")))
        assert [int(r[0]) for r in engine.program.steps] == [fn], "one fused step"
        rng = np.random.default_rng(4)
        xv = (rng.standard_normal((8, 125)) * 20).astype(np.float32)
        xv[0, :5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
        check_plan(b.graph.plan, {x.id: xv})
    finally:
        b.graph.context.free()


def test_portable_path_equals_the_vector_path():
    """QNNEMU_KERNELS_ISA=avx2 (no AVX-512: the scalar loop) gives the same codes as this
    machine's path, in a fresh process."""
    script = textwrap.dedent("""
        import numpy as np
        from qnnemu.ops import _fast
        lib, ffi = _fast.library()
        rng = np.random.default_rng(8)
        x = rng.integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32).view(np.float32)
        x = np.concatenate([x * np.float32(1e-30), np.linspace(-300, 300, 3001, dtype=np.float32)])
        out = []
        for code, mode, lo, hi in [(0, 3, 0, 255), (1, 3, -128, 127), (2, 4, 0, 65535), (3, 4, -32768, 32767)]:
            y = np.empty(x.size, [np.uint8, np.int8, np.uint16, np.int16][code])
            p = ffi.new("void *[]", [ffi.cast("void *", x.ctypes.data), ffi.cast("void *", y.ctypes.data)])
            i = ffi.new("int64_t[]", [x.size, code, mode, lo, hi])
            d = ffi.new("double[]", [float(np.float32(1 / 0.0123)), 7.0])
            args = ffi.new("qe_args *", {"p": p, "i": i, "d": d, "np": 2, "ni": 5, "nd": 2})
            assert lib.qe_k_quantize_f32(args) == 0
            out.append(y.tobytes().hex())
        print(hash(tuple(out)) & 0xffffffff, len(out))
    """)
    import os
    runs = []
    for isa in (None, "avx2"):
        env = dict(os.environ)
        env.pop("QNNEMU_KERNELS_ISA", None)
        env["PYTHONHASHSEED"] = "0"
        if isa:
            env["QNNEMU_KERNELS_ISA"] = isa
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, f"the probe ran ({isa}): {r.stderr[-2000:]}"
        runs.append(r.stdout.strip())
    assert runs[0] == runs[1], f"scalar and vector paths agree: {runs}"
