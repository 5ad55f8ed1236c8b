"""The reference and the fast (C kernel, qnnemu/ops/_fast.py and csrc/) paths of one op compared
(QnnOpDef.h ops): random float32 inputs, a scale-relative closeness check,
``run_both`` running an op with ``config.kernels`` = "reference" and "fast", and a float64 GEMM
reference.  Used by tests/test_kernels.py in process and in its per-ISA subprocesses."""
from __future__ import annotations

import numpy as np

from qnnemu import ops
from qnnemu.core import dtypes
from qnnemu.headers import Q
from qnnemu.ops import Param, TensorSpec

RNG = np.random.default_rng(99)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def assert_close(got, ref, what, rel=1e-5):
    """Within rel of the result scale (float32 accumulation order differs between the two)."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} == {ref.shape}"
    if ref.size == 0:
        return
    scale = float(np.max(np.abs(ref)))
    err = float(np.max(np.abs(got - ref)))
    assert err <= rel * scale + 1e-30, f"{what}: max error {err:.3g} <= {rel} * scale {scale:.3g}"


def run_both(op_type, arrays, params, static=()):
    """Runs an op with config.kernels = "reference" and "fast"; returns both outputs."""
    cls = ops.get(op_type)
    ps = {}
    for k, v in params.items():
        if isinstance(v, bool):
            ps[k] = Param(k, "scalar", Q.QNN_DATATYPE_BOOL_8, v)
        elif isinstance(v, int):
            ps[k] = Param(k, "scalar", Q.QNN_DATATYPE_UINT_32, v)
        else:
            ps[k] = Param(k, "tensor", Q.QNN_DATATYPE_UINT_32, np.asarray(v, np.uint32))
    specs = [TensorSpec(a.shape, dtypes.from_numpy(a.dtype), data=a if i in static else None)
             for i, a in enumerate(arrays)]
    outs = cls.check(specs, ps)
    op = cls(cls.parse_params(ps), specs, outs)
    old = ops.config.kernels
    try:
        ops.config.kernels = "reference"
        (ref,) = op.run(*arrays)
        ops.config.kernels = "fast"
        (fast,) = op.run(*arrays)
    finally:
        ops.config.kernels = old
    return fast, ref


def ref64(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)
