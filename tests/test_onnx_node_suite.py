"""onnx's own backend node test suite (``onnx.backend.test.case.node``) through ONNX Runtime's
QNN execution provider on libQnnHtpEmu.so, compared with the vendor's libQnnHtp.so.

The harness is benchmarks/onnx_node_suite.py (the cases, the match criterion, the worker
subprocesses that isolate crashes and hangs); docs/onnx-node-suite.md describes it. Here:

- ``test_case_on_qnnemu[<case>]``: every case of the sample runs on qnnemu (``soc_model`` 43 =
  SM8550, CPU fallback disabled) and FAILS when the vendor passes it (the committed data
  tests/data/onnx_node_vendor_outcomes.json) and qnnemu does not, or when qnnemu crashes or
  hangs, or when the vendor refuses it and qnnemu runs it (refuse what the HTP refuses:
  docs/op-support.md). A case listed in tests/data/onnx_node_known_failures.json xfails with its
  cause; a listed case that passes fails, so that the list shrinks as causes are fixed.
- ``test_vendor_outcomes_are_current``: a small stratified sample on the vendor's backend (when
  the onnxruntime-qnn wheel is installed) gives the classes the data records.
- the criterion, the sampler and the crash/hang isolation are tested on their own.

Environment: ``QNNEMU_NODE_SUITE_CASES`` -- how many cases (stratified by op, deterministic;
default ``all``: the whole set takes ~30 s on qnnemu); ``QNNEMU_NODE_SUITE_VENDOR_CASES`` --
cases run on the vendor to check the data (default 24, ~10 s); ``QNNEMU_NODE_SUITE_JOBS`` --
worker processes (default 2).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import qnnemu

pytest.importorskip("onnx", reason="onnx (test extra) is not installed")
pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
if not Path(qnnemu.backend_library_path()).exists():
    pytest.skip("libQnnHtpEmu.so is not built", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import onnx_node_suite as suite
from vendor import vendor_library


def _env_size(var: str, default: str) -> int | None:
    raw = os.environ.get(var, default).strip().lower()
    if raw in ("all", ""):
        return None
    try:
        return max(1, int(raw))
    except ValueError:
        raise pytest.UsageError(f"{var}={raw!r}: a number of cases or 'all'") from None


SAMPLE_SIZE = _env_size("QNNEMU_NODE_SUITE_CASES", "all")
VENDOR_SAMPLE_SIZE = _env_size("QNNEMU_NODE_SUITE_VENDOR_CASES", "24")
JOBS = _env_size("QNNEMU_NODE_SUITE_JOBS", "2") or 2

OUTCOMES = suite.load_outcomes()
VENDOR = {name: entry["vendor"] for name, entry in OUTCOMES["cases"].items()}
KNOWN = suite.load_known_failures()
SAMPLE = suite.stratified_sample({n: e["op"] for n, e in OUTCOMES["cases"].items()}, SAMPLE_SIZE)


@pytest.fixture(scope="module")
def generated() -> dict[str, suite.NodeCase]:
    return suite.generate_cases()


@pytest.fixture(scope="module")
def ours(generated, request) -> dict[str, dict]:
    """The outcomes on qnnemu of the cases this pytest run selected (one run, worker
    subprocesses; ``-k test_gru`` runs only those)."""
    selected = {item.callspec.params["name"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_case_on_qnnemu" and hasattr(item, "callspec")}
    return suite.run_cases(generated, "ours", [n for n in SAMPLE if n in generated and n in selected], jobs=JOBS)


def _describe(rec: dict) -> str:
    parts = [suite.outcome_label(rec)]
    parts += [rec[k] for k in ("code", "error") if rec.get(k)]
    if rec.get("log"):
        parts.append(f"log: {rec['log']}")
    return " | ".join(parts)


@pytest.mark.parametrize("name", SAMPLE)
def test_case_on_qnnemu(name, generated, ours):
    if name not in generated:
        pytest.skip(f"onnx {suite.versions()['onnx']} does not generate {name} (the data was made with "
                    f"onnx {OUTCOMES['versions']['onnx']})")
    rec = ours[name]
    label = suite.outcome_label(rec)
    vendor = VENDOR[name]
    known = KNOWN.get(name)
    if rec["class"] in ("crash", "timeout"):
        if known is not None and vendor == "crash":
            pytest.xfail(f"known: {known.split(':')[0]}; the vendor crashes too")
        pytest.fail(f"{name} ({generated[name].op}): qnnemu {_describe(rec)} (the vendor: {vendor})")
    if known is not None and vendor == "crash":
        pytest.fail(f"{name}: listed in {suite.KNOWN_FAILURES_PATH.name} as a crash both backends share ({known}), "
                    f"but qnnemu no longer crashes ({label}): remove it from the list")
    if vendor.startswith("refused") and label == "pass":
        pytest.fail(f"{name} ({generated[name].op}): the vendor refuses it ({vendor}), qnnemu runs it: qnnemu "
                    f"must refuse what the HTP refuses (docs/op-support.md: qnnemu/htp/op_support.json is out of "
                    f"date, or a parameter value / layout the probe does not measure yet)")
    if vendor != "pass":
        return  # the vendor does not pass it either: qnnemu may do anything but crash or run what it refuses
    if known is not None:
        if label == "pass":
            pytest.fail(f"{name}: listed in {suite.KNOWN_FAILURES_PATH.name} ({known}) but passes on qnnemu "
                        f"now: remove it from the list (benchmarks/onnx_node_suite.py --backends ours "
                        f"--update-known-failures)")
        pytest.xfail(f"known: {known.split(':')[0]}; qnnemu: {label}")
    assert label == "pass", (f"{name} ({generated[name].op}): the vendor passes it, qnnemu: {_describe(rec)} "
                             f"(criterion: |got - want| <= {suite.ATOL:g} + {suite.RTOL:g} |want|)")


def test_generated_cases_are_the_recorded_ones(generated):
    """The data covers exactly the cases this onnx generates (else regenerate it)."""
    recorded, made = set(OUTCOMES["cases"]), set(generated)
    if suite.versions()["onnx"] != OUTCOMES["versions"]["onnx"]:
        pytest.skip(f"onnx {suite.versions()['onnx']} here, the data was made with {OUTCOMES['versions']['onnx']}: "
                    f"{len(made - recorded)} new, {len(recorded - made)} gone")
    assert made == recorded, (f"onnx generates {len(made - recorded)} cases the data lacks (e.g. "
                              f"{sorted(made - recorded)[:5]}) and lacks {len(recorded - made)} it has (e.g. "
                              f"{sorted(recorded - made)[:5]}): rerun benchmarks/onnx_node_suite.py --write-outcomes")
    ops = {n: c.op for n, c in generated.items()}
    wrong_op = {n: (ops[n], OUTCOMES["cases"][n]["op"]) for n in made if ops[n] != OUTCOMES["cases"][n]["op"]}
    assert not wrong_op, f"cases whose op differs from the data's: {dict(list(wrong_op.items())[:5])}"


def test_known_failures_are_vendor_passes_or_ep_crashes():
    """Every known failure is a case the vendor passes (or an EP crash the vendor shares), with a
    cause from the file's cause table."""
    data = suite.load_known_failures_document()
    for name, entry in data["cases"].items():
        assert name in VENDOR, f"known failure {name} is not a case of the data"
        assert entry["cause"] in data["causes"], f"{name}: cause {entry['cause']!r} is not in the cause table"
        assert VENDOR[name] in ("pass", "crash"), \
            f"{name}: the vendor's class is {VENDOR[name]}; only vendor passes (and shared EP crashes) are listed"


