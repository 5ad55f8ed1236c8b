"""Op parameters as the vendor's HTP backend takes them (qnnemu/ops/base.py ``parse_params``,
docs/validation.md "Op parameters").

- every op of qnnemu defines exactly the parameters QnnOpDef.h names for it, so a name
  graphAddNode ignores (QNNEMU-op-param-unknown-ignored) is one no QNN op definition has --
  never one qnnemu forgot to implement;
- the graphAddNode reading (lenient) and the backendValidateOpConfig one (strict), parameter by
  parameter: value, warning rule, refusal;
- property: whatever the strict reading takes, the lenient one takes unchanged and silently.

The C-ABI contracts of these rules: tests/test_warning_rules.py (warnings) and
tests/test_negative.py (errors); the vendor comparison: tests/test_acceptance_vendor.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from qnnemu import ops
from qnnemu.errors import OpCheckError
from qnnemu.headers import Q, constants
from qnnemu.ops.base import SCALAR_PARAM_TYPES, Param, type_category

F32, F64, U32, I32, U8, I64, B8 = (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_64, Q.QNN_DATATYPE_UINT_32,
                                   Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_8, Q.QNN_DATATYPE_INT_64,
                                   Q.QNN_DATATYPE_BOOL_8)


def qnn_op_params() -> dict[str, set[str]]:
    """Op type -> its parameter names, from QnnOpDef.h's QNN_OP_<OP> / QNN_OP_<OP>_PARAM_<P>."""
    c = constants()
    op_macros = {k: v for k, v in c.items() if k.startswith("QNN_OP_") and "_PARAM_" not in k
                 and isinstance(v, str)}
    out: dict[str, set[str]] = {v: set() for v in op_macros.values()}
    for k, v in c.items():
        if k.startswith("QNN_OP_") and "_PARAM_" in k and isinstance(v, str):
            owner = max((m for m in op_macros if k.startswith(m + "_PARAM_")), key=len, default=None)
            if owner is not None:
                out[op_macros[owner]].add(v)
    return out


def test_every_op_defines_exactly_the_qnn_op_def_parameters():
    defined = qnn_op_params()
    assert len(defined) > 100, f"QnnOpDef.h's op types were read ({len(defined)})"
    differ = {name: (sorted(set(cls.params) - defined[name]), sorted(defined[name] - set(cls.params)))
              for name, cls in ops.REGISTRY.items() if name in defined and set(cls.params) != defined[name]}
    assert not differ, f"ops whose parameters differ from QnnOpDef.h (qnnemu-only, QnnOpDef-only): {differ}"


def parse(op: str, params: dict[str, Param], strict: bool = False):
    """(values, warning rule ids) of ``op``'s parameter reading."""
    cls = ops.REGISTRY[op]
    from qnnemu.ops import base
    token = base._WARNINGS.set([])
    try:
        values = cls.parse_params(params, strict)
        return values, [w.rule for w in base._WARNINGS.get()]
    finally:
        base._WARNINGS.reset(token)


def scalar(name, dtype, value):
    return Param(name, "scalar", dtype, value)


def tensor(name, array, dtype=None):
    a = np.asarray(array)
    return Param(name, "tensor", dtype if dtype is not None else {np.dtype(np.float32): F32, np.dtype(np.uint32): U32,
                                                                    np.dtype(np.int32): I32}[a.dtype], a)


COERCED, AS_TENSOR, AS_SCALAR, RESHAPED, UNKNOWN = (
    "QNNEMU-op-param-type-coerced", "QNNEMU-op-param-scalar-as-tensor", "QNNEMU-op-param-tensor-as-scalar",
    "QNNEMU-op-param-shape-reshaped", "QNNEMU-op-param-unknown-ignored")

