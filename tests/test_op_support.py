"""The HTP's op support by arch and data type (qnnemu/htp/op_support.py, docs/op-support.md):
qnnemu refuses what the vendor's HTP refuses, measured by tools/probe_op_support.py into
qnnemu/htp/op_support.json.

- the data: every registered op is measured on every arch, the case templates resolve on
  qnnemu, the arch fallback;
- qnnemu against the data: the measured cases replayed on qnnemu (every case on v73, a sample on
  the other archs): qnnemu takes none of the configurations the vendor refused, and refuses none
  the vendor took (neither by an op-support rule nor by an op's own check);
- one negative test per rule id (code, rule, function, parameter path) through the C ABI, the
  escape hatch QNNEMU_OP_SUPPORT=all, the device whose arch decides;
- with onnxruntime-qnn installed: a sample of the cases re-measured on the vendor's library
  gives the recorded verdicts (skipped when the installed wheel is not the one measured).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import abi
import numpy as np
import pytest
from abi import vp
from vendor import vendor_env, vendor_library

from qnnemu.headers import Q

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))   # the probe and its case templates

import op_support_cases  # noqa: E402
import probe_op_support as probe  # noqa: E402

from qnnemu import ops  # noqa: E402
from qnnemu.htp import op_support  # noqa: E402

pytestmark = pytest.mark.usefixtures("qnn_abi")

SM8350, SM8550, SM8650 = (int(getattr(Q, f"QNN_SOC_MODEL_{n}")) for n in ("SM8350", "SM8550", "SM8650"))
F32, U32, U64 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_UINT_32, Q.QNN_DATATYPE_UINT_64
S16, S32 = Q.QNN_DATATYPE_SFIXED_POINT_16, Q.QNN_DATATYPE_SFIXED_POINT_32
I32 = Q.QNN_DATATYPE_INT_32
VALIDATION_FAILURE = Q.QNN_OP_PACKAGE_ERROR_VALIDATION_FAILURE


@pytest.fixture
def session(request):
    """An abi.Session on our library with a device of the SoC given by ``request.param``
    (default SM8550, v73): the newest device, so backendValidateOpConfig answers for it."""
    s = abi.Session(soc=getattr(request, "param", SM8550))
    yield s
    s.close()


def _t(name, dims, dtype=F32, type_=Q.QNN_TENSOR_TYPE_APP_WRITE, **kw):
    return abi.tensor(name, dims, dtype, type_, **kw)


def _out(name, dims, dtype=F32, **kw):
    return abi.tensor(name, dims, dtype, Q.QNN_TENSOR_TYPE_APP_READ, **kw)


def validate(s: abi.Session, op: abi.Struct) -> int:
    s.keep.append(op)
    return s.call("backendValidateOpConfig", vp(s.be), op)


def graph_node(s: abi.Session, inputs, outputs, op_type, params=(), name="n") -> tuple[int, int]:
    """graphCreate, the tensors, graphAddNode: (graph, graphAddNode's code)."""
    code, g = s.graph(name)
    assert code == Q.QNN_SUCCESS, f"setup: graphCreate returned {code}"
    for t in (*inputs, *outputs):
        assert s.tensor(g, t) == Q.QNN_SUCCESS, "setup: tensorCreateGraphTensor"
    return g, s.node(g, abi.op_config(name, op_type, inputs, outputs, params))


# ---- the data ---------------------------------------------------------------------------------------
def test_every_template_resolves_on_qnnemu():
    """Each op's configuration template (tools/op_support_cases.py) passes qnnemu's own check in
    float32 at every rank and variant: the probe measures real configurations."""
    assert probe.self_check() == 0, "tools/probe_op_support.py --self-check lists the failing templates"


def test_every_op_is_measured_on_every_arch():
    doc = op_support.data()
    archs = sorted(doc["archs"])
    assert [int(a) for a in archs] == list(probe.ARCHS), f"measured archs {archs}"
    assert doc["vendor"].get("build_id", "").startswith("v2."), f"vendor build recorded: {doc['vendor']}"
    for op in ops.REGISTRY:
        names = [e for e in doc["ops"] if e == op or e.startswith(op + "[")]
        assert names, f"{op}: no entry in op_support.json"
        for name in names:
            assert set(doc["ops"][name]) == set(archs), f"{name}: measured on {sorted(doc['ops'][name])}"
            for arch in archs:
                sup = op_support.support(name, int(arch))
                assert sup.accepted or sup.unknown_op or sup.validate, \
                    f"{name} v{arch}: neither taken configurations nor refusals (a template the probe never ran)"
    unknown = sorted(op for op in ops.REGISTRY if op_support.support(op, 73) is not None
                     and op_support.support(op, 73).unknown_op)
    assert unknown == ["Conv1d", "DepthWiseConv1d", "ElementWiseFmod", "ElementWiseSoftplus", "Erf", "Identity",
                       "Inverse", "MaskedSoftmax", "PoolMax3d", "ReduceProd", "ReduceSumSquare", "ThresholdedRelu",
                       "TransposeConv1d"], f"ops the HTP has no implementation of on v73: {unknown}"


def test_archs_without_data_use_the_nearest_measured_below():
    assert [op_support.data_arch(a) for a in (66, 68, 69, 70, 73, 74, 79, 81, 85)] == \
        [68, 68, 69, 69, 73, 73, 79, 81, 81], "v85 uses v81's data, archs between two measured the lower one's"


# ---- qnnemu against the data ------------------------------------------------------------------------
@pytest.mark.parametrize("arch,sample", [(73, None), (68, 1500), (69, 800), (75, 800), (79, 800), (81, 1500)])
def test_qnnemu_refuses_what_the_vendor_refused(arch, sample):
    """The measured cases (all of them on v73) replayed on qnnemu: none the vendor refused at
    validation or in its one-node graph is taken by qnnemu, except the few graphs validation takes
    whose failure the data cannot tell from their shapes (graphFinalize takes them: at most 0.5%);
    and qnnemu refuses none the vendor took, at validation or in the one-node graph (neither an
    op-support rule nor an op's own check: "an input the vendor accepts is never refused")."""
    n_cases = len(probe.sample_cases(sorted(ops.REGISTRY), sample, seed=arch))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("QNNEMU_OP_SUPPORT", None)
    # In a subprocess: the replay's devices must not become the newest device of this process.
    code = ("import json, sys; sys.path[:0] = [{tools!r}]; import probe_op_support as p; "
            "from qnnemu import ops; from qnnemu.htp import op_support; "
            "cases = p.sample_cases(sorted(ops.REGISTRY), {sample!r}, seed={arch}); "
            "print(json.dumps(p.check_ours({arch}, cases, op_support.data())))").format(
        tools=str(ROOT / "tools"), arch=arch, sample=sample)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"v{arch}: the replay failed: {proc.stderr[-2000:]}"
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["cases"] == n_cases and res["compared"] > n_cases // 2, \
        f"v{arch}: {res['cases']} cases replayed, {res['compared']} verdicts compared"
    taken = [(m["stage"], m["entry"], m["sig"], m["rank"]) for m in res["mismatches"] if m["ours"] and not m["lenient"]]
    assert not taken, f"v{arch}: qnnemu takes {len(taken)} configurations the vendor refused: {taken[:10]}"
    lenient = [m for m in res["mismatches"] if m["ours"] and m["lenient"]]
    assert all(m["stage"] == "graph" for m in lenient) and len(lenient) <= max(20, n_cases // 200), \
        f"v{arch}: graphFinalize takes {len(lenient)} configurations validation takes and the vendor's one-node " \
        "graph failed at one rank only (docs/op-support.md): " \
        f"{[(m['entry'], m['sig'], m['rank']) for m in lenient][:10]}"
    ours = [(m["stage"], m["entry"], m["sig"], m["rank"], m["why"]) for m in res["mismatches"]
            if not m["ours"] and "[QNNEMU-htp-" in (m.get("why") or "")]
    assert not ours, f"v{arch}: op-support rules refuse {len(ours)} configurations the vendor took: {ours[:10]}"
    refused = [(m["stage"], m["entry"], m["sig"], m["rank"], m["why"]) for m in res["mismatches"] if not m["ours"]]
    assert not refused, f"v{arch}: qnnemu's op checks refuse {len(refused)} configurations the vendor took: " \
                        f"{refused[:10]}"


# ---- the rules ---------------------------------------------------------------------------------------
def test_rule_htp_op_unsupported(session):
    """Erf: the HTP has no implementation (the vendor: "no validator"), on any arch."""
    op = abi.op_config("n", "Erf", [_t("x", (2, 3))], [_out("y", (2, 3))])
    session.rec.assert_rule(validate(session, op), VALIDATION_FAILURE, "QNNEMU-htp-op-unsupported",
                            "backendValidateOpConfig", "opConfig.v1.typeName")


def test_rule_htp_op_dtype(session):
    """UINT_32 ElementWiseAdd: the HTP lists float32/float16, 8/16-bit fixed point and INT_32
    inputs; the message says so."""
    op = abi.op_config("n", "ElementWiseAdd", [_t("a", (2, 3), U32), _t("b", (2, 3), U32)], [_out("y", (2, 3), U32)])
    msg = session.rec.assert_rule(validate(session, op), VALIDATION_FAILURE, "QNNEMU-htp-op-dtype",
                                  "backendValidateOpConfig", "opConfig.v1.inputTensors")
    assert "UINT_32,UINT_32->UINT_32" in msg and "takes float32/float16, 8/16-bit fixed point, INT_32" in msg \
        and "v73" in msg, f"the message names the types, the arch and what the HTP takes: {msg}"


def test_rule_htp_op_rank(session):
    """Reshape to rank 6 (onnx's test_unsqueeze_three_axes): the HTP takes ranks 1..5."""
    op = abi.op_config("n", "Reshape", [_t("x", (48,))], [_out("y", (2, 2, 2, 2, 3, 1))])
    msg = session.rec.assert_rule(validate(session, op), VALIDATION_FAILURE, "QNNEMU-htp-op-rank",
                                  "backendValidateOpConfig", "opConfig.v1.inputTensors")
    assert "rank 6" in msg and "ranks 1..5" in msg, f"the message names the rank and the ranks taken: {msg}"


def test_rule_htp_op_variant(session):
    """ScatterElements with reduction MAX on float32 (onnx's test_scatter_elements_with_reduction_max):
    the op takes the types, with this reduction the HTP does not."""
    ind = abi.static_tensor("i", np.array([[1, 3]], np.int32))
    op = abi.op_config("n", "ScatterElements", [_t("x", (1, 5)), ind, _t("u", (1, 2))], [_out("y", (1, 5))],
                       [abi.scalar_param("axis", U32, "uint32Value", 1),
                        abi.scalar_param("reduction", U32, "uint32Value", 3)])
    msg = session.rec.assert_rule(validate(session, op), VALIDATION_FAILURE, "QNNEMU-htp-op-variant",
                                  "backendValidateOpConfig", "opConfig.v1.params")
    assert "reduction 3 (MAX)" in msg, f"the message names the parameter value: {msg}"


@pytest.mark.parametrize("session", [SM8350], indirect=True)
def test_rule_htp_op_add(session):
    """16-bit activations with 16-bit weights (A16W16) MatMul on v68: the vendor's graphAddNode
    refuses it (the HTP documentation: A16W16 is enabled only on selected SoCs)."""
    q = (0.001, 0)
    a, b = _t("a", (2, 3), S16, quant=q), _t("b", (3, 4), S16, quant=q)
    _, code = graph_node(session, [a, b], [_out("y", (2, 4), S16, quant=q)], "MatMul")
    msg = session.rec.assert_rule(code, Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, "QNNEMU-htp-op-add",
                                  "graphAddNode", "opConfig.v1.inputTensors")
    assert "A16W16" in msg and "v68" in msg, f"the message names A16W16 and the arch: {msg}"


def _gru_inputs():
    rng = np.random.default_rng(0)
    w = [abi.static_tensor(f"w{i}", rng.standard_normal((4, 3)).astype(np.float32)) for i in range(3)]
    r = [abi.static_tensor(f"r{i}", rng.standard_normal((4, 4)).astype(np.float32)) for i in range(3)]
    b = [abi.static_tensor(f"b{i}", rng.standard_normal(4).astype(np.float32)) for i in range(6)]
    return [_t("x", (1, 2, 3))] + w + r + b + [_t("h0", (1, 2, 4))]


def _gru_graph(s: abi.Session) -> int:
    g, code = graph_node(s, _gru_inputs(), [_out("y", (1, 2, 4)), _out("yh", (1, 2, 4))], "Gru",
                         [abi.scalar_param("time_major", Q.QNN_DATATYPE_BOOL_8, "bool8Value", 1),
                          abi.scalar_param("linear_before_reset", U32, "uint32Value", 1)], name="gru")
    assert code == Q.QNN_SUCCESS, f"graphAddNode takes the float Gru (as the vendor's does): {code}"
    return g


@pytest.mark.parametrize("session", [SM8350], indirect=True)
def test_rule_htp_op_finalize(session):
    """A float32 Gru on v68: validation and graphAddNode take it, the HTP cannot create it
    (the vendor's graphFinalize fails: docs/new-ops.md)."""
    g = _gru_graph(session)
    session.rec.clear()
    msg = session.rec.assert_rule(session.finalize(g), Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, "QNNEMU-htp-op-finalize",
                                  "graphFinalize", "node 'gru' (Gru)")
    assert "v68" in msg, f"the message names the arch: {msg}"


@pytest.mark.parametrize("session", [SM8650], indirect=True)
def test_float_gru_finalizes_on_v75(session):
    """The same graph on v75: created (the arch decides, not the op)."""
    assert session.finalize(_gru_graph(session)) == Q.QNN_SUCCESS, f"v75 takes a float Gru: {session.rec.errors()}"


def test_rule_htp_tensor_dtype(session):
    """A UINT_64 graph input (onnx's test_mod_uint64): the HTP holds no UINT_64 tensors; the
    vendor's code, QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM."""
    code, g = session.graph("g")
    assert code == Q.QNN_SUCCESS, "setup: graphCreate"
    msg = session.rec.assert_rule(session.tensor(g, _t("x", (3,), U64)), Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM,
                                  "QNNEMU-htp-tensor-dtype", "tensorCreateGraphTensor", "tensor.v2.dataType")
    assert "UINT_64" in msg and "v73" in msg, f"the message names the type and the arch: {msg}"


def test_rule_env_op_support(session, monkeypatch):
    """QNNEMU_OP_SUPPORT other than htp or all: the call that reads it fails."""
    monkeypatch.setenv("QNNEMU_OP_SUPPORT", "sometimes")
    code, g = session.graph("g")
    assert code == Q.QNN_SUCCESS, "setup: graphCreate"
    session.rec.assert_rule(session.tensor(g, _t("x", (2, 3))), Q.QNN_COMMON_ERROR_INVALID_ARGUMENT,
                            "QNNEMU-env-op-support", "tensorCreateGraphTensor", "QNNEMU_OP_SUPPORT")


# ---- the escape hatch and the device -------------------------------------------------------------------
@pytest.mark.parametrize("session", [SM8350], indirect=True)
def test_escape_hatch_takes_everything_qnnemu_computes(session, monkeypatch):
    """QNNEMU_OP_SUPPORT=all: the emulator's reference runs (ops, types and archs the HTP does
    not take) pass every op-support check."""
    monkeypatch.setenv("QNNEMU_OP_SUPPORT", "all")
    erf = abi.op_config("n", "Erf", [_t("x", (2, 3))], [_out("y", (2, 3))])
    assert validate(session, erf) == Q.QNN_SUCCESS, f"Erf validates: {session.rec.errors()}"
    assert session.finalize(_gru_graph(session)) == Q.QNN_SUCCESS, f"a float Gru on v68: {session.rec.errors()}"
    code, g = session.graph("g64")
    assert session.tensor(g, _t("x", (3,), U64)) == Q.QNN_SUCCESS, f"a UINT_64 tensor: {session.rec.errors()}"


def test_validation_answers_for_the_newest_device():
    """backendValidateOpConfig has no device: as the vendor's, it answers for the newest device
    created (A16W16 MatMul: taken on v73, refused on v68). Once that device is freed qnnemu
    answers for the newest live one; the vendor's process-wide setting stays v68 (measured)."""
    q = (0.001, 0)

    def op():
        return abi.op_config("n", "MatMul", [_t("a", (2, 3), S16, quant=q), _t("b", (3, 4), S16, quant=q)],
                             [_out("y", (2, 4), S16, quant=q)])
    first = abi.Session(soc=SM8550)
    try:
        assert validate(first, op()) == Q.QNN_SUCCESS, f"v73 takes A16W16 MatMul: {first.rec.messages()}"
        second = abi.Session(soc=SM8350)
        try:
            assert validate(first, op()) == VALIDATION_FAILURE, \
                "after an SM8350 device is created, validation answers for v68 (on any backend handle)"
        finally:
            second.close()
        assert validate(first, op()) == Q.QNN_SUCCESS, "once it is freed, for the newest live device again"
    finally:
        first.close()


# ---- the data is current (the vendor's library) ------------------------------------------------------------
def _measured_wheel() -> bool:
    try:
        return version("onnxruntime-qnn") == op_support.data()["vendor"].get("onnxruntime-qnn")
    except PackageNotFoundError:
        return False


@pytest.mark.skipif(vendor_library() is None, reason="onnxruntime_qnn (vendor libQnnHtp.so) not installed")
@pytest.mark.parametrize("arch", [68, 73])
def test_vendor_still_gives_the_recorded_verdicts(arch):
    """60 measured cases re-run on the vendor's library (one worker subprocess per arch, as the
    probe runs them) give the verdicts op_support.json records."""
    if not _measured_wheel():
        pytest.skip("the installed onnxruntime-qnn is not the one op_support.json was measured with")
    cases = probe.sample_cases(sorted(ops.REGISTRY), 60, seed=100 + arch)
    env = vendor_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    recs = probe.run_cases(str(vendor_library()), probe.arch_soc(arch), cases, env, f"test-v{arch}",
                           log=lambda *_: None)
    doc = op_support.data()
    compared, differ = 0, []
    for _c, r in zip(cases, recs):
        if "crash" in r:
            continue
        v, g = probe.vendor_verdicts(doc, arch, r["entry"], r["sig"], r["rank"])
        now_v, now_g = r["validate"] == 0, "stage" not in r and "graph" not in r
        for stage, was, now in (("validate", v, now_v), ("graph", g, now_g)):
            if was is not None:
                compared += 1
                if was != now:
                    differ.append((stage, r["entry"], r["sig"], r["rank"], was, now))
    assert compared > 40, f"v{arch}: too few verdicts compared ({compared})"
    assert not differ, f"v{arch}: the vendor now answers otherwise (re-run tools/probe_op_support.py): {differ}"


def test_case_templates_cover_every_registered_op():
    assert set(op_support_cases.TEMPLATES) == set(ops.REGISTRY), \
        f"templates missing for {sorted(set(ops.REGISTRY) - set(op_support_cases.TEMPLATES))}"


def test_graph_validate_names_the_node_the_htp_cannot_create():
    """graphValidate (QNN 2.50) reports a node graphFinalize would refuse for op support as
    UNSUPPORTED, with the rule, and graphFinalize's code as the overall status."""
    from qnnemu.client import Backend, htp_device_config
    rng = np.random.default_rng(1)
    with Backend(log_level=None, device_configs=[htp_device_config("SOC", socModel=SM8350)]) as be:
        g = be.context().graph("g")
        ins = [g.input("x", (1, 2, 3))]
        ins += [g.static(f"w{i}", rng.standard_normal((4, 3)).astype(np.float32)) for i in range(3)]
        ins += [g.static(f"r{i}", rng.standard_normal((4, 4)).astype(np.float32)) for i in range(3)]
        ins += [g.static(f"b{i}", rng.standard_normal(4).astype(np.float32)) for i in range(6)]
        ins.append(g.input("h0", (1, 2, 4)))
        g.node("Gru", ins, [("y", (1, 2, 4), np.float32), ("yh", (1, 2, 4), np.float32)],
               params={"time_major": True, "linear_before_reset": 1}, app_read=True, name="gru")
        g.node("Relu", [g.input("a", (2, 3))], [("b", (2, 3), np.float32)], app_read=True, name="relu")
        verdict = g.validate()
    gru, relu = verdict["nodes"]
    assert relu["supported"], f"Relu is supported on v68: {relu}"
    assert not gru["supported"] and gru["code"] == Q.QNN_GRAPH_ERROR_FINALIZE_FAILED \
        and "[QNNEMU-htp-op-finalize]" in gru["message"], f"the float Gru on v68 is UNSUPPORTED: {gru}"
    assert verdict["overall"] == Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, f"overall: graphFinalize's code: {verdict}"
