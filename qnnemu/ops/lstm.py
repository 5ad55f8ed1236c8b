"""Lstm (QnnOpDef.h QNN_OP_LSTM): the Android NN / TensorFlow Lite LSTM cell, run over one
step (2-D input) or a sequence (3-D input).

Inputs (num_units N, output_size P, input_size I, batch B; "?" = optional, absent ones are
NULL tensors -- ``None`` here -- or left off at the end):

====  ===========================  =======  ====  ===========================  ===========
in    tensor                       shape    in    tensor                       shape
====  ===========================  =======  ====  ===========================  ===========
0     x                            [B, I]   12?   input layer-norm weights     [N]
                                   or 3-D   13?   forget layer-norm weights    [N]
1     input-to-forget W_xf         [N, I]   14?   cell layer-norm weights      [N]
2     input-to-cell W_xc           [N, I]   15?   output layer-norm weights    [N]
3     input-to-output W_xo         [N, I]   16?   input-to-input W_xi          [N, I]
4     recurrent-to-forget W_hf     [N, P]   17?   recurrent-to-input W_hi      [N, P]
5     recurrent-to-cell W_hc       [N, P]   18?   cell-to-input W_ci           [N]
6     recurrent-to-output W_ho     [N, P]   19?   cell-to-forget W_cf          [N]
7     forget gate bias b_f         [N]      20?   cell-to-output W_co          [N]
8     cell bias b_c                [N]      21?   input gate bias b_i          [N]
9     output gate bias b_o         [N]      22?   projection W_proj            [P, N]
10?   initial h (default 0)        [B, P]   23?   projection bias b_proj       [P]
11?   initial c (default 0)        [B, N]   24?   reset                        --
====  ===========================  =======  ====  ===========================  ===========

A 3-D x is [T, B, I] with ``time_major`` and [B, T, I] without.  Per step, with
sigma = logistic and the gates in TFLite's order of evaluation::

    f = sigma(LN_f(W_xf x + W_hf h + W_cf * c) + b_f)
    i = sigma(LN_i(W_xi x + W_hi h + W_ci * c) + b_i)     or 1 - f without W_xi (CIFG)
    g = tanh(LN_c(W_xc x + W_hc h) + b_c)
    c = clip(f * c + i * g, cell_clip_threshold)          (0 = no clipping)
    o = sigma(LN_o(W_xo x + W_ho h + W_co * c) + b_o)     (peephole on the new c)
    m = o * tanh(c)
    h = clip(W_proj m + b_proj, output_clip_threshold)    with a projection, else h = m

LN_k(v) = (v - mean(v)) / sqrt(var(v) + 1e-8) * ln_weight_k over the N units (TFLite's
layer-norm LSTM); without layer-norm weights LN_k is the identity.  Peephole terms are absent
without W_c*.  ``direction`` REVERSE walks a 3-D sequence from the last step to the first;
the output at step t is still stored at t (as ONNX's reverse LSTM).

Outputs: out[0] h for every step ([B, P], or the 3-D layout of x), out[1] the last c [B, N],
out[2] the last h [B, P].  (ONNX Runtime's QNN EP splits ONNX LSTM into one 2-D Lstm node per
step and direction, or one 3-D time-major node per direction, with W/R/B/P sliced into the
gate tensors above.)

Not executed (OpUnsupportedError): the stateful ``reset`` input in[24], and the optional
outputs out[3..7] (per-gate quantization intermediates).  The ``*_qscale`` and
``hidden_state_*`` parameters describe the quantized intermediates of a fixed-point kernel;
in the real domain they do not change the result and are only validated.
"""
from __future__ import annotations

import numpy as np

from ..errors import OpUnsupportedError
from ..headers import Q
from . import _fast, _fast_misc
from .base import Op, OpCheckError, ParamSpec, TensorSpec, check_rank, check_real, from_compute, same_spec, to_compute
from .common import optional_input, sequence_output, sigmoid, steps_first

FORWARD = Q.QNN_OP_LSTM_DIRECTION_FORWARD
REVERSE = Q.QNN_OP_LSTM_DIRECTION_REVERSE
LN_EPSILON = 1e-8

X, W_XF, W_XC, W_XO, W_HF, W_HC, W_HO, B_F, B_C, B_O, H0, C0 = range(12)
LN_I, LN_F, LN_C, LN_O, W_XI, W_HI, W_CI, W_CF, W_CO, B_I, W_PROJ, B_PROJ, RESET = range(12, 25)