# op, given params, the parameter read, its value at graphAddNode, the warning rules
TAKEN = [
    ("ReluMinMax", {"min_value": scalar("min_value", U32, 2), "max_value": scalar("max_value", F32, 6.0)},
     "min_value", 2.0, [COERCED]),
    ("ReluMinMax", {"min_value": scalar("min_value", Q.QNN_DATATYPE_UFIXED_POINT_8, 1),
                    "max_value": scalar("max_value", F32, 6.0)}, "min_value", 1.0, [COERCED]),
    ("Softmax", {"axis": scalar("axis", I32, 1)}, "axis", 1, [COERCED]),
    ("Softmax", {"axis": scalar("axis", F32, 1.0)}, "axis", 1, [COERCED]),
    ("Softmax", {"axis": scalar("axis", B8, True)}, "axis", 1, [COERCED]),
    ("MatMul", {"transpose_in1": scalar("transpose_in1", F32, 1.0)}, "transpose_in1", True, [COERCED]),
    ("MatMul", {"transpose_in1": scalar("transpose_in1", U8, 0)}, "transpose_in1", False, [COERCED]),
    ("MatMul", {"transpose_in1": scalar("transpose_in1", B8, True)}, "transpose_in1", True, []),
    ("Gather", {"axis": scalar("axis", U32, 1)}, "axis", 1, []),
    ("Relu", {"bogus": scalar("bogus", I64, 1)}, None, None, [UNKNOWN]),
    ("ReduceMean", {"axes": scalar("axes", U32, 1)}, "axes", [1], [AS_TENSOR]),
    ("ReduceMean", {"axes": scalar("axes", I32, 0)}, "axes", [0], [AS_TENSOR, COERCED]),
    ("Softmax", {"beta": tensor("beta", np.array([2.0, 3.0], np.float32))}, "beta", 2.0, [AS_SCALAR]),
    ("Softmax", {"beta": tensor("beta", np.array(2.0, np.float32))}, "beta", 2.0, [AS_SCALAR]),
    ("Gather", {"axis": tensor("axis", [1], U32)}, "axis", 1, [AS_SCALAR]),
    ("Transpose", {"perm": tensor("perm", np.array([[1, 0]], np.uint32))}, "perm", [1, 0], [RESHAPED]),
    ("Transpose", {"perm": tensor("perm", np.array([1, 0], np.int32))}, "perm", [1, 0], [COERCED]),
    ("Pad", {"pad_amount": tensor("pad_amount", np.array([1, 0, 2, 1], np.uint32))}, "pad_amount",
     [[1, 0], [2, 1]], [RESHAPED]),
    ("StridedSlice", {"ranges": tensor("ranges", np.arange(6, dtype=np.int32).reshape(3, 2))}, "ranges",
     [[0, 1, 2], [3, 4, 5]], [RESHAPED]),
]


@pytest.mark.parametrize("op,params,name,want,warnings", TAKEN, ids=[f"{t[0]}-{i}" for i, t in enumerate(TAKEN)])
def test_graph_add_node_reading(op, params, name, want, warnings):
    """graphAddNode reads the parameter as the vendor's does, with the warning rules; the strict
    reading of backendValidateOpConfig refuses every tolerance (the vendor's refuses them all)
    and takes the natively typed ones alike."""
    values, fired = parse(op, params)
    assert fired == warnings, f"{op}: warning rules {fired}, expected {warnings}"
    if name is not None:
        got = values[name]
        if isinstance(got, np.ndarray):
            assert got.tolist() == want, f"{op}.{name}: read as {got.tolist()}, expected {want}"
        else:
            assert got == want and type(got) is type(want), f"{op}.{name}: read as {got!r}, expected {want!r}"
    if warnings:
        with pytest.raises(OpCheckError) as info:
            parse(op, params, strict=True)
        assert info.value.rule.startswith("QNNEMU-op-param-"), f"{op}: refused by its parameter rule ({info.value})"
    else:
        assert parse(op, params, strict=True) == (values, []), f"{op}: the strict reading takes it alike"


