"""onnx's own backend node test suite through ONNX Runtime's QNN execution provider, on qnnemu
and on the vendor's libQnnHtp.so (QNN HTP backend, graphCreate/graphAddNode/graphFinalize/graphExecute
as the QNN EP drives them), every case classified per backend.

    python3 benchmarks/onnx_node_suite.py                    # every case, both backends, table
    python3 benchmarks/onnx_node_suite.py --backends ours    # qnnemu only, compared to the data
    python3 benchmarks/onnx_node_suite.py --write-outcomes   # (re)writes the vendor outcomes data
    python3 benchmarks/onnx_node_suite.py --cases test_abs test_gru_defaults --details
    python3 benchmarks/onnx_node_suite.py --backends ours --update-known-failures

The cases are those of ``onnx.backend.test.case.node.collect_testcases`` (the generator behind
onnx's ``backend/test/data/node``: one model, its inputs and onnx's expected outputs each),
generated with numpy's global generator seeded (``SEED``), so the data is the same in every run.
Each case runs through the QNN EP with ``session.disable_cpu_ep_fallback=1`` and
``PROVIDER_OPTIONS`` (``soc_model`` 43 = SM8550) in a worker subprocess per backend, which
reports each case as it starts and ends: a worker that dies or hangs costs only the case it was
running (recorded as ``crash`` / ``timeout``); the parent starts a new worker for the rest.

Classes (``CLASSES``):

- ``pass``: the session is created, runs, and every output matches onnx's expected output
  (``outputs_match``: same count, shape and dtype; integer, bool and string outputs equal;
  floating outputs ``|got - want| <= ATOL + RTOL * |want|`` elementwise, NaN where NaN is
  expected, infinities equal);
- ``wrong``: it runs but an output does not match (the detail names the output and the worst
  element);
- ``refused``: the session cannot be created: ``kind`` ``not-placed`` (the EP leaves a node to
  the CPU EP, which the disabled fallback forbids: the EP or the backend's op validation said
  no), ``ep-error`` (the EP failed composing or finalizing the QNN graph: the backend refused a
  node, a tensor or finalize) or ``ort`` (ONNX Runtime itself refused the model); the record
  keeps ONNX Runtime's code and first error line and the first error line of the logs;
- ``run-error``: the session is created but ``run`` fails;
- ``crash``: the worker died during the case (signal or exit status);
- ``timeout``: the case ran longer than ``--case-timeout`` seconds.

The committed data ``tests/data/onnx_node_vendor_outcomes.json`` (``--write-outcomes``) keeps,
per case, its op and the vendor's class: tests/test_onnx_node_suite.py compares qnnemu to it
without running the vendor on every case. ``tests/data/onnx_node_known_failures.json`` lists the
cases the vendor passes and qnnemu does not yet, with the cause; this script prints those rows
and the table (cases, vendor pass, qnnemu pass, vendor-pass & qnnemu-fail, qnnemu crashes, per
class). Exit status 1 when a case the vendor passes fails on qnnemu, or qnnemu crashes or hangs,
and the case is not a known failure.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import hashlib
import json
import logging
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from vendor_env import vendor_dir, worker_env  # noqa: E402

DATA_DIR = ROOT / "tests" / "data"
OUTCOMES_PATH = DATA_DIR / "onnx_node_vendor_outcomes.json"
KNOWN_FAILURES_PATH = DATA_DIR / "onnx_node_known_failures.json"

SEED = 0
SOC_MODEL = "43"  # SM8550 (v73)
# The same options on both backends. Graph-input Quantize / output Dequantize stay inside the
# QNN graph: the EP would otherwise leave them to the CPU EP, which the disabled fallback forbids.
PROVIDER_OPTIONS = {"soc_model": SOC_MODEL, "offload_graph_io_quantization": "0"}
# The match criterion (see outputs_match): relative 2e-2, absolute 1e-3 -- float16 resolution
# near 1 is ~1e-3, and on v69+ the HTP computes float32 graphs in float16.
RTOL = 2e-2
ATOL = 1e-3
CASE_TIMEOUT = 120.0

BACKENDS = ("ours", "vendor")
CLASSES = ("pass", "wrong", "refused", "run-error", "crash", "timeout")
REFUSED_KINDS = ("not-placed", "ep-error", "ort")
FAIL_CLASSES = tuple(c for c in CLASSES if c != "pass")


# ---------------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------------

@dataclass
class NodeCase:
    name: str
    op: str            # the op under test (for an "_expanded" case: the op its function expands)
    model: bytes       # serialized ModelProto
    inputs: list       # numpy arrays, lists (sequences), TensorProtos, None (absent optional)
    outputs: list      # onnx's expected outputs, same kinds


def generate_cases(seed: int = SEED) -> dict[str, NodeCase]:
    """Every case of onnx's node test generator, by name (sorted), with numpy seeded."""
    from onnx.backend.test.case.node import collect_testcases
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            raw = collect_testcases(None)
    finally:
        np.random.set_state(state)
    single = {c.name: c.model.graph.node[0].op_type for c in raw if len(c.model.graph.node) == 1}
    cases: dict[str, NodeCase] = {}
    for c in raw:
        base = c.name.split("_expanded")[0]
        if base in single:
            op = single[base]
        elif len(c.model.graph.node) == 1:
            op = c.model.graph.node[0].op_type
        else:
            op = "(" + "+".join(sorted({n.op_type for n in c.model.graph.node})) + ")"
        inputs, outputs = c.data_sets[0]
        cases[c.name] = NodeCase(c.name, op, c.model.SerializeToString(), list(inputs), list(outputs))
    return dict(sorted(cases.items()))