_NAMES = {
    X: "x", W_XF: "input-to-forget weights", W_XC: "input-to-cell weights",
    W_XO: "input-to-output weights", W_HF: "recurrent-to-forget weights",
    W_HC: "recurrent-to-cell weights", W_HO: "recurrent-to-output weights",
    B_F: "forget gate bias", B_C: "cell bias", B_O: "output gate bias", H0: "initial h",
    C0: "initial c", LN_I: "input layer-norm weights", LN_F: "forget layer-norm weights",
    LN_C: "cell layer-norm weights", LN_O: "output layer-norm weights",
    W_XI: "input-to-input weights", W_HI: "recurrent-to-input weights",
    W_CI: "cell-to-input weights", W_CF: "cell-to-forget weights",
    W_CO: "cell-to-output weights", B_I: "input gate bias", W_PROJ: "projection weights",
    B_PROJ: "projection bias", RESET: "reset",
}


def _layer_norm(v: np.ndarray, weight: np.ndarray) -> np.ndarray:
    mean = v.mean(axis=-1, keepdims=True)
    var = np.mean(np.square(v - mean), axis=-1, keepdims=True)
    return (v - mean) / np.sqrt(var + LN_EPSILON) * weight


def _fail(rule: str, idx: int, msg: str, what: str = "dimensions") -> OpCheckError:
    return OpCheckError(f"QNNEMU-Lstm-{rule}", f"inputTensors[{idx}].{what}", msg)