REFUSED = [
    ("MatMul", {"transpose_in1": scalar("transpose_in1", U32, 2)}, "QNNEMU-op-param-value"),
    ("MatMul", {"transpose_in1": scalar("transpose_in1", F32, 0.5)}, "QNNEMU-op-param-value"),
    ("Softmax", {"axis": scalar("axis", I32, -1)}, "QNNEMU-op-param-value"),
    ("Softmax", {"axis": scalar("axis", F32, float("nan"))}, "QNNEMU-op-param-value"),
    ("Softmax", {"beta": scalar("beta", B8, True)}, "QNNEMU-op-param-type"),
    ("Softmax", {"beta": scalar("beta", I64, 2)}, "QNNEMU-op-param-scalar-type"),
    ("Softmax", {"beta": scalar("beta", 0x9999, None)}, "QNNEMU-op-param-scalar-type"),
    ("Softmax", {"beta": tensor("beta", np.zeros((0,), np.float32))}, "QNNEMU-op-param-shape"),
    ("Pad", {"pad_amount": tensor("pad_amount", np.array([1, 1, 1], np.uint32))}, "QNNEMU-op-param-shape"),
    ("Transpose", {"perm": tensor("perm", np.array([-1, 0], np.int32))}, "QNNEMU-op-param-value"),
    ("ReluMinMax", {"min_value": scalar("min_value", F32, 0.0)}, "QNNEMU-op-param-missing"),
]


@pytest.mark.parametrize("op,params,rule", REFUSED, ids=[f"{r[0]}-{r[2][15:]}-{i}" for i, r in enumerate(REFUSED)])
def test_graph_add_node_refuses_what_a_parameter_cannot_hold(op, params, rule):
    with pytest.raises(OpCheckError) as info:
        parse(op, params)
    assert info.value.rule == rule, f"{op}: refused with {info.value.rule}, expected {rule} ({info.value})"
    name = next(iter(params)) if rule != "QNNEMU-op-param-missing" else "max_value"
    assert info.value.path.startswith(f"params[{name}]"), f"{op}: the path names the parameter: {info.value.path}"


def test_native_wide_scalars_stay_taken():
    """FLOAT_64 for a float and INT_64 for an integer parameter: qnnemu's own clients and tools
    emit them, so qnnemu keeps taking them (the vendor does not: docs/validation.md)."""
    values, fired = parse("Softmax", {"beta": scalar("beta", F64, 2.5)})
    assert values["beta"] == 2.5 and fired == [], "FLOAT_64 beta read natively"
    values, fired = parse("Gather", {"axis": scalar("axis", I64, 1)})
    assert values["axis"] == 1 and fired == [], "INT_64 axis read natively"


NUMBER_TYPES = sorted(t for t in SCALAR_PARAM_TYPES if type_category(t) in ("int", "uint", "float", "bool"))
SCALAR_PARAMS = [(op, name) for op, cls in sorted(ops.REGISTRY.items()) for name, spec in cls.params.items()
                 if spec.kind == "scalar" and set(spec.types) <= {"int", "uint", "float", "bool"}]


@given(data=st.data())
def test_what_the_strict_reading_takes_the_lenient_one_takes_unchanged(data):
    op, name = data.draw(st.sampled_from(SCALAR_PARAMS), label="parameter")
    dtype = data.draw(st.sampled_from(NUMBER_TYPES), label="dtype")
    cat = type_category(dtype)
    value = {"float": st.floats(-1e6, 1e6, allow_nan=False), "bool": st.booleans(),
             "uint": st.integers(0, 255), "int": st.integers(-128, 127)}[cat]
    param = scalar(name, dtype, data.draw(value, label="value"))
    cls = ops.REGISTRY[op]
    try:
        strict = cls.parse_params({name: param}, True)
    except OpCheckError as e:
        assert e.rule.startswith("QNNEMU-op-param-") or e.rule.startswith(f"QNNEMU-{op}-"), f"{op}: {e}"
        return
    lenient, fired = parse(op, {name: param})
    assert lenient[name] == strict[name] and type(lenient[name]) is type(strict[name]), \
        f"{op}.{name} = {param.value!r} ({dtype}): strict {strict[name]!r}, lenient {lenient[name]!r}"
    assert fired == [], f"{op}.{name}: a natively typed parameter raises no warning ({fired})"