def _hash_key(name: str, seed: int) -> str:
    return hashlib.sha1(f"{seed}:{name}".encode()).hexdigest()


def stratified_sample(ops: dict[str, str], size: int | None, seed: int = SEED) -> list[str]:
    """A deterministic sample of ``size`` case names (all when None or >= the count), stratified
    by op: round-robin over the ops in name order, each op's cases in a fixed hash order; so
    every op gets a case before any op gets a second one."""
    if size is None or size >= len(ops):
        return sorted(ops)
    by_op: dict[str, list[str]] = collections.defaultdict(list)
    for name, op in ops.items():
        by_op[op].append(name)
    queues = [sorted(names, key=lambda n: _hash_key(n, seed)) for _, names in sorted(by_op.items())]
    picked: list[str] = []
    depth = 0
    while len(picked) < size:
        for q in queues:
            if depth < len(q):
                picked.append(q[depth])
                if len(picked) == size:
                    break
        depth += 1
    return sorted(picked)


# ---------------------------------------------------------------------------------------------
# the match criterion
# ---------------------------------------------------------------------------------------------

def _as_array(value):
    from onnx import TensorProto, numpy_helper
    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    return value


def _is_floating(dtype: np.dtype) -> bool:
    return dtype.kind in "fc" or "float" in dtype.name  # float8/bfloat16 (ml_dtypes) too


def _array_match(got, want, what: str, expected: str = "expected") -> str | None:
    """None when ``got`` matches ``want`` (criterion in the module docstring), else why not."""
    got, want = np.asarray(got), np.asarray(_as_array(want))
    if got.shape != want.shape:
        return f"{what}: shape {list(got.shape)}, {expected} {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"{what}: dtype {got.dtype}, {expected} {want.dtype}"
    if want.size == 0:
        return None
    if not _is_floating(want.dtype):
        bad = np.asarray(got != want)  # same dtype here: integers, bools, strings compare exactly
        if not bad.any():
            return None
        i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        return (f"{what}: {int(bad.sum())}/{bad.size} elements differ; first at {list(map(int, i))}: "
                f"{got[i]!r}, {expected} {want[i]!r}")
    g = got.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
    w = want.astype(g.dtype)
    nan_w, nan_g = np.isnan(w), np.isnan(g)
    inf_w = np.isinf(w)
    with np.errstate(all="ignore"):
        tol = ATOL + RTOL * np.abs(np.where(inf_w | nan_w, 0, w))
        diff = np.abs(np.where(nan_w | inf_w, 0, g - w))
        bad = np.where(nan_w, ~nan_g, np.where(inf_w, g != w, nan_g | (diff > tol)))
    if not bad.any():
        return None
    with np.errstate(all="ignore"):
        score = np.where(bad, np.where(np.isfinite(diff), diff / tol, np.inf), -1.0)
    i = np.unravel_index(int(np.argmax(score)), score.shape)
    finite = ~(nan_w | inf_w)
    max_diff = float(np.max(np.where(finite, np.nan_to_num(diff, nan=np.inf), 0)))
    return (f"{what}: {int(bad.sum())}/{bad.size} elements out of tolerance, max |diff| {max_diff:.3g}; "
            f"worst at {list(map(int, i))}: {g[i]:.6g}, {expected} {w[i]:.6g}")


