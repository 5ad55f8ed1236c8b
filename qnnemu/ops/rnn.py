"""Gru (QnnOpDef.h QNN_OP_GRU): the gated recurrent unit of ONNX GRU, one direction, over one
step (2-D input) or a sequence (3-D input).

Inputs (hidden size H, input size I, batch B):

====  ==================================  ==================  ===========================
in    tensor                              shape               ONNX GRU slice (ORT's EP)
====  ==================================  ==================  ===========================
0     x                                   [B, I], 3-D         X[t] / X
1     input-to-update W_xz                [H, I]              W[d, 0:H]
2     input-to-reset W_xr                 [H, I]              W[d, H:2H]
3     input-to-new W_xn                   [H, I]              W[d, 2H:3H]
4     recurrent-to-update W_hz            [H, H]              R[d, 0:H]
5     recurrent-to-reset W_hr             [H, H]              R[d, H:2H]
6     recurrent-to-new W_hn               [H, H]              R[d, 2H:3H]
7     input-to-update bias b_xz           [H]                 B[d, 0:H]
8     input-to-reset bias b_xr            [H]                 B[d, H:2H]
9     input-to-new bias b_xn              [H]                 B[d, 2H:3H]
10    recurrent-to-update bias b_hz       [H]                 B[d, 3H:4H]
11    recurrent-to-reset bias b_hr        [H]                 B[d, 4H:5H]
12    recurrent-to-new bias b_hn          [H]                 B[d, 5H:6H]
13?   initial h (default 0)               [B, H] or [1, B, H] initial_h[d]
14?   reset                               --                  (not used)
====  ==================================  ==================  ===========================

A 3-D x is [T, B, I] with ``time_major`` (default false) and [B, T, I] without.  Per step, with
sigma the logistic function (ONNX GRU's gate order z, r, h and formulas)::

    z = sigma(W_xz x + b_xz + W_hz h + b_hz)
    r = sigma(W_xr x + b_xr + W_hr h + b_hr)
    n = tanh(W_xn x + b_xn + r * (W_hn h + b_hn))     linear_before_reset = 1
    n = tanh(W_xn x + b_xn + W_hn (r * h) + b_hn)     linear_before_reset = 0 (default)
    h = (1 - z) * n + z * h

``direction`` REVERSE (1) walks a sequence from the last step to the first; the output of step t
is still stored at t (ONNX's reverse GRU).  Outputs: out[0] h of every step ([B, H], or the
3-D layout of x with H), out[1] the last h, [1, B, H] or [B, H] (as declared; both are taken).

How ONNX Runtime's QNN EP uses it: per direction (bidirectional = two nodes and a Concat) and
per time step, one Gru node with x [1, B, I] (time_major true), the weights and biases as
NATIVE slices of ONNX W/R/B (StridedSlice), in[13] [1, B, H] (ONNX initial_h or a static zero
tensor), zero biases when ONNX B is absent; out[0] and out[1] both [1, B, H].

What the vendor's x86-64 libQnnHtp.so (QNN 2.51) does, and how qnnemu answers
(tests/test_ops_vendor_new.py pins it):

- v68 devices (its default SM8350) have no Gru kernel: graphFinalize fails ("could not create
  op").  v69 and later run the EP's single-step nodes (T = 1) as above (in float16, as they
  run float32 graphs), matching this module within float16 rounding.  qnnemu runs Gru on every
  arch.
- Sequences (T > 1): only the first step of the vendor's result follows the formulas; later
  steps do not (neither the ONNX recurrence nor any layout or direction variant of it), so
  qnnemu follows the op definition and ONNX GRU there.
- NULL biases in[7..12]: graphFinalize fails (no kernel takes them) -- the biases are
  required here (rule QNNEMU-op-null-input-position); the EP always passes them.
- No initial h: the vendor's result is not that of h = 0; qnnemu uses 0 (the op definition).
- A reset tensor in[14] crashes the vendor's process; refused (QNNEMU-Gru-reset, unsupported).
- ``linear_before_reset`` other than 0/1 fails graphFinalize: refused
  (QNNEMU-Gru-linear-before-reset).  ``direction`` other than 0/1 is ignored by the vendor on
  single steps (where it makes no difference): qnnemu takes it there with warning
  QNNEMU-Gru-direction-ignored and refuses it on sequences (QNNEMU-Gru-direction).

Data types: real inputs (float32, float16 -- computed in float64 and rounded back --, or
quantized fixed point, dequantized by the plan); the outputs take x's type.
"""
from __future__ import annotations