class Lstm(Op):
    inputs = tuple(f"in[{i}]" for i in range(10)) + tuple(f"in[{i}]?" for i in range(10, 25))
    outputs = ("out[0]", "out[1]", "out[2]")
    params = {
        "direction": ParamSpec("scalar", ("uint",), default=FORWARD),
        "cell_clip_threshold": ParamSpec("scalar", ("float",), default=0.0),
        "output_clip_threshold": ParamSpec("scalar", ("float",), default=0.0),
        "time_major": ParamSpec("scalar", ("bool",), default=False),
        "input_gate_qscale": ParamSpec("scalar", ("float",), default=0.0),
        "forget_gate_qscale": ParamSpec("scalar", ("float",), default=0.0),
        "cell_gate_qscale": ParamSpec("scalar", ("float",), default=0.0),
        "output_gate_qscale": ParamSpec("scalar", ("float",), default=0.0),
        # ONNX Runtime passes hidden_state_offset as FLOAT_32; other clients as an integer.
        "hidden_state_offset": ParamSpec("scalar", ("float", "int", "uint"), default=0),
        "hidden_state_qscale": ParamSpec("scalar", ("float",), default=0.0),
    }

    # ---- checking -------------------------------------------------------------------------
    @classmethod
    def infer(cls, inputs: list[TensorSpec | None], params,
              declared_outputs: list[TensorSpec] | None = None) -> list[TensorSpec]:
        op = cls.op_type
        for i in range(10):
            if inputs[i] is None:
                raise _fail("input-missing", i, f"the {_NAMES[i]} (in[{i}]) is mandatory and "
                            f"was given as a NULL tensor", "type")
        for i, spec in enumerate(inputs):
            if spec is not None and i != RESET:
                check_real(op, i, spec)
        x = inputs[X]
        check_rank(op, 0, x, (2, 3))
        if optional_input(inputs, RESET) is not None:
            raise OpUnsupportedError(
                "QNNEMU-Lstm-reset", f"inputTensors[{RESET}]",
                "the stateful reset input (in[24]) is not supported: qnnemu runs Lstm "
                "statelessly from the initial states in[10]/in[11]; pass a NULL tensor")
        b = x.shape[1] if x.rank == 3 and params["time_major"] else x.shape[0]
        n_in = x.shape[-1]
        n = inputs[W_XF].shape[0] if inputs[W_XF].rank == 2 else -1
        p = inputs[W_HF].shape[1] if inputs[W_HF].rank == 2 else -1

        def want(i, shape):
            spec = optional_input(inputs, i)
            if spec is None:
                return
            if tuple(spec.shape) != tuple(shape):
                rule = "weight-shape" if len(shape) == 2 else "vector-shape"
                if i in (H0, C0):
                    rule = "state-shape"
                raise _fail(rule, i, f"the {_NAMES[i]} (in[{i}]) must be "
                            f"{list(shape)} (num_units {n}, output_size {p}, input_size "
                            f"{n_in}, batch {b}); got {list(spec.shape)}")
        for i in (W_XF, W_XC, W_XO, W_XI):
            want(i, (n, n_in))
        for i in (W_HF, W_HC, W_HO, W_HI):
            want(i, (n, p))
        for i in (B_F, B_C, B_O, B_I, LN_I, LN_F, LN_C, LN_O, W_CI, W_CF, W_CO):
            want(i, (n,))
        want(W_PROJ, (p, n))
        want(B_PROJ, (p,))
        want(H0, (b, p))
        want(C0, (b, n))

        present = {i for i in range(len(inputs)) if inputs[i] is not None}
        cifg_set = {W_XI, W_HI, B_I}
        if present & cifg_set and not cifg_set <= present:
            missing = min(cifg_set - present)
            raise _fail("cifg", missing, f"in[16], in[17] and in[21] (input gate weights and "
                        f"bias) must be given together or all left out (CIFG); in[{missing}] "
                        f"({_NAMES[missing]}) is missing", "type")
        cifg = W_XI not in present
        if (W_CF in present) != (W_CO in present) or (W_CI in present and W_CF not in present):
            idx = W_CO if W_CF in present else W_CF
            raise _fail("peephole", idx, "peephole weights: in[19] and in[20] go together, "
                        f"and in[18] needs them; in[{idx}] ({_NAMES[idx]}) is missing", "type")
        if W_CF in present and not cifg and W_CI not in present:
            raise _fail("peephole", W_CI, "with peephole weights and an input gate, the "
                        "cell-to-input weights in[18] are required", "type")
        if cifg and W_CI in present:
            raise _fail("cifg", W_CI, "cell-to-input weights in[18] given without an input "
                        "gate (CIFG: in[16] is absent)", "type")
        ln = present & {LN_I, LN_F, LN_C, LN_O}
        if ln:
            need = {LN_F, LN_C, LN_O} | (set() if cifg else {LN_I})
            wrong = (need - ln) or (ln - need)
            if wrong:
                idx = min(wrong)
                raise _fail("layer-norm", idx, "layer-norm weights: in[13], in[14], in[15] "
                            "(and in[12] unless CIFG) go together; in[12] must be absent "
                            f"with CIFG; in[{idx}] ({_NAMES[idx]}) is "
                            f"{'present' if idx in ln else 'missing'}", "type")
        if W_PROJ not in present:
            if B_PROJ in present:
                raise _fail("projection", B_PROJ, "a projection bias (in[23]) needs the "
                            "projection weights (in[22])", "type")
            if p != n:
                raise _fail("projection", W_HF, f"without projection weights output_size "
                            f"must equal num_units: recurrent weights are [{n}, {p}]")
        direction = params["direction"]
        if direction not in (FORWARD, REVERSE):
            raise OpCheckError("QNNEMU-Lstm-direction", "params[direction]",
                               f"direction must be {FORWARD} (FORWARD) or {REVERSE} (REVERSE); "
                               f"got {direction}")
        for name in ("cell_clip_threshold", "output_clip_threshold"):
            if params[name] < 0 or not np.isfinite(params[name]):
                raise OpCheckError("QNNEMU-Lstm-clip", f"params[{name}]",
                                   f"{name} must be >= 0 (0 disables clipping); got "
                                   f"{params[name]}")
        if declared_outputs is not None and len(declared_outputs) > 3:
            raise OpUnsupportedError(
                "QNNEMU-Lstm-outputs", "numOfOutputs",
                f"only out[0..2] (h sequence, c, h) are supported; {len(declared_outputs)} "
                f"outputs were declared (the gate intermediates out[3..7] are not computed)")
        seq = tuple(x.shape[:-1]) + (p,)
        return [same_spec(x, shape=seq), same_spec(x, shape=(b, n)), same_spec(x, shape=(b, p))]

    # ---- running --------------------------------------------------------------------------
    def run(self, *arrays):
        """Like Op.run, with ``None`` for absent (NULL) optional inputs.

        The arrays come either one per input position (``None`` where absent) or, as the
        execution plan passes them, only the present ones; then ``None`` input specs mark the
        absent positions and the arrays are put back in place.
        """
        specs = self.input_specs
        present = [s is not None for s in specs]
        if specs and not all(present) and len(arrays) == sum(present) < len(specs):
            it = iter(arrays)
            arrays = tuple(next(it) if p else None for p in present)
        for i, (a, spec) in enumerate(zip(arrays, specs)):
            if a is None or spec is None:
                continue
            if tuple(a.shape) != tuple(spec.shape):
                raise OpCheckError("QNNEMU-op-run-shape", f"inputTensors[{i}]",
                                   f"array shape {list(a.shape)} != declared {list(spec.shape)}")
        return self._run(*arrays, **self.param_values)

    def _run(self, *arrays, direction, cell_clip_threshold, output_clip_threshold, time_major,
             **_quant_params):
        a = [to_compute(optional_input(arrays, i)) for i in range(25)]
        x = a[X]
        dtype = arrays[X].dtype
        ct = x.dtype if x.dtype in (np.float32, np.float64) else np.float32
        a = [None if v is None else np.asarray(v, dtype=ct) for v in a]
        x = a[X]
        xs, seq_axis = steps_first(x, time_major)       # [T, B, I]
        steps, b = xs.shape[0], xs.shape[1]
        n, p = a[W_XF].shape[0], a[W_HF].shape[1]
        if ct == np.float32 and a[LN_F] is None and a[LN_I] is None and _fast.enabled():
            # the C recurrence the C engine runs too (ops/_fast_misc.py)
            out, c, h = _fast_misc.lstm(xs, a, direction != FORWARD, cell_clip_threshold,
                                        output_clip_threshold)
            return (from_compute(sequence_output(out, seq_axis), dtype), from_compute(c, dtype),
                    from_compute(h, dtype))
        cifg = a[W_XI] is None
        ln = a[LN_F] is not None
        # Gate order in the packed weights: [i,] f, g (cell), o.
        wx = [a[W_XF], a[W_XC], a[W_XO]] if cifg else [a[W_XI], a[W_XF], a[W_XC], a[W_XO]]
        wh = [a[W_HF], a[W_HC], a[W_HO]] if cifg else [a[W_HI], a[W_HF], a[W_HC], a[W_HO]]
        bias = [a[B_F], a[B_C], a[B_O]] if cifg else [a[B_I], a[B_F], a[B_C], a[B_O]]
        ln_w = ([a[LN_F], a[LN_C], a[LN_O]] if cifg else [a[LN_I], a[LN_F], a[LN_C], a[LN_O]]
                ) if ln else None
        wx_t = np.concatenate(wx, axis=0).T        # [I, G*N]
        wh_t = np.concatenate(wh, axis=0).T        # [P, G*N]
        bias = np.concatenate(bias)
        # Input contributions of every step at once (biases folded in without layer norm).
        xg = xs.reshape(steps * b, -1) @ wx_t
        if not ln:
            xg += bias
        xg = xg.reshape(steps, b, -1)
        h = a[H0] if a[H0] is not None else np.zeros((b, p), ct)
        c = a[C0] if a[C0] is not None else np.zeros((b, n), ct)
        proj_t = a[W_PROJ].T if a[W_PROJ] is not None else None
        out = np.empty((steps, b, p), ct)
        order = range(steps) if direction == FORWARD else range(steps - 1, -1, -1)
        k = 0 if cifg else 1  # index of the forget gate block
        for t in order:
            gates = xg[t] + h @ wh_t
            blocks = [gates[:, j * n:(j + 1) * n] for j in range(gates.shape[1] // n)]
            f_pre, g_pre, o_pre = blocks[k], blocks[k + 1], blocks[k + 2]
            if a[W_CF] is not None:
                f_pre = f_pre + c * a[W_CF]
            if ln:
                f_pre = _layer_norm(f_pre, ln_w[k]) + bias[k * n:(k + 1) * n]
                g_pre = _layer_norm(g_pre, ln_w[k + 1]) + bias[(k + 1) * n:(k + 2) * n]
            f = sigmoid(f_pre)
            if cifg:
                i_gate = 1.0 - f
            else:
                i_pre = blocks[0]
                if a[W_CI] is not None:
                    i_pre = i_pre + c * a[W_CI]
                if ln:
                    i_pre = _layer_norm(i_pre, ln_w[0]) + bias[:n]
                i_gate = sigmoid(i_pre)
            c = f * c + i_gate * np.tanh(g_pre)
            if cell_clip_threshold > 0:
                c = np.clip(c, -cell_clip_threshold, cell_clip_threshold)
            if a[W_CO] is not None:
                o_pre = o_pre + c * a[W_CO]
            if ln:
                o_pre = _layer_norm(o_pre, ln_w[k + 2]) + bias[(k + 2) * n:(k + 3) * n]
            m = sigmoid(o_pre) * np.tanh(c)
            if proj_t is not None:
                h = m @ proj_t
                if a[B_PROJ] is not None:
                    h = h + a[B_PROJ]
                if output_clip_threshold > 0:
                    h = np.clip(h, -output_clip_threshold, output_clip_threshold)
            else:
                h = m
            out[t] = h
        seq = sequence_output(out, seq_axis)
        return (from_compute(seq, dtype), from_compute(c, dtype),
                from_compute(h, dtype))


__all__ = ["Lstm"]
