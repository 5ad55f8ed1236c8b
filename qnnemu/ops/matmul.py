"""Matrix products: FullyConnected and MatMul (QnnOpDef.h QNN_OP_FULLY_CONNECTED, QNN_OP_MAT_MUL),
and the QNN 2.50 matrix Inverse (QNN_OP_INVERSE).

FullyConnected: input of rank >= 2 is flattened to [n, k] (k = weights' second dimension),
weights [m, k] (QNN's [units, input_size]: ONNX Runtime's QNN EP transposes a MatMul/Gemm
initializer into it), optional bias [m]; output [n, m], or with ``keep_dims`` the input's
leading dimensions followed by m (which needs the input's last dimension to be k).

MatMul: in0 [..., m, k] and in1 [..., k, n] (the last two dimensions swapped when
``transpose_in0`` / ``transpose_in1``), batch dimensions broadcast like numpy.matmul.

Inverse: in[0] [..., n, n] -> the inverse of each n x n matrix (ONNX Runtime's com.microsoft
Inverse), see ``Inverse``.

Inputs are real values (float, or fixed point dequantized by the plan; uint8 activations
with int8 weights and int32 bias are the usual quantized mix).  Both kernels are BLAS GEMMs;
with ``config.kernels == "fast"`` static weights are transposed into a contiguous GEMM
operand once, and MatMuls whose in1 has no batch dimensions run as one GEMM.
"""
from __future__ import annotations

import numpy as np

from ..headers import Q
from . import _fast
from .base import Op, OpCheckError, ParamSpec, TensorSpec, check_rank, from_compute, same_spec, to_compute
from .conv import check_real_inputs


def _check_min_rank(op: str, idx: int, spec: TensorSpec, least: int) -> None:
    if spec.rank < least:
        raise OpCheckError(f"QNNEMU-{op}-input-rank", f"inputTensors[{idx}].rank",
                           f"{op} input {idx} must have rank >= {least}, got {spec.rank} "
                           f"(dimensions {list(spec.shape)})")


