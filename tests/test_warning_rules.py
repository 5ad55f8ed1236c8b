"""Warning rules (qnnemu/rules.py, docs/validation.md): what qnnemu tolerates as the vendor's
HTP backend does, through the C ABI.

One case per registered warning rule: the call sequence succeeds, the rule reaches the app's
QnnLog callback at QNN_LOG_LEVEL_WARN naming the function and the parameter path, no error rule
fires (``abi.LogRecorder.assert_warning``), and the tolerated value has the documented effect.
``test_every_warning_rule_has_a_case`` keeps the table in step with ``WARNING_RULES``.  Every
case names its SoC (the default device is not assumed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import abi
from abi import NULL, vp
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import settings
from qnnemu.rules import WARNING_RULES

pytestmark = pytest.mark.usefixtures("qnn_abi")
OK = Q.QNN_SUCCESS
MIB = 1 << 20
SM8550, SM8650, SM8750, SM8850 = (Q.QNN_SOC_MODEL_SM8550, Q.QNN_SOC_MODEL_SM8650, Q.QNN_SOC_MODEL_SM8750,
                                  Q.QNN_SOC_MODEL_SM8850)
OPT = "QNN_HTP_GRAPH_OPTIMIZATION_TYPE_"
P0 = "config[0].customConfig"


@dataclass
class Case:
    rule: str
    soc: int
    func: str
    path: str
    trigger: Callable[[abi.Session], int]      # returns the code of the call that warns
    effect: Callable[[abi.Session], None] | None = None   # checks the tolerated value's effect


CASES: list = []


def case(rule: str, soc: int, func: str, path: str, effect=None, id=None):
    def deco(fn):
        CASES.append(pytest.param(Case(rule, soc, func, path, fn, effect), id=id or rule))
        return fn
    return deco


def graph_of(s: abi.Session, name: str = "g"):
    ctx = HANDLES.lookup(s.ctx)
    return HANDLES.lookup(ctx.graphs[name])


def settings_of(s: abi.Session, name: str = "g") -> settings.GraphSettings:
    return settings.graph_settings(graph_of(s, name))


def opt(type_name: str, value: float) -> dict:
    return {"opt": (getattr(Q, OPT + type_name), value)}


def graph_with(s: abi.Session, option: str, **fields) -> int:
    """graphCreate('g') with one HTP custom config; a Relu then finalizes and executes, so the
    tolerated value is also prepared with."""
    codes = s.relu_graph(s.graph_custom(getattr(Q, f"QNN_HTP_GRAPH_CONFIG_OPTION_{option}"), **fields))
    assert codes[1:] == (OK,) * (len(codes) - 1), f"{option}: the graph is built and executed: {codes}"
    return codes[0]


# ---- graph configs ----------------------------------------------------------------------------
case("QNNEMU-graph-hvx-threads-clipped", SM8550, "graphCreate", f"{P0}.numHvxThreads",
     effect=lambda s: _expect(settings_of(s).hvx_threads == 4, "SM8550 runs with its 4 HVX threads"))(
    lambda s: graph_with(s, "NUM_HVX_THREADS", numHvxThreads=8))


@case("QNNEMU-graph-hvx-threads-clipped", SM8850, "graphCreate", f"{P0}.numHvxThreads", id="hvx-threads-zero-v81",
      effect=lambda s: _expect(settings_of(s).hvx_threads == 8, "0 means the SoC's maximum: 8 on SM8850"))
def _(s):
    return graph_with(s, "NUM_HVX_THREADS", numHvxThreads=0)


case("QNNEMU-graph-dlbc-soc-ignored", SM8550, "graphCreate", f"{P0}.optimizationOption.floatValue",
     effect=lambda s: _expect(not settings_of(s).dlbc, "no DLBC on SM8550: recorded without effect"))(
    lambda s: graph_with(s, "OPTIMIZATION", **opt("ENABLE_DLBC", 1.0)))
case("QNNEMU-graph-slc-soc-ignored", SM8550, "graphCreate", f"{P0}.optimizationOption.floatValue",
     effect=lambda s: _expect(not settings_of(s).slc_allocator, "no SLC allocator on SM8550"))(
    lambda s: graph_with(s, "OPTIMIZATION", **opt("ENABLE_SLC_ALLOCATOR", 1.0)))
case("QNNEMU-graph-optimization-flag-default", SM8550, "graphCreate", f"{P0}.optimizationOption.floatValue",
     effect=lambda s: _expect(settings_of(s).optimization_level == 2, "level 2 (the default) is used"))(
    lambda s: graph_with(s, "OPTIMIZATION", **opt("FINALIZE_OPTIMIZATION_FLAG", 4.0)))
case("QNNEMU-graph-optimization-value-coerced", SM8650, "graphCreate", f"{P0}.optimizationOption.floatValue",
     effect=lambda s: _expect(settings_of(s).dlbc, "-1.0 truncates to -1: DLBC on (the vendor records htpDlbc 1)"))(
    lambda s: graph_with(s, "OPTIMIZATION", **opt("ENABLE_DLBC", -1.0)))
case("QNNEMU-graph-schedule-threshold-ignored", SM8550, "graphCreate", f"{P0}.optimizationOption.floatValue",
     effect=lambda s: _expect(settings_of(s).schedule_threshold is None, "no threshold recorded"))(
    lambda s: graph_with(s, "OPTIMIZATION", **opt("SCHEDULE_THRESHOLD", -1.0)))
case("QNNEMU-graph-precision-ignored", SM8550, "graphCreate", f"{P0}.precision",
     effect=lambda s: _expect(not settings_of(s).precision_fp16, "FLOAT32 (the default) is used"))(
    lambda s: graph_with(s, "PRECISION", precision=7))
case("QNNEMU-graph-vtcm-clipped", SM8550, "graphCreate", f"{P0}.vtcmSizeInMB",
     effect=lambda s: _expect(settings_of(s).vtcm_bytes == 8 * MIB, "the SoC's 8 MiB is the budget"))(
    lambda s: graph_with(s, "VTCM_SIZE_IN_MB", vtcmSizeInMB=9))
case("QNNEMU-graph-vtcm-bytes-adjusted", SM8550, "graphCreate", f"{P0}.vtcmSizeInBytes",
     effect=lambda s: _expect(settings_of(s).vtcm_bytes == 64 * 1024, "1000 bytes round up to 64 KiB"))(
    lambda s: graph_with(s, "VTCM_SIZE_IN_BYTES", vtcmSizeInBytes=1000))
case("QNNEMU-graph-vtcm-max-default", None, "graphCreate", f"{P0}.vtcmSizeInMB",
     effect=lambda s: _expect(settings_of(s).vtcm_source == "max", "MAX: the device's whole VTCM"))(
    lambda s: graph_with(s, "VTCM_SIZE_IN_MB", vtcmSizeInMB=Q.QNN_HTP_GRAPH_CONFIG_OPTION_MAX))
case("QNNEMU-graph-num-cores-clipped", SM8550, "graphCreate", f"{P0}.numCores",
     effect=lambda s: _expect(settings_of(s).num_cores == 1, "one core"))(
    lambda s: graph_with(s, "NUM_CORES", numCores=0))


@case("QNNEMU-graph-config-option-ignored", SM8550, "graphCreate", f"{P0}.option",
      effect=lambda s: _expect(not any("21" in k for k in graph_of(s).configs.get("htp", {})), "not recorded"))
def _(s):
    codes = s.relu_graph(s.graph_custom(21))   # a value QnnHtpGraph_ConfigOption_t does not define
    assert codes[1:] == (OK,) * (len(codes) - 1), f"the graph is built and executed: {codes}"
    return codes[0]


@case("QNNEMU-priority-level-mapped", SM8550, "graphCreate", "config[0].priority",
      effect=lambda s: _expect(graph_of(s).thread_priorities == (0xBB, 0xBC), "HIGH_PLUS runs with HIGH's row"))
def _(s):
    codes = s.relu_graph(s.graph_plain(Q.QNN_GRAPH_CONFIG_OPTION_PRIORITY, priority=Q.QNN_PRIORITY_HIGH_PLUS))
    assert codes[1:] == (OK,) * (len(codes) - 1), f"the graph is built and executed: {codes}"
    return codes[0]


@case("QNNEMU-context-config-option-ignored", SM8550, "contextCreate", f"{P0}.option")
def _(s):
    code, ctx = s.context(s.context_custom(26))   # a value QnnHtpContext_ConfigOption_t does not define
    if code == OK:
        assert s.relu_graph(ctx=ctx)[-1] == OK, "the context works"
    return code


# ---- tensors -----------------------------------------------------------------------------
@case("QNNEMU-tensor-static-size-larger", SM8550, "tensorCreateGraphTensor", "tensor.v2.clientBuf.dataSize")
def _(s):
    code, g = s.graph("g")
    w = np.arange(6, dtype=np.float32)
    t = abi.tensor("w", (2, 3), type_=Q.QNN_TENSOR_TYPE_STATIC, data=np.concatenate([w, w]))
    code = s.tensor(g, t)
    assert code != OK or np.array_equal(graph_of(s).tensors[t.id].data, w.reshape(2, 3)), "the first bytes"
    return code


# ---- index ops (graphAddNode / graphExecute) ----------------------------------------------------
X = np.arange(1, 13, dtype=np.float32).reshape(3, 4)


def index_graph(s: abi.Session, op: str, ind: np.ndarray, params: dict, out_shape, upd=None,
                static: bool = False) -> tuple[tuple[int, ...], np.ndarray]:
    """x [3, 4] float32, indices (STATIC or APP_WRITE int32), optional updates -> op -> y; the
    codes of graphCreate .. graphExecute and y."""
    code, g = s.graph("g")
    x = abi.tensor("x", X.shape)
    i = (abi.tensor("i", ind.shape, Q.QNN_DATATYPE_INT_32, Q.QNN_TENSOR_TYPE_STATIC, data=ind) if static
         else abi.tensor("i", ind.shape, Q.QNN_DATATYPE_INT_32))
    y = abi.tensor("y", out_shape, type_=Q.QNN_TENSOR_TYPE_APP_READ)
    ins, feeds = [x, i], [(x, X)] + ([] if static else [(i, ind)])
    if upd is not None:
        u = abi.tensor("u", upd.shape)
        ins.append(u)
        feeds.append((u, upd))
    ps = [abi.scalar_param(k, Q.QNN_DATATYPE_INT_32, "int32Value", v) for k, v in params.items()]
    codes = [code] + [s.tensor(g, t) for t in (*ins, y)]
    out = np.zeros(out_shape, np.float32)
    for step in (lambda: s.node(g, abi.op_config("n", op, ins, [y], ps)), lambda: s.finalize(g),
                 lambda: s.execute(g, feeds, [(y, out)])):
        if any(codes):
            break
        codes.append(step())
    return tuple(codes), out


def _index_case(op, ind, params, out_shape, upd=None, static=False, want=None):
    def trigger(s):
        codes, out = index_graph(s, op, ind, params, out_shape, upd, static)
        assert not any(codes[:-1]), f"{op}: built and finalized: {codes}"
        if want is not None and not codes[-1]:
            # The index semantics are the point; SM8550 runs float32 graphs in float16 math, whose
            # output conversion moves each value by up to one float32 ulp (docs/numerics.md).
            assert np.allclose(out, want, rtol=1e-6, atol=0), \
                f"{op}: computed {out.tolist()}, the vendor gives {want.tolist()}"
        return codes[-1]
    return trigger


case("QNNEMU-index-static-out-of-range", SM8550, "graphAddNode", "GatherElements inputTensors[1]")(
    _index_case("GatherElements", np.array([[-1, 0, 1, -3]] * 3, np.int32), {"axis": 0}, (3, 4), static=True,
                want=np.array([[0, 2, 7, 0]] * 3, np.float32)))
case("QNNEMU-index-negative-wrapped", SM8550, "graphExecute", "Gather inputTensors[1]")(
    _index_case("Gather", np.array([-1, -4, 1], np.int32), {"axis": 1}, (3, 3),
                want=X[:, [3, 0, 1]]))
case("QNNEMU-index-invalid-zeroed", SM8550, "graphExecute", "GatherElements inputTensors[1]")(
    _index_case("GatherElements", np.array([[3, 0, 1, -4]] * 3, np.int32), {"axis": 0}, (3, 4),
                want=np.array([[0, 2, 7, 0]] * 3, np.float32)))
case("QNNEMU-index-invalid-skipped", SM8550, "graphExecute", "ScatterElements inputTensors[1]")(
    _index_case("ScatterElements", np.array([[3, -4, 1, 0]], np.int32), {"axis": 0}, (3, 4),
                upd=np.full((1, 4), 100, np.float32),
                want=np.where(np.isin(np.arange(12).reshape(3, 4), [3, 6]), 100, X).astype(np.float32)))


def _expect(cond: bool, what: str) -> None:
    assert cond, what


# ------------------------------------------------------------------------------- the contract
@pytest.mark.parametrize("c", CASES)
def test_warning_rule(c: Case):
    s = abi.Session(soc=c.soc)
    try:
        code = c.trigger(s)
        s.rec.assert_warning(code, c.rule, c.func, c.path)
        if c.effect is not None:
            c.effect(s)
    finally:
        s.close()


def test_every_warning_rule_has_a_case():
    covered = {p.values[0].rule for p in CASES}
    assert covered == set(WARNING_RULES), \
        f"warning rules without a case: {sorted(set(WARNING_RULES) - covered)}; cases of unregistered rules: " \
        f"{sorted(covered - set(WARNING_RULES))}"


def test_warn_refuses_an_unregistered_rule():
    from qnnemu import rules
    with pytest.raises(KeyError):
        rules.warn("QNNEMU-no-such-warning", "graphCreate", "config[0]", "never logged")