def outputs_match(got: list, want: list, expected: str = "expected") -> str | None:
    """None when every output matches onnx's expected output, else the first mismatch
    (``expected``: what the message calls ``want``'s values)."""
    if len(got) != len(want):
        return f"{len(got)} outputs, {expected} {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, list):
            if not isinstance(g, list) or len(g) != len(w):
                return f"output {k}: not a sequence of {len(w)} tensors"
            for j, (gj, wj) in enumerate(zip(g, w)):
                why = _array_match(gj, wj, f"output {k}[{j}]", expected)
                if why:
                    return why
            continue
        why = _array_match(g, w, f"output {k}", expected)
        if why:
            return why
    return None


# ---------------------------------------------------------------------------------------------
# the worker: one backend, many cases, one JSON line per event
# ---------------------------------------------------------------------------------------------

_ORT_ERROR = re.compile(r"\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*(\w+)\s*:\s*(.*)", re.S)
_LOG_ERROR = re.compile(r"\[E:onnxruntime|<E>|\bERROR\b|\berror\b|failed|Failed")
_NOT_PLACED = "assigned to the default CPU EP"


def _first_line(text: str, limit: int = 400) -> str:
    for line in text.splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
        if line:
            return line[:limit]
    return ""


def classify_error(error: str) -> tuple[str, str]:
    """(ONNX Runtime's status code name, first line of its message) of an exception text."""
    m = _ORT_ERROR.search(error)
    if m:
        return m.group(1), _first_line(m.group(2))
    return "", _first_line(error)


def refused_kind(code: str, message: str) -> str:
    # The second message: a node the layout transformer made NHWC for the EP, which the EP
    # then did not take (the backend's op validation refused the NHWC op).
    if _NOT_PLACED in message or "was not selected by that EP" in message:
        return "not-placed"
    if code == "EP_FAIL":
        return "ep-error"
    return "ort"


@contextlib.contextmanager
def _captured_fd2():
    """What the process writes to file descriptor 2 meanwhile (the backends and ONNX Runtime
    log there), as a list holding the text once the block ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    out: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.append(tmp.read().decode(errors="replace"))


@contextlib.contextmanager
def _qnnemu_log():
    """qnnemu's log records (the ``qnnemu`` Python logger; empty for the vendor's backend)."""
    records: list[logging.LogRecord] = []

    class _Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = logging.getLogger("qnnemu")
    handler, level, propagate = _Collect(logging.DEBUG), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def _log_line(stderr_text: str, records: list[logging.LogRecord]) -> str:
    """The first error line: qnnemu's first warning/error or rule message, else the first reason
    the EP gave for not placing a node, else the first error line ONNX Runtime or the vendor's
    backend printed (other than the disabled-fallback message itself)."""
    for r in records:
        msg = r.getMessage()
        if r.levelno >= logging.WARNING or msg.startswith("[QNNEMU-"):
            return _first_line(msg)
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in stderr_text.splitlines()]
    for i, line in enumerate(lines):
        m = re.search(r"REASON\s*:\s*(.*)", line)
        if m:
            op = next((re.search(r"Operator type:\s*(\S+)", p).group(1) for p in reversed(lines[max(0, i - 3):i])
                       if "Operator type:" in p), "")
            return _first_line(f"EP: {op}: {m.group(1)}" if op else f"EP: {m.group(1)}")
    for line in lines:
        if _LOG_ERROR.search(line) and _NOT_PLACED not in line:
            return _first_line(line)
    return ""


def _feeds(model, inputs: list) -> dict:
    import onnx
    proto = onnx.ModelProto.FromString(model) if isinstance(model, bytes) else model
    initializers = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in initializers]
    feeds = {}
    for name, value in zip(names, inputs):
        if isinstance(value, list):
            value = [_as_array(v) for v in value]
        elif value is not None:
            value = np.asarray(_as_array(value))  # 0-d numpy scalars too
        feeds[name] = value
    return feeds


class _Runner:
    """Creates QNN EP sessions on one backend library, which stays loaded for the process."""

    def __init__(self, backend_path: str, options: dict[str, str]):
        import onnxruntime as ort
        import onnxruntime_qnn
        self.ort = ort
        self.pinned = ctypes.CDLL(backend_path)  # ORT would dlclose it with every last session
        try:
            ort.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
        except Exception as e:
            if "already" not in str(e).lower():
                raise
        self.device = next(d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider")
        self.options = {**options, "backend_path": backend_path}

    def _session(self, model: bytes, severity: int):
        so = self.ort.SessionOptions()
        so.log_severity_level = severity
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        so.add_provider_for_devices([self.device], self.options)
        sess = self.ort.InferenceSession(model, so)
        sess.disable_fallback()  # a failing run raises instead of retrying on the CPU EP
        return sess

    def run(self, case: NodeCase) -> dict[str, Any]:
        """The case's outcome record; ``self.last_outputs``: its outputs when it ran, else None."""
        out: dict[str, Any] = {"name": case.name}
        self.last_outputs = None
        with _captured_fd2() as err, _qnnemu_log() as records:
            try:
                sess = self._session(case.model, 2)
            except Exception as e:  # noqa: BLE001 - recorded
                code, line = classify_error(str(e))
                out.update({"class": "refused", "kind": refused_kind(code, line), "code": code, "error": line})
                sess = None
            if sess is not None:
                try:
                    got = sess.run(None, _feeds(case.model, case.inputs))
                except Exception as e:  # noqa: BLE001 - recorded
                    code, line = classify_error(str(e))
                    out.update({"class": "run-error", "code": code, "error": line})
                else:
                    why = outputs_match(got, case.outputs)
                    out.update({"class": "wrong", "error": why} if why else {"class": "pass"})
                    self.last_outputs = got
                del sess
        if out["class"] == "pass":
            return out
        log = _log_line(err[0] if err else "", records)
        if out.get("kind") == "not-placed" and not log:
            # The EP gives its reasons for leaving a node to the CPU EP only in verbose logs:
            # ask again, verbosely, for them.
            with _captured_fd2() as err, _qnnemu_log() as records, contextlib.suppress(Exception):
                self._session(case.model, 0)
            log = _log_line(err[0] if err else "", records)
        out["log"] = log
        return out