import numpy as np

from ..errors import OpUnsupportedError
from ..headers import Q
from . import _fast, _fast_misc
from .base import Op, OpCheckError, ParamSpec, TensorSpec, check_rank, check_real, from_compute, same_spec, warn
from .common import optional_input, sequence_output, sigmoid, steps_first

FORWARD = Q.QNN_OP_GRU_DIRECTION_FORWARD
REVERSE = Q.QNN_OP_GRU_DIRECTION_REVERSE

X, W_XZ, W_XR, W_XN, W_HZ, W_HR, W_HN, B_XZ, B_XR, B_XN, B_HZ, B_HR, B_HN, H0, RESET = range(15)

_NAMES = {
    X: "x", W_XZ: "input-to-update weights", W_XR: "input-to-reset weights",
    W_XN: "input-to-new weights", W_HZ: "recurrent-to-update weights",
    W_HR: "recurrent-to-reset weights", W_HN: "recurrent-to-new weights",
    B_XZ: "input-to-update bias", B_XR: "input-to-reset bias", B_XN: "input-to-new bias",
    B_HZ: "recurrent-to-update bias", B_HR: "recurrent-to-reset bias",
    B_HN: "recurrent-to-new bias", H0: "initial h", RESET: "reset",
}


def _fail(rule: str, path: str, message: str) -> OpCheckError:
    return OpCheckError(f"QNNEMU-Gru-{rule}", path, message)


