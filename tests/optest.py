"""Shared helpers of the op test modules (tests/test_ops*.py): QNN params and tensor specs
built from plain Python values, and the op check as the graph layer calls it."""
from __future__ import annotations

import numpy as np

from qnnemu import ops
from qnnemu.headers import Q
from qnnemu.ops import Param, TensorSpec

F32, U32, I32, BOOL = (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_UINT_32, Q.QNN_DATATYPE_INT_32,
                       Q.QNN_DATATYPE_BOOL_8)


def to_param(name, value) -> Param:
    """A Param from a Python value: bool -> BOOL_8; int -> UINT_32 (INT_32 when negative or an
    np.int32); float -> FLOAT_32; arrays -> tensors (FLOAT_32 for floats, INT_32 when int32 or
    negative, else UINT_32; empty -> UINT_32).  A Param passes through."""
    if isinstance(value, Param):
        return value
    if isinstance(value, (bool, np.bool_)):
        return Param(name, "scalar", BOOL, bool(value))
    if isinstance(value, np.int32):
        return Param(name, "scalar", I32, int(value))
    if isinstance(value, (int, np.integer)):
        return Param(name, "scalar", I32 if value < 0 else U32, int(value))
    if isinstance(value, float):
        return Param(name, "scalar", F32, value)
    arr = np.asarray(value)
    if arr.dtype.kind == "f" and arr.size:  # ([] is a float64 array to numpy: an empty UINT_32)
        return Param(name, "tensor", F32, arr.astype(np.float32))
    if arr.dtype == np.int32 or (arr.dtype.kind == "i" and (arr < 0).any()):
        return Param(name, "tensor", I32, arr.astype(np.int32))
    return Param(name, "tensor", U32, arr.astype(np.uint32))


def spec(shape, dtype=F32, quant=None, data=None) -> TensorSpec:
    return TensorSpec(tuple(shape), dtype, quant, data)


def check(op_type, specs, params=None, declared=None):
    """The op's check (validation and inference) on specs, with params from Python values."""
    cls = ops.get(op_type)
    assert cls is not None, f"op {op_type} is registered"
    ps = {k: to_param(k, v) for k, v in (params or {}).items()}
    return cls.check(specs, ps, declared_outputs=declared)


def expect_rule(op_type, specs, params, declared, rule, path):
    """The op's check fails with rule id ``QNNEMU-<op_type>-<rule>`` at ``path``, and the
    message names both; returns the error for further checks."""
    import pytest

    from qnnemu.errors import OpCheckError
    with pytest.raises(OpCheckError) as info:
        check(op_type, specs, params, declared)
    err = info.value
    want = f"QNNEMU-{op_type}-{rule}"
    assert err.rule == want, f"{op_type}: rule id {err.rule!r} == {want!r} ({err})"
    assert err.path == path, f"{op_type}: path {err.path!r} == {path!r} ({err})"
    assert want in str(err) and path in str(err), f"message names rule and path: {err}"
    return err


def assert_close(got, ref, what, rel=1e-5):
    """|got - ref| <= rel * (|ref| + max|ref|): float32 accuracy relative to the result scale
    (sums of products cancel, so per-element relative error alone is not meaningful)."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} == reference {ref.shape}"
    if ref.size == 0:
        return
    scale = float(np.max(np.abs(ref)))
    err = np.abs(got - ref)
    worst = float(np.max(err / (rel * (np.abs(ref) + scale) + 1e-30)))
    assert worst <= 1.0, f"{what}: max error {float(err.max()):.3g} within {rel} of scale " \
                         f"{scale:.3g} (ratio {worst:.3g})"


def run_checked(op_type, arrays, params=None, declared=None, specs=None):
    """check + run on numpy arrays (None = an absent optional input) with params from Python
    values; ``declared``: the output specs as a graph would declare them (default: none);
    ``specs``: input specs to use instead of ones made from the arrays (e.g. with static
    data).  Asserts the outputs have the inferred shapes; returns them as a tuple."""
    from qnnemu.core import dtypes
    cls = ops.get(op_type)
    assert cls is not None, f"op {op_type} is registered"
    ps = {k: to_param(k, v) for k, v in (params or {}).items()}
    if specs is None:
        specs = [None if a is None else TensorSpec(np.shape(a), dtypes.from_numpy(np.asarray(a).dtype))
                 for a in arrays]
    outs = cls.check(specs, ps, declared_outputs=declared)
    ys = cls(cls.parse_params(ps), specs, declared if declared is not None else outs).run(*arrays)
    for y, o in zip(ys, outs):
        assert tuple(np.shape(y)) == tuple(o.shape), \
            f"{op_type}: run() shape {np.shape(y)} equals the inferred shape {o.shape}"
    return ys


class ClientLog:
    """Captures what our backend logs through a ``qnnemu.client.Backend`` (QnnLog messages end
    up on the Python logger ``qnnemu.client``): ``records`` of (Python level, message)."""

    def __init__(self):
        import logging
        self.records: list[tuple[int, str]] = []
        outer = self

        class _Handler(logging.Handler):
            def emit(self, record):
                outer.records.append((record.levelno, record.getMessage()))
        self._handler = _Handler(level=logging.DEBUG)
        self._logger = logging.getLogger("qnnemu.client")

    def __enter__(self) -> ClientLog:
        import logging
        self._old_level = self._logger.level
        self._logger.setLevel(logging.DEBUG)
        self._logger.addHandler(self._handler)
        return self

    def __exit__(self, *exc) -> None:
        self._logger.removeHandler(self._handler)
        self._logger.setLevel(self._old_level)

    def rules(self) -> set[str]:
        import re
        return {r for _, m in self.records for r in re.findall(r"\[(QNNEMU-[A-Za-z0-9_-]+)\]", m)}

    def assert_error(self, rule: str, func: str, path: str) -> str:
        """An error rule's contract for a call that failed (its code is checked by the caller):
        exactly ``rule`` fired, logged at ERROR, naming the function and the parameter path."""
        return self._assert_rule(rule, func, path, "ERROR")

    def assert_warning(self, rule: str, func: str, path: str) -> str:
        """The warning-rule contract (LogRecorder.assert_rule's, for a call that succeeded):
        exactly ``rule`` fired, at WARNING level, naming the function and the parameter path."""
        return self._assert_rule(rule, func, path, "WARNING")

    def _assert_rule(self, rule: str, func: str, path: str, level_name: str) -> str:
        import logging
        msgs = [(lv, m) for lv, m in self.records if f"[{rule}]" in m]
        assert msgs, f"{rule}: no message with [{rule}] was logged; got {self.records}"
        assert self.rules() == {rule}, f"{rule}: exactly this rule must fire; logged {self.rules()}"
        level, msg = msgs[-1]
        want = getattr(logging, level_name)
        assert level == want, f"{rule}: logged at {level_name}, got level {level}: {msg!r}"
        assert func in msg, f"{rule}: the message names the function '{func}': {msg!r}"
        assert path in msg, f"{rule}: the message names the parameter path '{path}': {msg!r}"
        return msg