def worker_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="onnx_node_suite.py worker")
    p.add_argument("--backend-path", required=True)
    p.add_argument("--options", required=True, help="provider options, JSON")
    p.add_argument("--cases", required=True, help="pickle of {name: NodeCase}")
    p.add_argument("--names", required=True, help="file with one case name a line")
    p.add_argument("--results", required=True, help="JSON lines appended here")
    p.add_argument("--crash-on", default="", help="(harness test) die by SIGSEGV at this case")
    p.add_argument("--hang-on", default="", help="(harness test) sleep forever at this case")
    p.add_argument("--outputs", default="", help="directory: the outputs of each case that ran, pickled")
    a = p.parse_args(argv)
    import faulthandler
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crashing case leaves no core file behind
    # fd 2 goes to a per-case file while a case runs; the traceback of a crash goes to the
    # worker's own stderr, which the parent reads.
    faulthandler.enable(file=os.fdopen(os.dup(2), "w"), all_threads=False)
    with open(a.cases, "rb") as f:
        cases: dict[str, NodeCase] = pickle.load(f)
    names = Path(a.names).read_text().split()
    runner = _Runner(a.backend_path, json.loads(a.options))
    with open(a.results, "a") as results:
        def emit(record):
            results.write(json.dumps(record) + "\n")
            results.flush()
        for name in names:
            emit({"event": "start", "name": name})
            t0 = time.perf_counter()
            if name == a.crash_on:
                os.kill(os.getpid(), signal.SIGSEGV)
            if name == a.hang_on:
                time.sleep(1e6)
            record = runner.run(cases[name])
            record.update(event="done", seconds=round(time.perf_counter() - t0, 4))
            if a.outputs and runner.last_outputs is not None:
                with open(Path(a.outputs) / f"{name}.pkl", "wb") as f:
                    pickle.dump(runner.last_outputs, f, protocol=pickle.HIGHEST_PROTOCOL)
            emit(record)
    return 0


# ---------------------------------------------------------------------------------------------
# the parent: workers, crash and hang isolation
# ---------------------------------------------------------------------------------------------

def backend_path(backend: str) -> str:
    if backend == "ours":
        import qnnemu
        return qnnemu.backend_library_path()
    d = vendor_dir()
    if d is None:
        raise RuntimeError("the vendor's libQnnHtp.so (onnxruntime-qnn) is not installed")
    return str(d / "libQnnHtp.so")


@dataclass
class _Chunk:
    names: list[str]
    results: dict[str, dict] = field(default_factory=dict)
    workers: int = 0