def test_vendor_outcomes_are_current(generated):
    """A stratified sample (by the vendor's class) re-run on the vendor's backend gives the
    classes tests/data/onnx_node_vendor_outcomes.json records."""
    if vendor_library() is None:
        pytest.skip("the vendor's libQnnHtp.so (onnxruntime-qnn) is not installed")
    if suite.versions()["onnxruntime-qnn"] != OUTCOMES["versions"]["onnxruntime-qnn"]:
        pytest.skip(f"onnxruntime-qnn {suite.versions()['onnxruntime-qnn']} here, the data was made with "
                    f"{OUTCOMES['versions']['onnxruntime-qnn']}: rerun benchmarks/onnx_node_suite.py --write-outcomes")
    names = [n for n in suite.stratified_sample(VENDOR, VENDOR_SAMPLE_SIZE) if n in generated]
    got = suite.run_cases(generated, "vendor", names, jobs=JOBS)
    stale = {n: (VENDOR[n], suite.outcome_label(got[n]), got[n].get("error", "")) for n in names
             if suite.outcome_label(got[n]) != VENDOR[n]}
    assert not stale, (f"{len(stale)}/{len(names)} vendor outcomes differ from the data (recorded, now, why): "
                       f"{stale}; rerun benchmarks/onnx_node_suite.py --write-outcomes")


# ---------------------------------------------------------------------------------------------
# the harness itself
# ---------------------------------------------------------------------------------------------

