"""MaskedSoftmax (QnnOpDef.h QNN_OP_MASKED_SOFTMAX, parameter ``mode``) and the masked softmax
the HTP's MaskedSoftmax rewrite computes (QNN HTP backend documentation, "MaskedSoftmax";
the rewrite itself lives in qnnemu/core/plan.py ``masked_softmax_rewrites``).

The node: in[0] the data ``[batch, height, width, channel]`` (float32, float16 or 8/16-bit fixed
point), in[1] the mask, out[0] like in[0]; softmax along the channel axis.

- ``mode`` UNCOMPRESSED (0, the default): the mask ``[batch, channel]`` holds additive real
  values (0 keeps an entry, a large negative number such as -10000 masks it off), broadcast over
  height and width: ``out = softmax(x + mask)``;
- ``mode`` COMPRESSED (1): the data holds concatenated sequences (width == channel) and the mask
  ``[batch, n]`` (INT_32 / UINT_32) their lengths; entry (w, c) is kept when w and c fall in the
  same sequence (the block diagonal of the lengths' segments), the softmax runs over the kept
  entries of a row and masked entries output 0 (rows past the last sequence are all 0).  The
  lengths must sum to at most ``channel``.

These are the semantics of QAIRT's reference (ONNX function) form of the op.  The vendor's x86-64
libQnnHtp.so (QNN 2.51) has no kernel for it on any arch: backendValidateOpConfig refuses it
("OpValidator not found"), graphAddNode takes it and graphFinalize cannot create it -- qnnemu
refuses likewise through the measured op support (qnnemu/htp/op_support.py,
``QNNEMU-htp-op-unsupported`` / ``QNNEMU-htp-op-finalize``); ``QNNEMU_OP_SUPPORT=all`` runs this
kernel.  The HTP computes MaskedSoftmax only where its graph rewrite creates it.
"""
from __future__ import annotations

import numpy as np

from ..headers import Q
from ..spec import dtypes
from .base import Op, ParamSpec, check_rank, from_compute, same_spec, to_compute
from .elementwise import input_class, rule_error

UNCOMPRESSED = int(Q.QNN_OP_MASKED_SOFTMAX_MODE_UNCOMPRESSED)
COMPRESSED = int(Q.QNN_OP_MASKED_SOFTMAX_MODE_COMPRESSED)
_INT_MASKS = (Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32)


def masked_softmax(x: np.ndarray, keep: np.ndarray, axis: int = -1, beta: float = 1.0) -> np.ndarray:
    """Softmax of ``beta * x`` along ``axis`` over the entries where ``keep`` (broadcast to x's
    shape) is true; every other entry is exactly 0, a row with no kept entry is all 0.  Computed
    in float64, returned in x's dtype."""
    keep = np.broadcast_to(np.asarray(keep, dtype=bool), x.shape)
    z = beta * x.astype(np.float64)
    # The max over the kept entries only: masked ones neither shift nor overflow the exponent.
    top = np.where(keep, z, -np.inf).max(axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.where(keep, np.exp(np.minimum(z - top, 0.0)), 0.0)
    total = e.sum(axis=axis, keepdims=True)
    return (e / np.where(total > 0, total, 1.0)).astype(x.dtype, copy=False)


def compressed_keep(lengths: np.ndarray, width: int, channel: int) -> np.ndarray:
    """The [batch, 1, width, channel] keep mask of COMPRESSED mode: (w, c) kept when both fall in
    the same sequence of ``lengths`` ([batch, n] sequence lengths, concatenated from 0)."""
    batch = lengths.shape[0]
    keep = np.zeros((batch, 1, width, channel), dtype=bool)
    for b in range(batch):
        start = 0
        for n in lengths[b].astype(np.int64):
            stop = start + max(int(n), 0)
            keep[b, 0, start:min(stop, width), start:min(stop, channel)] = True
            start = stop
    return keep


class MaskedSoftmax(Op):
    """Softmax along the channel axis of in[0] [batch, height, width, channel] under the mask
    in[1] (see the module docstring for the two modes)."""

    inputs = ("in[0]", "in[1]")
    params = {"mode": ParamSpec("scalar", ("uint",), default=UNCOMPRESSED)}

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x, mask = inputs
        mode = params["mode"]
        if mode not in (UNCOMPRESSED, COMPRESSED):
            raise rule_error(op, "mode", "params[mode]",
                             f"mode must be {UNCOMPRESSED} (UNCOMPRESSED) or {COMPRESSED} (COMPRESSED), got {mode}")
        input_class(op, 0, x)
        check_rank(op, 0, x, (4,))
        check_rank(op, 1, mask, (2,))
        batch, _, width, channel = x.shape
        if mode == UNCOMPRESSED:
            input_class(op, 1, mask)
            if mask.shape[0] not in (1, batch) or mask.shape[1] != channel:
                raise rule_error(op, "mask", "inputTensors[1].dimensions",
                                 f"the UNCOMPRESSED mask must be [batch, channel] = [{batch}, {channel}] "
                                 f"(or [1, {channel}]), got {list(mask.shape)}")
        else:
            if mask.dtype not in _INT_MASKS:
                raise rule_error(op, "dtype", "inputTensors[1].dataType",
                                 f"the COMPRESSED mask holds sequence lengths: INT_32 or UINT_32, got "
                                 f"{dtypes.name(mask.dtype)}", unsupported=True)
            if mask.shape[0] not in (1, batch) or width != channel:
                raise rule_error(op, "mask", "inputTensors[1].dimensions",
                                 f"COMPRESSED mode needs a [batch, n] mask (batch {batch}) and width == "
                                 f"channel, got mask {list(mask.shape)} for data {list(x.shape)}")
        return [same_spec(x)]

    def _run(self, x, mask, mode):
        xc = to_compute(x)
        if mode == UNCOMPRESSED:
            z = xc.astype(np.float64) + to_compute(mask).astype(np.float64)[:, None, None, :]
            return from_compute(masked_softmax(z, np.ones(z.shape, bool)).astype(xc.dtype), x.dtype)
        lengths = np.asarray(mask)
        if (lengths.astype(np.int64).sum(axis=1) > x.shape[3]).any():
            raise rule_error(self.op_type, "mask", "inputTensors[1]",
                             f"the sequence lengths {lengths.tolist()} sum to more than the channel "
                             f"dimension {x.shape[3]}")
        keep = compressed_keep(np.broadcast_to(lengths, (x.shape[0], lengths.shape[1])), x.shape[2], x.shape[3])
        return from_compute(masked_softmax(xc, keep), x.dtype)