class Gru(Op):
    inputs = tuple(f"in[{i}]" for i in range(13)) + ("in[13]?", "in[14]?")
    outputs = ("out[0]", "out[1]")
    params = {
        "direction": ParamSpec("scalar", ("uint", "int"), default=FORWARD),
        # ONNX Runtime passes UINT_32 0/1; a BOOL_8 scalar is read the same way.
        "linear_before_reset": ParamSpec("scalar", ("uint", "int", "bool"), default=0),
        "time_major": ParamSpec("scalar", ("bool",), default=False),
    }

    # ---- checking -------------------------------------------------------------------------
    @classmethod
    def infer(cls, inputs: list[TensorSpec | None], params,
              declared_outputs: list[TensorSpec] | None = None) -> list[TensorSpec]:
        op = cls.op_type
        if optional_input(inputs, RESET) is not None:
            raise OpUnsupportedError(
                "QNNEMU-Gru-reset", f"inputTensors[{RESET}]",
                "the reset input (in[14]) is not supported (the vendor's backend crashes on it): "
                "qnnemu runs Gru statelessly from the initial h in[13]; leave it out or pass a "
                "NULL tensor")
        for i, spec in enumerate(inputs):
            if spec is not None:
                check_real(op, i, spec)
        x = inputs[X]
        check_rank(op, X, x, (2, 3))
        time_major = params["time_major"]
        if x.rank == 3:
            steps, b = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
        else:
            steps, b = 1, x.shape[0]
        n_in = x.shape[-1]
        w = inputs[W_XZ]
        h = w.shape[0] if w.rank >= 1 else 0

        def want(i, shape):
            spec = optional_input(inputs, i)
            if spec is not None and tuple(spec.shape) != tuple(shape):
                rule = {2: "weight-shape", 1: "bias-shape"}[len(shape)]
                raise _fail(rule, f"inputTensors[{i}].dimensions",
                            f"the {_NAMES[i]} (in[{i}]) must be {list(shape)} (hidden size {h}, "
                            f"input size {n_in}); got {list(spec.shape)}")
        for i in (W_XZ, W_XR, W_XN):
            want(i, (h, n_in))
        for i in (W_HZ, W_HR, W_HN):
            want(i, (h, h))
        for i in (B_XZ, B_XR, B_XN, B_HZ, B_HR, B_HN):
            want(i, (h,))
        h0 = optional_input(inputs, H0)
        if h0 is not None and tuple(h0.shape) not in ((b, h), (1, b, h)):
            raise _fail("state-shape", f"inputTensors[{H0}].dimensions",
                        f"the initial h (in[{H0}]) must be [{b}, {h}] or [1, {b}, {h}] (batch {b}, "
                        f"hidden size {h}); got {list(h0.shape)}")
        direction = params["direction"]
        if direction not in (FORWARD, REVERSE):
            if steps != 1:
                raise _fail("direction", "params[direction]",
                            f"direction must be {FORWARD} (FORWARD) or {REVERSE} (REVERSE); got "
                            f"{direction}")
            warn("QNNEMU-Gru-direction-ignored", "params[direction]",
                 f"direction {direction} is neither FORWARD ({FORWARD}) nor REVERSE ({REVERSE}); "
                 f"ignored, as the HTP does: one step runs the same either way")
        if int(params["linear_before_reset"]) not in (0, 1):
            raise _fail("linear-before-reset", "params[linear_before_reset]",
                        f"linear_before_reset must be 0 or 1; got {params['linear_before_reset']}")
        last = (1, b, h) if x.rank == 3 else (b, h)
        if declared_outputs is not None and len(declared_outputs) > 1 and \
                tuple(declared_outputs[1].shape) in ((b, h), (1, b, h)):
            last = tuple(declared_outputs[1].shape)
        return [same_spec(x, shape=tuple(x.shape[:-1]) + (h,)), same_spec(x, shape=last)]

    # ---- running --------------------------------------------------------------------------
    def _run(self, *arrays, direction, linear_before_reset, time_major):
        a = [None if v is None else np.asarray(v, dtype=np.float64)
             for v in (optional_input(arrays, i) for i in range(15))]
        x = a[X]
        dtype = arrays[X].dtype
        xs, seq_axis = steps_first(x, time_major)       # [T, B, I]
        steps, b = xs.shape[0], xs.shape[1]
        h_size = a[W_XZ].shape[0]
        last_shape = self.output_specs[1].shape if len(self.output_specs) > 1 else \
            ((1, b, h_size) if x.ndim == 3 else (b, h_size))
        if dtype == np.float32 and _fast.enabled() and all(
                v is None or v.dtype == np.float32 for v in (optional_input(arrays, i) for i in range(14))):
            # the C recurrence the C engine runs too (ops/_fast_misc.py)
            raw = [optional_input(arrays, i) for i in range(15)]
            out, hid = _fast_misc.gru(steps_first(raw[X], time_major)[0], raw, direction == REVERSE,
                                      bool(linear_before_reset))
            return (from_compute(sequence_output(out, seq_axis), dtype),
                    from_compute(hid.reshape(last_shape), dtype))
        # Input contributions of every step at once, in gate order z, r, n.
        wx = np.concatenate([a[W_XZ], a[W_XR], a[W_XN]], axis=0).T      # [I, 3H]
        bx = np.concatenate([a[B_XZ], a[B_XR], a[B_XN]])
        xg = (xs.reshape(steps * b, -1) @ wx + bx).reshape(steps, b, 3 * h_size)
        whzr = np.concatenate([a[W_HZ], a[W_HR]], axis=0).T              # [H, 2H]
        bhzr = np.concatenate([a[B_HZ], a[B_HR]])
        whn_t, bhn = a[W_HN].T, a[B_HN]
        hid = a[H0].reshape(b, h_size) if a[H0] is not None else np.zeros((b, h_size))
        out = np.empty((steps, b, h_size))
        order = range(steps - 1, -1, -1) if direction == REVERSE else range(steps)
        for t in order:
            zr = sigmoid(xg[t, :, :2 * h_size] + hid @ whzr + bhzr)
            z, r = zr[:, :h_size], zr[:, h_size:]
            if linear_before_reset:
                n = np.tanh(xg[t, :, 2 * h_size:] + r * (hid @ whn_t + bhn))
            else:
                n = np.tanh(xg[t, :, 2 * h_size:] + (r * hid) @ whn_t + bhn)
            hid = (1.0 - z) * n + z * hid
            out[t] = hid
        seq = sequence_output(out, seq_axis)
        return (from_compute(seq, dtype),
                from_compute(hid.reshape(last_shape), dtype))


__all__ = ["Gru"]
