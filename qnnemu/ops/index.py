"""Index-producing ops (QnnOpDef.h): NonZero (QNN_OP_NON_ZERO).

NonZero lists the positions of the nonzero elements of in[0], row-major, one row of in[0]'s
rank per element: out[0] is [K, rank].  The count is data-dependent while QNN tensors have fixed
shapes, so the output is sized by the app for the worst case and padded: the first
min(n, K) rows hold the indices of the first nonzero elements, the remaining rows are -1 (the
HTP's padding, which ONNX Runtime's QNN EP documents: "QNN HTP pads unused elements with -1").

How ONNX Runtime's QNN EP maps ONNX NonZero (output [rank, N], INT64) onto it: it needs a static
output shape [rank, N] with N = the input's element count (the worst case), emits QNN NonZero
with a NATIVE [N, rank] INT_32 output, a Transpose to [rank, N], and a Cast to INT_64 when the
result is a graph output; it also casts a float32 input to float16 first.

What the vendor's x86-64 libQnnHtp.so (QNN 2.51) was seen to do, and qnnemu does
(tests/test_ops_vendor_new.py pins it):

- in[0] of any rank >= 1: float32, float16, quantized fixed point (nonzero real value, i.e. a
  code other than the zero point), INT_*/UINT_*, BOOL_8;
- float32 NaN counts as zero (the HTP tests x > 0 or x < 0), float16 NaN as nonzero; denormals,
  infinities and -0.0 as IEEE says (-0.0 is zero);
- out[0] [K, rank] with any K >= 1: fewer rows than nonzero elements truncate the list, more are
  padded with -1;
- out[0] INT_32 (the EP's), INT_8/16/64, FLOAT_32 / FLOAT_16 (indices and -1 as floats) pad
  with -1; UINT_32 with its maximum (-1 wrapped), UINT_8/16 with 0 (saturated).  (UINT_64 is
  refused at tensor creation.)

Refused although the vendor takes it: an output whose last dimension is not in[0]'s rank (the
vendor then writes values that are not the index list, see the test) -- rule
QNNEMU-NonZero-output-shape.
"""
from __future__ import annotations

import numpy as np

from ..headers import Q
from ..spec import dtypes
from .base import Op, OpCheckError, TensorSpec, check_real

_F32, _F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16
_OUTPUT_TYPES = tuple(sorted(dtypes.INT_TYPES)) + (_F32, _F16)


def _fail(rule: str, path: str, message: str) -> OpCheckError:
    return OpCheckError(f"QNNEMU-NonZero-{rule}", path, message)


class NonZero(Op):
    inputs = ("in[0]",)

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params, declared_outputs=None) -> list[TensorSpec]:
        x = inputs[0]
        check_real(cls.op_type, 0, x, ints=True, bools=True)
        if x.rank < 1:
            raise _fail("input-rank", "inputTensors[0].rank",
                        "NonZero needs an input of rank >= 1 (a rank-0 tensor has no index)")
        if not declared_outputs:
            raise _fail("output-unknown", "outputTensors[0].dimensions",
                        f"NonZero's output size is the app's worst case, [K, {x.rank}]: declare "
                        f"the output tensor (e.g. [{int(np.prod(x.shape))}, {x.rank}], one row "
                        f"per input element)")
        out = declared_outputs[0]
        if len(out.shape) != 2 or out.shape[1] != x.rank:
            raise _fail("output-shape", "outputTensors[0].dimensions",
                        f"the output must be [K, {x.rank}] (K rows of in[0]'s {x.rank} indices; "
                        f"unused rows are -1), got {list(out.shape)}")
        dtype = out.dtype if out.dtype in _OUTPUT_TYPES else Q.QNN_DATATYPE_INT_32
        return [TensorSpec(tuple(out.shape), dtype)]

    def _run(self, x):
        if x.dtype == np.float32 or x.dtype == np.float64:
            nonzero = (x > 0) | (x < 0)   # NaN is not nonzero in float32 (the HTP's test)
        else:
            nonzero = x != 0              # float16 NaN is nonzero
        found = np.argwhere(nonzero)
        rows = self.output_specs[0].shape[0] if self.output_specs else max(len(found), 1)
        dtype = self.output_specs[0].dtype if self.output_specs else Q.QNN_DATATYPE_INT_32
        np_dtype = dtypes.numpy_dtype(dtype)
        # The padding: -1, wrapped to the maximum in UINT_32, saturated to 0 in UINT_8/16.
        pad = 0 if np_dtype in (np.uint8, np.uint16) else -1
        out = np.full((rows, x.ndim), pad, dtype=np.int64)
        n = min(rows, len(found))
        out[:n] = found[:n]
        return out.astype(np_dtype)


__all__ = ["NonZero"]