def test_match_criterion():
    f32 = np.array([1.0, -2.0, 0.0, 100.0], np.float32)
    assert suite.outputs_match([f32.copy()], [f32]) is None, "identical outputs match"
    near = f32 + np.array([0.0, 0.04, 0.0009, 1.9], np.float32)  # within 1e-3 + 2e-2 |want|
    assert suite.outputs_match([near], [f32]) is None, "differences inside the tolerance match"
    far = f32 + np.array([0.0, 0.0, 0.0011, 0.0], np.float32)  # 1.1e-3 off a zero: beyond atol
    why = suite.outputs_match([far], [f32])
    assert why and "1/4 elements" in why and "[2]" in why, f"an element past atol is named: {why}"
    assert suite.outputs_match([f32.astype(np.float16)], [f32]) and "dtype" in \
        suite.outputs_match([f32.astype(np.float16)], [f32]), "a different dtype does not match"
    assert "shape" in suite.outputs_match([f32[None]], [f32]), "a different shape does not match"
    special = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    assert suite.outputs_match([special.copy()], [special]) is None, "NaN and infinities where expected match"
    assert suite.outputs_match([np.array([0.0, np.inf, -np.inf, 1.0], np.float32)], [special]), \
        "a number where NaN is expected does not match"
    assert suite.outputs_match([np.array([np.nan, 65504.0, -np.inf, 1.0], np.float32)], [special]), \
        "a finite number where +inf is expected does not match"
    ints = np.array([3, 4, 100], np.int64)
    assert suite.outputs_match([ints + np.array([0, 0, 1])], [ints]), "integers must be equal (no tolerance)"
    assert suite.outputs_match([np.array([True, False])], [np.array([True, True])]), "bools must be equal"
    assert "2 outputs" in suite.outputs_match([f32, f32], [f32]), "the output count must be equal"
    seq = [np.ones(2, np.float32), np.zeros(3, np.float32)]
    assert suite.outputs_match([[s.copy() for s in seq]], [seq]) is None, "equal sequences match"
    assert suite.outputs_match([seq[:1]], [seq]), "a shorter sequence does not match"


def test_stratified_sample_covers_every_op_first():
    ops = {f"test_{op}_{i}": op for op in "abcdef" for i in range(5 if op == "a" else 2)}
    sample = suite.stratified_sample(ops, 6)
    assert sorted({ops[n] for n in sample}) == list("abcdef"), f"one case of each of 6 ops: {sample}"
    assert suite.stratified_sample(ops, 6) == sample, "the sample is deterministic"
    assert len(suite.stratified_sample(ops, 9)) == 9 and suite.stratified_sample(ops, None) == sorted(ops)
    assert suite.stratified_sample(ops, 100) == sorted(ops), "a size past the count takes everything"


def test_worker_crash_and_hang_cost_only_their_case(generated):
    """A case that kills its worker is recorded as ``crash``, one that hangs as ``timeout``, and
    the cases after them still run (in a new worker)."""
    names = ["test_abs", "test_add", "test_relu", "test_neg"]
    crash = suite.run_cases(generated, "ours", names, crash_on="test_add", jobs=1)
    assert {n: r["class"] for n, r in crash.items()} == {
        "test_abs": "pass", "test_add": "crash", "test_relu": "pass", "test_neg": "pass"}, crash
    assert "SIGSEGV" in crash["test_add"]["error"], f"the signal is recorded: {crash['test_add']}"
    assert "Segmentation fault" in crash["test_add"]["log"] and "worker_main" in crash["test_add"]["log"], \
        f"the fatal error and the Python frame it happened in are recorded: {crash['test_add']}"
    hang = suite.run_cases(generated, "ours", names, hang_on="test_relu", jobs=1, case_timeout=6)
    assert {n: r["class"] for n, r in hang.items()} == {
        "test_abs": "pass", "test_add": "pass", "test_relu": "timeout", "test_neg": "pass"}, hang


def test_wrong_and_refused_are_classified(generated):
    """A tampered expected output makes a ``wrong`` case naming the element; a model the EP
    cannot place makes a ``refused`` case with ONNX Runtime's code and the EP's reason."""
    import dataclasses
    abs_case = generated["test_abs"]
    want = np.array(abs_case.outputs[0], copy=True)
    want.flat[5] += 1.0
    tampered = {"test_abs": dataclasses.replace(abs_case, outputs=[want]),
                "test_acos": generated["test_acos"]}
    got = suite.run_cases(tampered, "ours", jobs=1)
    assert got["test_abs"]["class"] == "wrong" and "1/60 elements" in got["test_abs"]["error"], got["test_abs"]
    acos = got["test_acos"]
    assert (acos["class"], acos["kind"], acos["code"]) == ("refused", "not-placed", "FAIL"), acos
    assert "Acos" in acos["log"], f"the EP's reason names the op: {acos}"