class FullyConnected(Op):
    inputs = ("in[0]", "in[1]", "in[2]?")
    params = {"keep_dims": ParamSpec("scalar", ("bool",), default=False)}

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        op = cls.op_type
        x, w = inputs[0], inputs[1]
        _check_min_rank(op, 0, x, 2)
        check_rank(op, 1, w, (2,))
        if len(inputs) > 2:
            check_rank(op, 2, inputs[2], (1,))
        check_real_inputs(op, inputs)
        m, k = w.shape
        size = int(np.prod(x.shape, dtype=np.int64))
        if params["keep_dims"]:
            if x.shape[-1] != k:
                raise OpCheckError(f"QNNEMU-{op}-k-mismatch", "inputTensors[1].dimensions",
                                   f"with keep_dims the input's last dimension "
                                   f"({x.shape[-1]}) must equal weights dimension 1 ({k}); "
                                   f"input {list(x.shape)}, weights {list(w.shape)}")
            out_shape = tuple(x.shape[:-1]) + (m,)
        else:
            if k == 0 or size % k != 0:
                raise OpCheckError(f"QNNEMU-{op}-k-mismatch", "inputTensors[1].dimensions",
                                   f"input element count ({size}) must be a multiple of "
                                   f"weights dimension 1 ({k}); input {list(x.shape)}, "
                                   f"weights {list(w.shape)}")
            out_shape = (size // k, m)
        if len(inputs) > 2 and tuple(inputs[2].shape) != (m,):
            raise OpCheckError(f"QNNEMU-{op}-bias-shape", "inputTensors[2].dimensions",
                               f"bias must have dimensions [{m}] (weights dimension 0), got "
                               f"{list(inputs[2].shape)}")
        return [same_spec(x, shape=out_shape)]

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._static_w = StaticOperand(self.input_specs, 1, lambda w: w.T)

    def _run(self, x, w, b=None, keep_dims=False):
        dtype = x.dtype
        x, b = to_compute(x), to_compute(b)
        m, k = w.shape
        x2 = x.reshape(-1, k)
        if _fast.fast():
            y = _fast.gemm(x2, self._static_w.get(w), b)
        else:
            y = x2 @ to_compute(w).T
            if b is not None:
                y = y + b
        out_shape = x.shape[:-1] + (m,) if keep_dims else (x2.shape[0], m)
        return from_compute(y.reshape(out_shape), dtype)


class MatMul(Op):
    inputs = ("in[0]", "in[1]")
    params = {
        "transpose_in0": ParamSpec("scalar", ("bool",), default=False),
        "transpose_in1": ParamSpec("scalar", ("bool",), default=False),
    }

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        op = cls.op_type
        a, b = inputs
        _check_min_rank(op, 0, a, 2)
        _check_min_rank(op, 1, b, 2)
        check_real_inputs(op, inputs)
        m, k = a.shape[-2:][::-1] if params["transpose_in0"] else a.shape[-2:]
        k2, n = b.shape[-2:][::-1] if params["transpose_in1"] else b.shape[-2:]
        if k != k2:
            raise OpCheckError(f"QNNEMU-{op}-inner-dim", "inputTensors[1].dimensions",
                               f"inner dimensions differ: in0 gives k={k} "
                               f"(transpose_in0={params['transpose_in0']}, {list(a.shape)}), "
                               f"in1 gives k={k2} (transpose_in1={params['transpose_in1']}, "
                               f"{list(b.shape)})")
        try:
            batch = np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
        except ValueError:
            raise OpCheckError(f"QNNEMU-{op}-broadcast", "inputTensors[1].dimensions",
                               f"batch dimensions {list(b.shape[:-2])} of in1 do not "
                               f"broadcast with {list(a.shape[:-2])} of in0") from None
        return [same_spec(a, shape=tuple(batch) + (m, n))]

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        t1 = bool(params.get("transpose_in1", False))
        self._static_b = StaticOperand(self.input_specs, 1,
                                       (lambda v: np.swapaxes(v, -1, -2)) if t1 else None)

    def _run(self, a, b, transpose_in0=False, transpose_in1=False):
        dtype = a.dtype
        a = to_compute(a)
        if _fast.fast():
            # A static in1 is stored already transposed: the product needs no transpose flag.
            y = _fast.matmul(a, self._static_b.get(b), transpose_in0, False)
        else:
            b = to_compute(b)
            y = np.matmul(np.swapaxes(a, -1, -2) if transpose_in0 else a,
                          np.swapaxes(b, -1, -2) if transpose_in1 else b)
        return from_compute(y, dtype)


class Inverse(Op):
    """The inverse of each matrix in the last two dimensions of in[0] ([..., n, n]; QNN 2.50 op
    definitions, QNN_OP_INVERSE), computed in float64 by LU decomposition and rounded to the
    input's type.  A singular matrix (no inverse) gives NaN in every element of its result.

    The vendor's x86-64 libQnnHtp.so (QNN 2.51) has no Inverse (graphFinalize fails "could not
    create op"); ONNX Runtime's QNN EP lowers com.microsoft Inverse of 2 x 2 matrices to
    StridedSlice / ElementWiseMultiply / ElementWiseSubtract / Concat / ElementWiseDivide
    (adjugate over determinant) rather than emitting it.  Real inputs: float32, float16,
    quantized fixed point (dequantized by the plan).
    """

    inputs = ("in[0]",)

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        x = inputs[0]
        check_real_inputs(cls.op_type, inputs)
        _check_min_rank(cls.op_type, 0, x, 2)
        if x.shape[-1] != x.shape[-2]:
            raise OpCheckError("QNNEMU-Inverse-square", "inputTensors[0].dimensions",
                               f"the last two dimensions must be equal (square matrices), got "
                               f"{list(x.shape)}")
        return [same_spec(x)]

    def _run(self, x):
        a = np.asarray(x, dtype=np.float64)
        try:
            inv = np.linalg.inv(a)
        except np.linalg.LinAlgError:  # some matrix is singular: invert one at a time
            n = a.shape[-1]
            flat = a.reshape(-1, n, n)
            inv = np.empty_like(flat)
            for i, m in enumerate(flat):
                try:
                    inv[i] = np.linalg.inv(m)
                except np.linalg.LinAlgError:
                    inv[i] = np.nan
            inv = inv.reshape(a.shape)
        return inv.astype(x.dtype)


class StaticOperand:
    """A weight input prepared once (float32, through ``prepare``, made contiguous, packed for
    the C GEMM when that is in use: ``_fast.pack_operand``) when its tensor is static;
    recomputed per call otherwise.  The cache is keyed by the array object the op is given,
    so a dequantized fixed-point weight is prepared on the first run."""

    def __init__(self, specs: list[TensorSpec], idx: int, prepare=None):
        self.prepare = prepare
        self.static = len(specs) > idx and specs[idx].data is not None
        self.src = None
        self.value = None
        if self.static and specs[idx].dtype in (Q.QNN_DATATYPE_FLOAT_32,
                                                Q.QNN_DATATYPE_FLOAT_16):
            self.src, self.value = specs[idx].data, self._make(specs[idx].data)

    def _make(self, w: np.ndarray):
        w = np.asarray(w, dtype=np.float32)
        v = self.prepare(w) if self.prepare else w  # a (transposed) view
        packed = _fast.pack_operand(v)              # the C GEMM's panels, packed from the view
        return packed if packed is not v else np.ascontiguousarray(v)

    def get(self, w: np.ndarray) -> np.ndarray:
        if w is self.src:
            return self.value
        if not self.static:
            w = np.asarray(w, dtype=np.float32)
            return self.prepare(w) if self.prepare else w
        self.src, self.value = w, self._make(w)
        return self.value


__all__ = ["FullyConnected", "MatMul", "Inverse"]