def _tail(path: Path, lines: int = 6) -> str:
    """What a dead worker left on its stderr: the fatal error and the innermost Python frame of
    faulthandler's traceback (where in ONNX Runtime's API it died), else the last lines."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    keep = [ln for ln in text.splitlines() if ln.strip() and "[W:onnxruntime" not in ln]
    fatal = [i for i, ln in enumerate(keep) if ln.startswith("Fatal Python error")]
    if fatal:
        frames = [ln.strip() for ln in keep[fatal[-1]:] if ln.strip().startswith("File ")]
        return " | ".join(_first_line(x, 200) for x in [keep[fatal[-1]], *frames[:1]])
    return " | ".join(_first_line(ln, 200) for ln in keep[-lines:])


def _run_chunk(chunk: _Chunk, backend: str, cases_file: Path, work: Path, options: dict,
               case_timeout: float, crash_on: str, hang_on: str, tag: str, outputs_dir: str) -> None:
    pending = list(chunk.names)
    while pending:
        chunk.workers += 1
        stem = work / f"{tag}-{chunk.workers}"
        names_file, results_file, stderr_file = (stem.with_suffix(s) for s in (".names", ".jsonl", ".stderr"))
        names_file.write_text("\n".join(pending) + "\n")
        results_file.write_text("")
        cmd = [sys.executable, str(Path(__file__).resolve()), "worker", "--backend-path", backend_path(backend),
               "--options", json.dumps(options), "--cases", str(cases_file), "--names", str(names_file),
               "--results", str(results_file), "--crash-on", crash_on, "--hang-on", hang_on,
               "--outputs", outputs_dir]
        with open(stderr_file, "wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=worker_env(backend),
                                    stdin=subprocess.DEVNULL)
        current, started, offset, timed_out = None, time.monotonic(), 0, False
        # Startup (imports, loading the cases) gets a timeout of its own on top of the case's.
        deadline = time.monotonic() + case_timeout + 120.0
        while True:
            exited = proc.poll() is not None
            with open(results_file) as f:
                f.seek(offset)
                chunk_text = f.read()
            complete = chunk_text[:chunk_text.rfind("\n") + 1]
            offset += len(complete.encode())
            for line in complete.splitlines():
                rec = json.loads(line)
                if rec.pop("event") == "start":
                    current, started = rec["name"], time.monotonic()
                    deadline = started + case_timeout
                else:
                    chunk.results[rec["name"]] = rec
                    current = None
            if exited:
                break
            if time.monotonic() > deadline:
                timed_out = True
                proc.kill()
                proc.wait()
                continue  # read what it wrote last
            time.sleep(0.05)
        rc = proc.returncode
        if current is not None:
            if timed_out:
                chunk.results[current] = {"name": current, "class": "timeout",
                                          "error": f"no result after {case_timeout:g} s; worker killed",
                                          "seconds": round(time.monotonic() - started, 1)}
            else:
                how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
                chunk.results[current] = {"name": current, "class": "crash", "error": f"worker died: {how}",
                                          "log": _tail(stderr_file)}
        elif rc != 0 or timed_out:
            # Died before its first case: nothing will ever run; record the rest as crashed.
            why = f"worker failed to start ({'timeout' if timed_out else f'exit status {rc}'}): {_tail(stderr_file)}"
            for name in pending:
                chunk.results.setdefault(name, {"name": name, "class": "crash", "error": why})
        for s in (names_file, results_file, stderr_file):
            s.unlink(missing_ok=True)
        pending = [n for n in pending if n not in chunk.results]


def run_cases(cases: dict[str, NodeCase], backend: str, names: list[str] | None = None, *,
              options: dict[str, str] | None = None, jobs: int = 1, case_timeout: float = CASE_TIMEOUT,
              crash_on: str = "", hang_on: str = "", outputs_dir: Path | None = None) -> dict[str, dict]:
    """Runs ``names`` (default: every case) on ``backend`` ("ours" or "vendor") in ``jobs``
    worker subprocesses; returns {name: outcome record} (``class`` one of ``CLASSES``).
    ``outputs_dir``: the outputs of every case that ran are pickled there as ``<name>.pkl``."""
    names = sorted(cases) if names is None else list(names)
    options = dict(PROVIDER_OPTIONS if options is None else options)
    jobs = max(1, min(jobs, len(names)))
    chunks = [_Chunk(names[i::jobs]) for i in range(jobs)]
    with tempfile.TemporaryDirectory(prefix="onnx-node-suite-") as tmp:
        work = Path(tmp)
        cases_file = work / "cases.pkl"
        with open(cases_file, "wb") as f:
            pickle.dump({n: cases[n] for n in names}, f, protocol=pickle.HIGHEST_PROTOCOL)
        threads = [threading.Thread(target=_run_chunk, args=(c, backend, cases_file, work, options, case_timeout,
                                                             crash_on, hang_on, f"{backend}{i}",
                                                             str(outputs_dir or "")))
                   for i, c in enumerate(chunks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    results: dict[str, dict] = {}
    for c in chunks:
        results.update(c.results)
    return {n: results[n] for n in names}


# ---------------------------------------------------------------------------------------------
# committed data
# ---------------------------------------------------------------------------------------------

def load_outcomes(path: Path = OUTCOMES_PATH) -> dict:
    with open(path) as f:
        return json.load(f)


def load_known_failures_document(path: Path = KNOWN_FAILURES_PATH) -> dict:
    """``{"causes": {cause id: {"what", "owner"}}, "cases": {case name: {"cause", "qnnemu"}}}``."""
    with open(path) as f:
        return json.load(f)


def load_known_failures(path: Path = KNOWN_FAILURES_PATH) -> dict[str, str]:
    """{case name: its cause, one line} of the cases the vendor passes and qnnemu does not yet
    (and of the EP crashes the vendor shares)."""
    data = load_known_failures_document(path)
    causes = data["causes"]
    out = {}
    for name, entry in data["cases"].items():
        cause = causes.get(entry["cause"], {})
        out[name] = f"{entry['cause']}: {cause.get('what', '?')} ({cause.get('owner', '?')})"
    return out


UNCATEGORIZED = "uncategorized"


def updated_known_failures(document: dict, ours: dict[str, dict], vendor: dict[str, str]) -> dict:
    """``document`` with the cases of ``ours`` brought up to date: a listed case that passes
    now goes, a vendor-pass case failing on qnnemu (or a crash on both) that is not listed comes
    in under ``uncategorized`` (to be given its cause by hand); cases not run stay as they are."""
    cases = dict(document.get("cases", {}))
    for name, rec in ours.items():
        label = outcome_label(rec)
        failing = (vendor.get(name) == "pass" and label != "pass") or (
            label in ("crash", "timeout") and vendor.get(name) == "crash")
        if not failing:
            cases.pop(name, None)
        elif name in cases:
            cases[name] = {**cases[name], "qnnemu": label}
        else:
            cases[name] = {"cause": UNCATEGORIZED, "qnnemu": label}
    causes = dict(document.get("causes", {}))
    if any(e["cause"] == UNCATEGORIZED for e in cases.values()):
        causes.setdefault(UNCATEGORIZED, {"what": "not yet categorized: see the case's qnnemu log line",
                                          "owner": "?"})
    used = {e["cause"] for e in cases.values()}
    return {**document, "causes": {k: v for k, v in causes.items() if k in used},
            "cases": dict(sorted(cases.items()))}


def write_document(path: Path, document: dict) -> None:
    """JSON with one line per entry of the document's ``cases`` and ``causes`` (diffs stay
    readable when a few outcomes change)."""
    lines = ["{"]
    items = list(document.items())
    for i, (key, value) in enumerate(items):
        end = "," if i < len(items) - 1 else ""
        if key in ("cases", "causes") and isinstance(value, dict) and value:
            lines.append(f" {json.dumps(key)}: {{")
            entries = list(value.items())
            for j, (name, entry) in enumerate(entries):
                lines.append(f"  {json.dumps(name)}: {json.dumps(entry)}" + ("," if j < len(entries) - 1 else ""))
            lines.append(" }" + end)
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}{end}")
    lines.append("}")
    Path(path).write_text("\n".join(lines) + "\n")


def outcome_label(rec: dict) -> str:
    """``class`` or ``refused:<kind>``."""
    return f"refused:{rec['kind']}" if rec["class"] == "refused" else rec["class"]


def versions() -> dict[str, str]:
    from importlib.metadata import version
    out = {}
    for pkg in ("onnx", "onnxruntime", "onnxruntime-qnn"):
        try:
            out[pkg] = version(pkg)
        except Exception:  # noqa: BLE001 - not installed
            out[pkg] = ""
    return out


def outcomes_document(cases: dict[str, NodeCase], vendor: dict[str, dict]) -> dict:
    return {
        "about": ("Generated by benchmarks/onnx_node_suite.py --write-outcomes: per case of onnx's node test "
                  "generator, its op and the class of its outcome on the vendor's libQnnHtp.so through "
                  "ONNX Runtime's QNN EP (CPU fallback disabled). Measured data, not vendor files."),
        "seed": SEED,
        "provider_options": PROVIDER_OPTIONS,
        "criterion": {"rtol": RTOL, "atol": ATOL},
        "versions": versions(),
        "cases": {n: {"op": cases[n].op, "vendor": outcome_label(vendor[n])} for n in sorted(vendor)},
    }


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------

def counts_table(ours: dict[str, dict], vendor: dict[str, str], known: dict[str, str]) -> str:
    """The counts table. ``vendor``: {name: label} (run now or from the data)."""
    names = sorted(ours)
    ours_label = {n: outcome_label(ours[n]) for n in names}
    v_pass = [n for n in names if vendor.get(n) == "pass"]
    regress = [n for n in v_pass if ours_label[n] != "pass"]
    rows = [("cases", len(names)),
            ("vendor pass", len(v_pass)),
            ("qnnemu pass", sum(1 for n in names if ours_label[n] == "pass")),
            ("vendor pass & qnnemu fail", len(regress)),
            ("  of which known (onnx_node_known_failures.json)", sum(1 for n in regress if n in known)),
            ("qnnemu pass & vendor fail", sum(1 for n in names if ours_label[n] == "pass" and n in vendor
                                                and vendor[n] != "pass")),
            # refused: what qnnemu must refuse too (docs/op-support.md); wrong / crash: the vendor
            # computes otherwise or dies (docs/numerics.md, the findings in docs/onnx-node-suite.md)
            *((f"  of which the vendor {what}", sum(1 for n in names if ours_label[n] == "pass"
                                                    and vendor.get(n, "pass").startswith(prefix)))
              for what, prefix in (("refused", "refused"), ("computed otherwise (wrong)", "wrong"),
                                   ("crashed", "crash"), ("failed running", "run-error"))),
            ("qnnemu crashes", sum(1 for n in names if ours_label[n] in ("crash", "timeout")))]
    labels = ["pass", "wrong", *(f"refused:{k}" for k in REFUSED_KINDS), "run-error", "crash", "timeout"]
    lines = [f"{k:<52}{v:>6}" for k, v in rows]
    lines.append("")
    lines.append(f"{'class':<20}{'vendor':>8}{'qnnemu':>8}{'vendor pass & qnnemu this':>28}")
    for lab in labels:
        lines.append(f"{lab:<20}{sum(1 for n in names if vendor.get(n) == lab):>8}"
                     f"{sum(1 for n in names if ours_label[n] == lab):>8}"
                     f"{sum(1 for n in regress if ours_label[n] == lab):>28}")
    missing = sum(1 for n in names if n not in vendor)
    if missing:
        lines.append(f"{'(no vendor outcome)':<20}{missing:>8}")
    return "\n".join(lines)


def failure_rows(ours: dict[str, dict], vendor: dict[str, str], known: dict[str, str],
                 cases: dict[str, NodeCase]) -> list[str]:
    rows = []
    for n in sorted(ours):
        if vendor.get(n) == "pass" and ours[n]["class"] != "pass":
            r = ours[n]
            why = " ".join(x for x in (r.get("code", ""), r.get("error", "")) if x)
            rows.append(f"{n} [{cases[n].op if n in cases else '?'}] {outcome_label(r)}: {why}"
                        + (f" || log: {r['log']}" if r.get("log") else "")
                        + (f" || known: {known[n]}" if n in known else " || NEW"))
    return rows


def agreement(ours: dict[str, dict], vendor: dict[str, dict], ours_dir: Path,
              vendor_dir_: Path) -> dict[str, str | None]:
    """For each case that ran on both backends: None when qnnemu's outputs match the vendor's
    (the same criterion, the vendor's outputs taking onnx's place), else the first mismatch."""
    out: dict[str, str | None] = {}
    for name in sorted(ours):
        a, b = ours_dir / f"{name}.pkl", vendor_dir_ / f"{name}.pkl"
        if name in vendor and a.exists() and b.exists():
            with open(a, "rb") as fa, open(b, "rb") as fb:
                out[name] = outputs_match(pickle.load(fa), pickle.load(fb), "vendor")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "worker":
        return worker_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    p.add_argument("--cases", nargs="*", help="case names (default: every case)")
    p.add_argument("--ops", nargs="*", help="only the cases of these ops")
    p.add_argument("--sample", type=int, help="a stratified sample of this many cases (as the test takes)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes per backend (default 2)")
    p.add_argument("--case-timeout", type=float, default=CASE_TIMEOUT)
    p.add_argument("--write-outcomes", action="store_true",
                   help=f"write the vendor outcomes to {OUTCOMES_PATH.relative_to(ROOT)} (needs every case)")
    p.add_argument("--update-known-failures", action="store_true",
                   help=f"bring {KNOWN_FAILURES_PATH.relative_to(ROOT)} up to date with the cases run on qnnemu")
    p.add_argument("--details", action="store_true", help="print every case's outcome on each backend")
    p.add_argument("--json", type=Path, help="write every outcome record here")
    a = p.parse_args(argv)

    t0 = time.perf_counter()
    cases = generate_cases()
    names = sorted(cases)
    if a.cases:
        unknown = [n for n in a.cases if n not in cases]
        if unknown:
            p.error(f"unknown cases: {unknown}")
        names = sorted(a.cases)
    if a.ops:
        names = [n for n in names if cases[n].op in a.ops]
    if a.sample is not None:
        names = stratified_sample({n: cases[n].op for n in names}, a.sample)
    if a.write_outcomes and (names != sorted(cases) or "vendor" not in a.backends):
        p.error("--write-outcomes runs the vendor on every case: no --cases/--ops/--sample, vendor in --backends")
    print(f"{len(names)} cases generated in {time.perf_counter() - t0:.1f} s "
          f"(onnx {versions()['onnx']}); provider options {PROVIDER_OPTIONS}", flush=True)

    results: dict[str, dict[str, dict]] = {}
    outputs = tempfile.TemporaryDirectory(prefix="onnx-node-outputs-")
    for backend in a.backends:
        t = time.perf_counter()
        (Path(outputs.name) / backend).mkdir()
        results[backend] = run_cases(cases, backend, names, jobs=a.jobs, case_timeout=a.case_timeout,
                                     outputs_dir=Path(outputs.name) / backend)
        print(f"{backend}: {len(names)} cases in {time.perf_counter() - t:.1f} s", flush=True)
    agree = (agreement(results["ours"], results["vendor"], Path(outputs.name) / "ours", Path(outputs.name) / "vendor")
             if len(results) == 2 else {})
    outputs.cleanup()

    known = load_known_failures() if KNOWN_FAILURES_PATH.exists() else {}
    if "vendor" in results:
        vendor = {n: outcome_label(r) for n, r in results["vendor"].items()}
        source = "run now"
    else:
        data = load_outcomes()["cases"] if OUTCOMES_PATH.exists() else {}
        vendor = {n: data[n]["vendor"] for n in names if n in data}
        source = f"from {OUTCOMES_PATH.relative_to(ROOT)}"
    if a.write_outcomes:
        write_document(OUTCOMES_PATH, outcomes_document(cases, results["vendor"]))
        print(f"wrote {OUTCOMES_PATH.relative_to(ROOT)} ({len(names)} cases)")
    if a.update_known_failures and "ours" in results:
        doc = load_known_failures_document() if KNOWN_FAILURES_PATH.exists() else {"causes": {}, "cases": {}}
        write_document(KNOWN_FAILURES_PATH, updated_known_failures(doc, results["ours"], vendor))
        known = load_known_failures()
        print(f"updated {KNOWN_FAILURES_PATH.relative_to(ROOT)} ({len(known)} cases)")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    if a.details:
        for n in names:
            print(n, cases[n].op, *(f"{b}={outcome_label(results[b][n])}:{results[b][n].get('code', '')}:"
                                    f"{results[b][n].get('error', '')}|{results[b][n].get('log', '')}"
                                    for b in results))
    if "ours" not in results:
        return 0
    ours = results["ours"]
    print(f"\nvendor outcomes {source}\n")
    print(counts_table(ours, vendor, known))
    rows = failure_rows(ours, vendor, known, cases)
    if rows:
        print("\nvendor pass & qnnemu fail:")
        for r in rows:
            print("  " + r)
    if agree:
        differ = {n: why for n, why in agree.items() if why}
        print(f"\nran on both backends: {len(agree)}; qnnemu's outputs match the vendor's: "
              f"{len(agree) - len(differ)}; differ: {len(differ)}")
        for n, why in differ.items():
            print(f"  {n} [{cases[n].op}] qnnemu {outcome_label(ours[n])}, vendor {vendor[n]}: {why}")
    new = [n for n in ours if vendor.get(n) == "pass" and ours[n]["class"] != "pass" and n not in known]
    crashes = [n for n in ours if ours[n]["class"] in ("crash", "timeout") and n not in known]
    return 1 if new or crashes else 0


if __name__ == "__main__":
    sys.exit(main())
