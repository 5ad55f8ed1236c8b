"""Measures the HTP backend's op support (QnnBackend_validateOpConfig, QnnGraph_addNode,
QnnGraph_finalize; QNN HTP backend documentation, "QNN HTP Supported Operations") on the vendor's
x86-64 libQnnHtp.so and writes it as data: qnnemu/htp/op_support.json.

    python3 tools/probe_op_support.py                 # measure every op on every arch, write the json
    python3 tools/probe_op_support.py --ops Reshape ElementWiseAdd --archs 73 --out /tmp/x.json
    python3 tools/probe_op_support.py --self-check    # every template passes qnnemu's own check

For every op type qnnemu registers (qnnemu.ops.REGISTRY), its configuration template
(tools/op_support_cases.py) is built in every measured data type (``DTYPES``; Cast, Convert,
Quantize and Dequantize: every input x output pair) at every rank the op has a form of, and each
configuration goes

1. through ``backendValidateOpConfig`` on tensors that were never created (as ONNX Runtime's QNN
   EP asks before it builds a graph), and
2. through ``tensorCreateGraphTensor`` + ``graphAddNode`` + ``graphFinalize`` as a one-node graph
   (its own graph; the vendor's graphAddNode checks little, its finalize creates the op).

Every arch (``ARCHS``: the reference SoC of each, qnnemu.htp.soc) runs in its own worker
subprocess: the vendor's SoC setting is process-wide. A worker reports every case when it starts
and ends, so a configuration that crashes the vendor's process costs only itself (recorded as
``crash``) and a new worker continues with the rest.

When the vendor refuses a configuration for its data types, its log lists the data type sets it
takes ("I/O datatype sets" per precision configuration): the worker keeps them (only the data
types, no text), and a second pass builds every listed set at the op's canonical rank to confirm
that the vendor takes it.

Output (``--out``, default qnnemu/htp/op_support.json; measured data, no vendor files), per op
and arch:

- ``sets``: the data type sets the vendor listed when it refused a data type set, each
  ``"IN,IN->OUT"`` (inputs by position; a variadic input once); ``sets_refused_here``: listed
  ones its validation still refused in the template's configuration (e.g. a quantized Lstm set
  that wants its optional inputs present);
- ``validate``: ``{"<sig>": {"<rank>": kind}}`` for the sweep's configurations the vendor's
  validation refused (kind ``dtype``, ``rank``, ``unknown-op`` or ``other``); ``accepted``: the sweep's
  signatures it accepted at some rank, each with those ranks;
- ``finalize``: ``{"<sig>": {"<rank>": kind}}`` for those whose one-node graph failed
  (graphAddNode: kind ``add``; graphFinalize: ``unknown-op`` (no such op on the HTP),
  ``create`` (the op could not be created), ``rank`` or ``other``; crash: ``crash``);
  ``finalized``: the signatures whose graph finalized, with those ranks;
  ``finalize_shape_dependent``: graph failures (at a rank some configuration of the op finalized
  at) that went away when the same data types were built in other shapes (``ALT`` in
  tools/op_support_cases.py) -- not refused;
- and per arch (``tensors``): per data type and tensor type, the tensorCreateGraphTensor code
  when the vendor refuses it.

An arch whose entry is the same as an earlier arch's holds ``"=<arch>"``. The probe takes ~12
minutes on 2 cores (``--jobs``); qnnemu/htp/op_support.py reads the data.
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

import numpy as np  # noqa: E402
from op_support_cases import DTYPES, PAIR_OPS, TEMPLATES, VARIANT_DTYPES, VARIANTS, canonical_rank, qnn_dtype, resolve  # noqa: E402

OUT_PATH = ROOT / "qnnemu" / "htp" / "op_support.json"
# arch -> the SoC model of the arch's reference SoC (qnnemu.htp.soc.soc_for_arch)
ARCHS = (68, 69, 73, 75, 79, 81)
PAIR_RANK_SWEEP = (("FLOAT_32", "FLOAT_16"), ("FLOAT_16", "FLOAT_32"), ("FLOAT_32", "UFIXED_POINT_8"),
                   ("UFIXED_POINT_8", "FLOAT_32"), ("INT_32", "FLOAT_32"), ("FLOAT_32", "INT_32"))
CASE_TIMEOUT = 60.0


# ---------------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------------

def sig_text(sig) -> str:
    ins, outs = sig
    return ",".join(ins) + "->" + ",".join(outs)


def template_of(case: dict):
    if case.get("variant") is None:
        return TEMPLATES[case["op"]][0](case["rank"])
    return VARIANTS[case["op"]][case["variant"]](case["rank"])


def config_of(case: dict):
    """The case's configuration (with ``"alt"``: in the alternative shapes)."""
    import op_support_cases
    op_support_cases.ALT = int(case.get("alt") or 0)
    try:
        return resolve(case["op"], template_of(case), case["x"], case.get("y"), case.get("overrides"))
    finally:
        op_support_cases.ALT = 0


def sweep_cases(op: str, dtypes=DTYPES, canonical_only: bool = False) -> list[dict]:
    """The first pass's cases of ``op``: every data type (pair) at every rank."""
    fn, ranks = TEMPLATES[op]
    cases = []
    canon = canonical_rank(op)
    for r in ranks:
        if fn(r) is None or (canonical_only and r != canon):
            continue
        if op in PAIR_OPS:
            pairs = ([(x, y) for x in dtypes for y in dtypes] if r == canon else
                     [p for p in PAIR_RANK_SWEEP if p[0] in dtypes and p[1] in dtypes])
        else:
            pairs = [(x, None) for x in dtypes]
        for x, y in pairs:
            cases.append({"op": op, "rank": r, "x": x, "y": y})
    for v in range(len(VARIANTS.get(op, ()))):
        for x in VARIANT_DTYPES:
            if x in dtypes:
                cases.append({"op": op, "rank": canon, "x": x, "y": None, "variant": v})
    return cases


def set_cases(base: dict, sets: list) -> list[dict]:
    """The second pass: each listed data type set in the configuration of case ``base`` (at the
    op's canonical rank): each tensor takes the set's type of its position (a variadic last input
    its listed type); sets listing fewer outputs than the template has are left out."""
    t = template_of(base)
    out = []
    for s in sets:
        ins, outs = s.split("->")
        ins, outs = ins.split(","), outs.split(",")
        if len(outs) != len(t.outputs) or not ins:
            continue
        over = [ins[k] if k < len(ins) else ins[-1] for k in range(len(t.inputs))]
        x = next((d for d, i in zip(over, t.inputs) if i is not None and i.role == "x"), over[0])
        out.append({**base, "x": x, "y": outs[0], "overrides": over + outs, "set": s})
    return out


# ---------------------------------------------------------------------------------------------
# the worker: one backend library, one device (arch), many cases
# ---------------------------------------------------------------------------------------------

_SETS = re.compile(r"Supported I/O datatype sets for the configuration: (\S+)(.*)", re.S)
_SET_ITEM = re.compile(r"^\s*(\d+):\s*$")
_IO = re.compile(r"^\s*(in|out)\[(\d+)\]:QNN_DATATYPE_(\w+)\s*$")


def parse_sets(messages: list[str]) -> list[str]:
    """The data type sets (``"IN,IN->OUT"``) a refusal's log lists."""
    found = []
    for m in messages:
        hit = _SETS.search(m)
        if not hit:
            continue
        cur: dict | None = None
        for line in hit.group(2).splitlines():
            if _SET_ITEM.match(line):
                if cur:
                    found.append(cur)
                cur = {"in": {}, "out": {}}
                continue
            io = _IO.match(line)
            if io and cur is not None:
                cur[io.group(1)][int(io.group(2))] = io.group(3)
        if cur:
            found.append(cur)
    out = []
    for s in found:
        ins = [s["in"][k] for k in sorted(s["in"])]
        outs = [s["out"][k] for k in sorted(s["out"])]
        out.append(",".join(ins) + "->" + ",".join(outs))
    return list(dict.fromkeys(out))


def refusal_kind(messages: list[str]) -> str:
    text = "\n".join(messages)
    if "datatype" in text and ("Unsupported input/output" in text or "Supported I/O" in text):
        return "dtype"
    if re.search(r"incorrect Rank|rank", text, re.I):
        return "rank"
    if "OpValidator not found" in text or "no properties registered" in text:
        return "unknown-op"
    if "could not create op" in text:
        return "create"
    return "other"


def first_reason(messages: list[str]) -> str:
    """The first error line that is not the generic tail (for the local raw log only)."""
    for m in messages:
        if any(s in m for s in ("GraphHtpSettings", "validateOpConfig failed", "Failed to validate op",
                                "Please refer")):
            continue
        return re.sub(r"\s+", " ", m.strip())[:300]
    return ""


class Worker:
    def __init__(self, library: str | None, soc: int):
        from qnnemu.client import Backend, ffi, htp_device_config
        self.ffi = ffi
        self.messages: list[str] = []

        class _Collect(logging.Handler):
            def emit(inner, record):  # noqa: N805
                self.messages.append(record.getMessage())

        logger = logging.getLogger("qnnemu.client")
        logger.handlers[:] = [_Collect(logging.DEBUG)]
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        # A refusal's list of data type sets can be long (Lstm: 24 inputs per set): format the
        # log messages into a larger buffer than qnnemu.client's.
        from qnnemu.client import cabi as client  # the module whose callback Backend installs

        @ffi.callback("QnnLog_Callback_t")
        def callback(fmt, level, timestamp, args):
            try:
                buf = ffi.new("char[]", 1 << 16)
                client._libc.vsnprintf(buf, 1 << 16, fmt, args)
                self.messages.append(ffi.string(buf).decode("utf-8", "replace").rstrip("\n"))
            except Exception:  # noqa: BLE001 - never into C
                pass

        self._callback = callback
        client._log_callback = callback
        cfg = [htp_device_config("SOC", socModel=soc)] if soc else []
        self.be = Backend(library, log_level="error", device_configs=cfg)
        self.ctx = None
        self.graphs = 0
        self.last_error = ""

    # -- structs ----------------------------------------------------------------------------
    def _struct(self, name: str, t, type_: int, keep: list):
        from qnnemu.headers import Q
        ffi = self.ffi
        s = ffi.new("Qnn_Tensor_t *")
        s.version = Q.QNN_TENSOR_VERSION_2
        v = s.v2
        cname = ffi.new("char[]", name.encode())
        dims = ffi.new("uint32_t[]", list(t.shape)) if t.shape else ffi.NULL
        keep += [s, cname, dims]
        v.id = 0
        v.name = cname
        v.type = type_
        v.dataFormat = Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER
        v.dataType = qnn_dtype(t.dtype)
        if t.quant is None:
            v.quantizeParams.encodingDefinition = Q.QNN_DEFINITION_UNDEFINED
            v.quantizeParams.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_UNDEFINED
        else:
            v.quantizeParams.encodingDefinition = Q.QNN_DEFINITION_DEFINED
            v.quantizeParams.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET
            v.quantizeParams.scaleOffsetEncoding.scale = t.quant[0]
            v.quantizeParams.scaleOffsetEncoding.offset = t.quant[1]
        v.rank = len(t.shape)
        v.dimensions = dims
        v.memType = Q.QNN_TENSORMEMTYPE_RAW
        if t.data is not None:
            buf = ffi.from_buffer(t.data)
            keep += [t.data, buf]
            v.clientBuf.data = buf
            v.clientBuf.dataSize = t.data.nbytes
        else:
            v.clientBuf.data = ffi.NULL
            v.clientBuf.dataSize = 0
        v.isDynamicDimensions = ffi.NULL
        v.sparseParams.type = Q.QNN_SPARSE_LAYOUT_UNDEFINED
        v.isProduced = 0
        return s

    def _op_config(self, cfg, ins, outs, params, keep: list):
        from qnnemu.client.opconfig import scalar_param
        from qnnemu.headers import Q
        ffi = self.ffi
        cparams = ffi.new("Qnn_Param_t[]", max(len(params), 1))
        keep.append(cparams)
        for k, (pname, value) in enumerate(params.items()):
            p = cparams[k]
            pn = ffi.new("char[]", pname.encode())
            keep.append(pn)
            p.name = pn
            if isinstance(value, tuple):           # (struct) of a created/never-created static tensor
                p.paramType = Q.QNN_PARAMTYPE_TENSOR
                p.tensorParam = value[0][0]
            else:
                qtype, member, val = scalar_param(value)
                p.paramType = Q.QNN_PARAMTYPE_SCALAR
                p.scalarParam.dataType = qtype
                setattr(p.scalarParam, member, val)
        cin = ffi.new("Qnn_Tensor_t[]", max(len(ins), 1))
        for k, s in enumerate(ins):
            cin[k] = s[0]
        cout = ffi.new("Qnn_Tensor_t[]", max(len(outs), 1))
        for k, s in enumerate(outs):
            cout[k] = s[0]
        names = [ffi.new("char[]", b) for b in (b"node", b"qti.aisw", cfg.op.encode())]
        keep += [cin, cout, *names]
        op = ffi.new("Qnn_OpConfig_t *")
        keep.append(op)
        op.version = Q.QNN_OPCONFIG_VERSION_1
        op.v1.name, op.v1.packageName, op.v1.typeName = names
        op.v1.numOfParams = len(params)
        op.v1.params = cparams if params else ffi.NULL
        op.v1.numOfInputs = len(ins)
        op.v1.inputTensors = cin if ins else ffi.NULL
        op.v1.numOfOutputs = len(outs)
        op.v1.outputTensors = cout
        return op

    def _param_structs(self, cfg, keep: list, create=None) -> dict:
        from op_support_cases import Tensor

        from qnnemu.headers import Q
        out = {}
        for name, value in cfg.params.items():
            if isinstance(value, np.ndarray) and value.ndim >= 1:
                from qnnemu.core import dtypes
                t = Tensor(value.shape, dtypes.name(dtypes.from_numpy(value.dtype)).removeprefix("QNN_DATATYPE_"),
                           None, np.ascontiguousarray(value))
                s = self._struct(f"p_{name}", t, Q.QNN_TENSOR_TYPE_STATIC, keep)
                if create is not None:
                    create(s)
                out[name] = (s,)
            else:
                out[name] = value
        return out

    def _call(self, function: str, *args) -> int:
        from qnnemu.client import QnnCallError
        try:
            self.be.call(function, *args)
            return 0
        except QnnCallError as e:
            self.last_error = e.message     # the backend's errorGetMessage text (qnnemu's: the rule)
            return e.code

    # -- one case ---------------------------------------------------------------------------
    def tensor_probe(self, case: dict) -> dict:
        """tensorCreateGraphTensor of one tensor of a data type and tensor type."""
        from op_support_cases import QUANT, Tensor

        from qnnemu.headers import Q
        d, type_ = case["dtype"], int(getattr(Q, f"QNN_TENSOR_TYPE_{case['type']}"))
        npd = None
        try:
            from qnnemu.core import dtypes
            npd = dtypes.numpy_dtype(qnn_dtype(d))
        except Exception:  # noqa: BLE001 - 4-bit types have no numpy storage of their own
            npd = np.uint8
        data = np.zeros((2, 4), npd) if case["type"] == "STATIC" else None
        if data is not None and d.endswith("_4"):
            data = np.zeros((2, 2), np.uint8)   # two 4-bit values per byte
        t = Tensor((2, 4), d, QUANT.get(d, (0.05, 0)) if "FIXED" in d else None, data)
        if self.ctx is None:
            self.ctx = self.be.context()
        self.graphs += 1
        from qnnemu.client import QnnCallError
        try:
            g = self.ctx.graph(f"t{self.graphs}")
        except QnnCallError as e:
            return {"graph": e.code}
        keep: list = []
        return {"code": self._call("tensorCreateGraphTensor", g.handle, self._struct("t", t, type_, keep))}

    def run(self, case: dict) -> dict:
        from qnnemu.headers import Q
        if "dtype" in case:
            return self.tensor_probe(case)
        try:
            cfg = config_of(case)
        except Exception as e:
            if not case.get("alt"):
                raise
            return {"error": f"{type(e).__name__}: {e}"}
        rec = {"sig": sig_text(cfg.signature()), "entry": cfg.entry,
               "rank": max((len(t.shape) for t in cfg.inputs + cfg.outputs if not t.null), default=0)}
        # 1. backendValidateOpConfig on never-created tensors
        keep: list = []
        ins = [self._struct(f"in{k}", t, Q.QNN_TENSOR_TYPE_NULL if t.null else
                            (Q.QNN_TENSOR_TYPE_STATIC if t.data is not None else Q.QNN_TENSOR_TYPE_APP_WRITE), keep)
               for k, t in enumerate(cfg.inputs)]
        outs = [self._struct(f"out{k}", t, Q.QNN_TENSOR_TYPE_APP_READ, keep) for k, t in enumerate(cfg.outputs)]
        params = self._param_structs(cfg, keep)
        self.messages.clear()
        code = self._call("backendValidateOpConfig", self.be.handle, self._op_config(cfg, ins, outs, params, keep))
        rec["validate"] = code
        if code:
            rec["v_kind"] = refusal_kind(self.messages)
            rec["v_reason"] = first_reason(self.messages) or self.last_error
            sets = parse_sets(self.messages)
            if sets:
                rec["sets"] = sets
        # 2. the one-node graph
        if self.ctx is None or self.graphs >= 40:
            if self.ctx is not None:
                self.ctx.free()
                self.be._contexts.remove(self.ctx)
            self.ctx = self.be.context()
            self.graphs = 0
        self.graphs += 1
        from qnnemu.client import QnnCallError
        try:
            g = self.ctx.graph(f"g{self.graphs}")
        except QnnCallError as e:
            rec["graph"] = e.code
            return rec
        keep = []
        self.messages.clear()

        def create(s):
            code = self._call("tensorCreateGraphTensor", g.handle, s)
            if code:
                raise _Stage("tensor", code)

        try:
            gin = []
            for k, t in enumerate(cfg.inputs):
                type_ = (Q.QNN_TENSOR_TYPE_NULL if t.null else Q.QNN_TENSOR_TYPE_STATIC if t.data is not None
                         else Q.QNN_TENSOR_TYPE_APP_WRITE)
                s = self._struct(f"in{k}", t, type_, keep)
                create(s)
                gin.append(s)
            gout = []
            for k, t in enumerate(cfg.outputs):
                s = self._struct(f"out{k}", t, Q.QNN_TENSOR_TYPE_APP_READ, keep)
                create(s)
                gout.append(s)
            params = self._param_structs(cfg, keep, create)
            code = self._call("graphAddNode", g.handle, self._op_config(cfg, gin, gout, params, keep))
            if code:
                raise _Stage("add", code)
            self.messages.clear()
            code = self._call("graphFinalize", g.handle, self.ffi.NULL, self.ffi.NULL)
            if code:
                raise _Stage("finalize", code)
        except _Stage as s:
            rec["stage"], rec["code"] = s.stage, s.code
            rec["g_kind"] = refusal_kind(self.messages) if s.stage == "finalize" else s.stage
            rec["g_reason"] = first_reason(self.messages) or self.last_error
        return rec


class _Stage(Exception):
    def __init__(self, stage: str, code: int):
        super().__init__(stage)
        self.stage, self.code = stage, code


def worker_main(argv: list[str]) -> int:
    library, soc, cases_file, results_file = argv
    cases = json.loads(Path(cases_file).read_text())
    done = set()
    if Path(results_file).exists():
        for line in Path(results_file).read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            done.add(ev["i"])
    w = Worker(None if library == "ours" else library, int(soc))
    with open(results_file, "a") as out:
        for i, case in enumerate(cases):
            if i in done:
                continue
            out.write(json.dumps({"i": i, "start": True}) + "\n")
            out.flush()
            rec = w.run(case)
            out.write(json.dumps({"i": i, **rec}) + "\n")
            out.flush()
    return 0


# ---------------------------------------------------------------------------------------------
# the parent: workers per arch, crash isolation
# ---------------------------------------------------------------------------------------------

def run_cases(library: str, soc: int, cases: list[dict], env: dict, tag: str, log=print) -> list[dict]:
    """Runs ``cases`` in worker subprocesses (one at a time, restarted after a crash); returns
    one record per case (``{"crash": signal}`` for one that killed its worker)."""
    with tempfile.TemporaryDirectory(prefix=f"op-support-{tag}-") as tmp:
        cases_file, results_file = Path(tmp) / "cases.json", Path(tmp) / "results.jsonl"
        cases_file.write_text(json.dumps(cases))
        results: dict[int, dict] = {}
        crashed: set[int] = set()
        while True:
            proc = subprocess.run([sys.executable, __file__, "worker", library, str(soc), str(cases_file),
                                   str(results_file)], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=3600)
            started = None
            for line in results_file.read_text().splitlines():
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("start"):
                    started = ev["i"]
                else:
                    results[ev["i"]] = ev
                    started = None
            if proc.returncode == 0 and started is None:
                break
            if started is None or started in crashed:
                raise RuntimeError(f"{tag}: worker failed ({proc.returncode}) without a case in progress")
            crashed.add(started)
            log(f"  {tag}: case {started} {cases[started]} crashed the worker ({proc.returncode})")
            with open(results_file, "a") as f:
                f.write(json.dumps({"i": started, "crash": proc.returncode}) + "\n")
        return [results[i] for i in range(len(cases))]


def vendor_env() -> tuple[str, dict]:
    import onnxruntime_qnn
    d = Path(onnxruntime_qnn.__file__).resolve().parent
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(d), env.get("LD_LIBRARY_PATH", "")) if p)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return str(d / "libQnnHtp.so"), env


def arch_soc(arch: int) -> int:
    from qnnemu.htp import soc
    return soc.soc_for_arch(arch).soc_model


TENSOR_DTYPES = DTYPES + ("FLOAT_64", "SFIXED_POINT_4", "UFIXED_POINT_4")
TENSOR_TYPES = ("APP_WRITE", "APP_READ", "NATIVE", "STATIC")


def measure_arch(library: str, arch: int, ops: list[str], env: dict, raw: list, log=print,
                 dtypes=DTYPES, canonical_only: bool = False) -> tuple[dict, dict]:
    """Both passes and the tensor probe on one arch; returns (entry name -> the arch's entry (see
    the module docstring), data type -> {tensor type: code} of the refused tensors)."""
    soc = arch_soc(arch)
    t0 = time.perf_counter()
    cases = [c for op in ops for c in sweep_cases(op, dtypes, canonical_only)]
    tensor_cases = [{"dtype": d, "type": t} for d in TENSOR_DTYPES for t in TENSOR_TYPES]
    recs = run_cases(library, soc, cases + tensor_cases, env, f"v{arch}", log)
    recs, tensor_recs = recs[:len(cases)], recs[len(cases):]
    log(f"v{arch}: {len(cases)} sweep cases in {time.perf_counter() - t0:.0f} s")
    entries = [config_of(c).entry for c in cases]
    listed: dict[str, list] = collections.defaultdict(list)
    base: dict[str, dict] = {}
    for c, e, r in zip(cases, entries, recs):
        if c["rank"] == canonical_rank(c["op"]) and "overrides" not in c:
            base.setdefault(e, {k: v for k, v in c.items() if k in ("op", "rank", "variant")})
        for s in r.get("sets", ()):
            if s not in listed[e]:
                listed[e].append(s)
    # Graph failures in ranks some configuration finalized at: again in the alternative shapes.
    finalized_ranks = collections.defaultdict(set)
    for _c, e, r in zip(cases, entries, recs):
        if "stage" not in r and "graph" not in r and "crash" not in r:
            finalized_ranks[e].add(r["rank"])
    alt_of = [(c, e, r) for c, e, r in zip(cases, entries, recs)
              if r.get("stage") == "finalize" and r["rank"] in finalized_ranks[e]]
    alt = [{**c, "alt": k} for c, _, _ in alt_of for k in (1, 2)]
    alt_entries = [e for _, e, _ in alt_of for _ in (1, 2)]
    alt_recs = run_cases(library, soc, alt, env, f"v{arch}-alt", log) if alt else []
    # The primary case's signature and rank: the alternative shapes keep both (a template the
    # alternative shapes do not fit records an error: not finalized).
    primary = [r for _, _, r in alt_of for _ in (1, 2)]
    shape_dependent = {(e, r["sig"], r["rank"]) for e, r, r0 in zip(alt_entries, primary, alt_recs)
                       if "stage" not in r0 and "graph" not in r0 and "crash" not in r0 and "error" not in r0
                       and r0.get("sig") == r["sig"] and r0.get("rank") == r["rank"]}
    log(f"v{arch}: {len(alt)} graph failures again in other shapes: {len(shape_dependent)} went away")
    t1 = time.perf_counter()
    extra = [c for e in listed if e in base for c in set_cases(base[e], listed[e])]
    extra_recs = run_cases(library, soc, extra, env, f"v{arch}-sets", log) if extra else []
    log(f"v{arch}: {len(extra)} listed sets in {time.perf_counter() - t1:.0f} s")
    extra_entries = [config_of(c).entry for c in extra]
    out = {}
    for e in dict.fromkeys(entries):
        out[e] = summarize([(c, r) for c, x, r in zip(cases, entries, recs) if x == e],
                           [(c, r) for c, x, r in zip(extra, extra_entries, extra_recs) if x == e], listed.get(e, []),
                           {(s, rk) for x, s, rk in shape_dependent if x == e})
    for c, e, r in zip(cases + extra + alt, entries + extra_entries + alt_entries, recs + extra_recs + alt_recs):
        raw.append({"arch": arch, "entry": e, **c, **r})
    tensors: dict = collections.defaultdict(dict)
    for c, r in zip(tensor_cases, tensor_recs):
        code = r.get("code", r.get("graph", -1)) if "crash" not in r else "crash"
        if code:
            tensors[c["dtype"]][c["type"]] = code
    return out, dict(tensors)


def summarize(sweep: list, sets: list, listed: list, shape_dependent: set = frozenset()) -> dict:
    """One entry's data on one arch (see the module docstring); ``shape_dependent``: the
    (signature, rank) graph failures that went away in the alternative shapes."""
    validate: dict = collections.defaultdict(dict)
    finalize: dict = collections.defaultdict(dict)
    accepted: dict = collections.defaultdict(list)
    finalized: dict = collections.defaultdict(list)
    shapes: dict = {}
    for c, r in sweep + sets:
        if "crash" in r:
            cfg = config_of(c)
            rank = max((len(t.shape) for t in cfg.inputs + cfg.outputs if not t.null), default=0)
            finalize[sig_text(cfg.signature())][str(rank)] = "crash"
            continue
        sig, rank = r["sig"], str(r["rank"])
        if r["validate"]:
            validate[sig][rank] = r.get("v_kind", "other")
        elif int(rank) not in accepted[sig]:
            accepted[sig].append(int(rank))
        if r.get("stage") == "finalize" and (sig, int(rank)) in shape_dependent:
            shapes.setdefault(sig, []).append(int(rank))
        elif r.get("stage") in ("add", "finalize"):
            finalize[sig][rank] = r["g_kind"] if r["stage"] == "finalize" else "add"
        elif "stage" not in r and "graph" not in r and int(rank) not in finalized[sig]:
            finalized[sig].append(int(rank))
    # Every listed set counts (the vendor's own list); the ones its validation still refused in
    # this configuration (quantization or absent inputs the set does not allow) are noted.
    entry: dict = {"sets": list(listed)}
    refused = [c["set"] for c, r in sets if "crash" in r or r["validate"]]
    if refused:
        entry["sets_refused_here"] = refused
    entry["accepted"] = {s: sorted(v) for s, v in sorted(accepted.items())}
    entry["validate"] = {s: dict(sorted(v.items(), key=lambda kv: int(kv[0]))) for s, v in sorted(validate.items())}
    entry["finalize"] = {s: dict(sorted(v.items(), key=lambda kv: int(kv[0]))) for s, v in sorted(finalize.items())}
    entry["finalized"] = {s: sorted(v) for s, v in sorted(finalized.items())}
    if shapes:
        entry["finalize_shape_dependent"] = {s: sorted(set(v)) for s, v in sorted(shapes.items())}
    return entry


# ---------------------------------------------------------------------------------------------
# qnnemu against the data: the same cases on our library
# ---------------------------------------------------------------------------------------------

def vendor_verdicts(doc: dict, arch: int, entry: str, sig: str, rank: int) -> tuple[bool | None, bool | None]:
    """(validation accepted?, one-node graph finalized?) as recorded for the vendor (None: not
    recorded, e.g. a tensor the vendor refused at creation or a crash)."""
    per_arch = doc["ops"].get(entry, {})
    raw = per_arch.get(str(arch))
    while isinstance(raw, str) and raw.startswith("="):
        raw = per_arch.get(raw[1:])
    if raw is None:
        return None, None
    v = True if rank in raw["accepted"].get(sig, ()) else False if str(rank) in raw["validate"].get(sig, {}) else None
    g = (True if rank in raw.get("finalized", {}).get(sig, ()) else
         False if str(rank) in raw["finalize"].get(sig, {}) and raw["finalize"][sig][str(rank)] != "crash" else None)
    return v, g


def sample_cases(ops: list[str], size: int | None, seed: int = 0) -> list[dict]:
    """Every sweep case of ``ops`` (``size`` None) or a deterministic sample of ``size`` of them,
    spread over the ops."""
    import random
    cases = [c for op in ops for c in sweep_cases(op)]
    if size is None or size >= len(cases):
        return cases
    rng = random.Random(seed)
    by_op: dict[str, list] = collections.defaultdict(list)
    for c in cases:
        by_op[c["op"]].append(c)
    for v in by_op.values():
        rng.shuffle(v)
    picked: list = []
    depth = 0
    while len(picked) < size:
        for op in sorted(by_op):
            if depth < len(by_op[op]) and len(picked) < size:
                picked.append(by_op[op][depth])
        depth += 1
    return picked


def check_ours(arch: int, cases: list[dict], doc: dict) -> dict:
    """Runs ``cases`` on our library (in this process: an SoC device of ``arch``) and compares
    each with the vendor's recorded verdicts. Returns counts and the mismatching cases:
    ``accepts`` (qnnemu takes what the vendor refused) and ``refuses`` (the opposite), for
    validation and for the one-node graph."""
    w = Worker(None, arch_soc(arch))
    out = {"arch": arch, "cases": len(cases), "compared": 0, "mismatches": []}
    try:
        for c in cases:
            r = w.run(c)
            if "dtype" in c:
                continue
            v, g = vendor_verdicts(doc, arch, r["entry"], r["sig"], r["rank"])
            ours_v, ours_g = r["validate"] == 0, "stage" not in r and "graph" not in r
            for stage, theirs, ours in (("validate", v, ours_v), ("graph", g, ours_g)):
                if theirs is None:
                    continue
                out["compared"] += 1
                if theirs != ours:
                    from qnnemu.htp.op_support import finalize_taken_despite_failure
                    lenient = (stage == "graph" and ours and
                               finalize_taken_despite_failure(r["entry"], arch, r["sig"], r["rank"]))
                    out["mismatches"].append({**c, "stage": stage, "entry": r["entry"], "sig": r["sig"],
                                              "rank": r["rank"], "vendor": theirs, "ours": ours, "lenient": lenient,
                                              "why": r.get("v_reason") if stage == "validate" else r.get("g_reason")})
    finally:
        w.be.free()
    return out


def vendor_versions(library: str, env: dict) -> dict:
    code = ("import json, sys; from qnnemu.client import Backend; be = Backend(sys.argv[1], log_level=None, "
            "device=False); print(json.dumps({'build_id': be.build_id, 'api': [list(be.api_version.core), "
            "list(be.api_version.backend)]})); be.free()")
    out = subprocess.run([sys.executable, "-c", code, library], env=env, capture_output=True, text=True, timeout=120)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    from importlib.metadata import version
    info["onnxruntime-qnn"] = version("onnxruntime-qnn")
    return info


def self_check() -> int:
    """Every template resolves (qnnemu's check accepts its float32 form) at every rank."""
    bad = 0
    for op, (fn, ranks) in sorted(TEMPLATES.items()):
        for r in ranks:
            t = fn(r)
            if t is None:
                continue
            try:
                resolve(op, t, "FLOAT_32", "FLOAT_32")
            except Exception as e:  # noqa: BLE001 - reported
                bad += 1
                print(f"{op} rank {r}: {type(e).__name__}: {e}")
    for op, fns in sorted(VARIANTS.items()):
        for v, fn in enumerate(fns):
            try:
                resolve(op, fn(canonical_rank(op)), "FLOAT_32", "FLOAT_32")
            except Exception as e:  # noqa: BLE001 - reported
                bad += 1
                print(f"{op} variant {v}: {type(e).__name__}: {e}")
    from qnnemu import ops
    missing = sorted(set(ops.REGISTRY) - set(TEMPLATES))
    if missing:
        print(f"ops without a template: {missing}")
    return 1 if bad or missing else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "worker":
        return worker_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", nargs="*", help="only these op types (default: every registered op)")
    p.add_argument("--archs", nargs="*", type=int, default=list(ARCHS))
    p.add_argument("--jobs", type=int, default=2, help="archs measured at once (default 2)")
    p.add_argument("--out", type=Path, default=OUT_PATH)
    p.add_argument("--raw", type=Path, help="also write every case's record here (local analysis)")
    p.add_argument("--dtypes", nargs="*", default=list(DTYPES), help="only these data types (quick looks)")
    p.add_argument("--canonical-only", action="store_true", help="only each op's canonical rank (quick looks)")
    p.add_argument("--self-check", action="store_true")
    p.add_argument("--summary", action="store_true", help="print the markdown table of docs/op-support.md")
    p.add_argument("--check-ours", action="store_true",
                   help="run the cases on qnnemu and compare with the data (--out is read, not written)")
    p.add_argument("--sample", type=int, help="--check-ours: a sample of this many cases per arch")
    p.add_argument("--json", type=Path, help="--check-ours: write the result here")
    a = p.parse_args(argv)
    if a.self_check:
        return self_check()
    if a.check_ours:
        return check_ours_main(a)
    if a.summary:
        print(summary_table())
        return 0
    from qnnemu import ops as qops
    ops = sorted(a.ops or qops.REGISTRY)
    library, env = vendor_env()
    t0 = time.perf_counter()
    results: dict[int, dict] = {}
    tensors: dict[int, dict] = {}
    raw: list = []
    lock = threading.Lock()
    pending = list(a.archs)

    failures: list = []

    def run():
        while True:
            with lock:
                if not pending or failures:
                    return
                arch = pending.pop(0)
            try:
                res, tens = measure_arch(library, arch, ops, env, raw, dtypes=a.dtypes,
                                         canonical_only=a.canonical_only)
            except BaseException as e:
                failures.append((arch, e))
                raise
            with lock:
                results[arch], tensors[arch] = res, tens

    threads = [threading.Thread(target=run) for _ in range(max(1, a.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        print(f"measuring failed on v{failures[0][0]}: {failures[0][1]!r}; nothing written", file=sys.stderr)
        return 1
    doc = {
        "about": ("Generated by tools/probe_op_support.py: per op type and HTP arch, what the vendor's x86-64 "
                  "libQnnHtp.so takes (backendValidateOpConfig on never-created tensors; tensorCreateGraphTensor, "
                  "graphAddNode and graphFinalize of a one-node graph) for the configurations of "
                  "tools/op_support_cases.py in every measured data type and rank. Measured data, no vendor files."),
        "vendor": vendor_versions(library, env),
        "archs": {str(arch): {"soc_model": arch_soc(arch)} for arch in sorted(results)},
        "dtypes": list(DTYPES),
        "tensors": {str(arch): tensors[arch] for arch in sorted(tensors)},
        "ops": {e: {str(arch): results[arch][e] for arch in sorted(results) if e in results[arch]}
                for e in sorted({e for r in results.values() for e in r})},
    }
    write_json(a.out, doc)
    if a.raw:
        a.raw.write_text("\n".join(json.dumps(r) for r in raw) + "\n")
    print(f"wrote {a.out} ({len(ops)} ops x {len(results)} archs) in {time.perf_counter() - t0:.0f} s")
    return 0


def check_ours_main(a) -> int:
    """--check-ours: every (or a sample of the) sweep case on qnnemu, per arch in a subprocess."""
    from qnnemu import ops as qops
    ops = sorted(a.ops or qops.REGISTRY)
    results = []
    for arch in a.archs:
        with tempfile.TemporaryDirectory(prefix="op-support-ours-") as tmp:
            out = Path(tmp) / "out.json"
            code = ("import json, sys; sys.path[:0] = [{root!r}, {tools!r}]; import probe_op_support as p; "
                    "doc = json.load(open({data!r})); cases = p.sample_cases({ops!r}, {n!r}); "
                    "json.dump(p.check_ours({arch}, cases, doc), open({out!r}, 'w'))").format(
                root=str(ROOT), tools=str(ROOT / "tools"), data=str(a.out), ops=ops, n=a.sample, arch=arch,
                out=str(out))
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
            proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            if proc.returncode != 0 or not out.exists():
                print(f"v{arch}: failed ({proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
                return 2
            res = json.loads(out.read_text())
        results.append(res)
        by = collections.Counter((m["stage"], "qnnemu accepts" if m["ours"] else "qnnemu refuses")
                                 for m in res["mismatches"])
        print(f"v{arch}: {res['cases']} cases, {res['compared']} verdicts compared, {len(res['mismatches'])} differ "
              f"{dict(by)}")
        refused = [m for m in res["mismatches"] if not m["ours"]]
        taken = [m for m in res["mismatches"] if m["ours"]]
        print(f"  qnnemu refuses what the vendor took: {len(refused)} "
              f"(validation {sum(m['stage'] == 'validate' for m in refused)}, "
              f"one-node graph {sum(m['stage'] == 'graph' for m in refused)}); "
              f"qnnemu takes what the vendor refused: {len(taken)} "
              f"({sum(bool(m['lenient']) for m in taken)} of them the shape-dependent leniency)")
        groups = collections.Counter((m["op"], m["stage"], (re.search(r"\[(QNNEMU-[^\]]+)\]", m.get("why") or "")
                                                            or [None, "?"])[1]) for m in refused)
        for (op, stage, rule), n in groups.most_common():
            print(f"    {n:5d}  {op} ({stage}): {rule}")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


def summary_table(arch: int = 73) -> str:
    """A markdown table of the data (docs/op-support.md): per op, on ``arch``, what validation
    takes (input 0's types, ranks) and what the other archs do differently."""
    from qnnemu.htp import op_support as o
    doc = o.data()
    lines = [f"| op | v{arch}: input 0 types validation takes | ranks | other archs |", "| --- | --- | --- | --- |"]
    held = o.held_types(arch)
    for name in sorted(doc["ops"]):
        sup = o.support(name, arch)
        if sup.unknown_op:
            types, ranks = "**not implemented** (no validator)", "-"
        else:
            firsts = {s[0][0] for s in sup.taken_sets() if s[0] and s[0][0] in held}
            types = o.describe_types(firsts) if firsts else "none"
            ranks = o.describe_ranks(sup.ranks_accepted).replace("ranks ", "").replace("rank ", "")
        notes = []
        for other in o.measured_archs():
            if other == arch:
                continue
            x = o.support(name, other)
            if x is None:
                continue
            if x.unknown_op != sup.unknown_op or set(x.accepted) != set(sup.accepted):
                gained = len(set(x.accepted) - set(sup.accepted))
                lost = len(set(sup.accepted) - set(x.accepted))
                notes.append(f"v{other}: validation takes {gained} more, {lost} fewer sets")
            fin = {(k, r) for k, v in x.finalize.items() for r, kind in v.items() if kind not in ("add", "crash")}
            fin0 = {(k, r) for k, v in sup.finalize.items() for r, kind in v.items() if kind not in ("add", "crash")}
            taken_fail = {(k, r) for k, r in fin - fin0 if r in x.accepted.get(k, ())}
            if taken_fail:
                notes.append(f"v{other}: {len(taken_fail)} validated configurations fail graphFinalize "
                             f"(e.g. {sorted(taken_fail)[0][0]} rank {sorted(taken_fail)[0][1]})")
            adds = {k for k, v in x.finalize.items() if "add" in v.values()} - \
                   {k for k, v in sup.finalize.items() if "add" in v.values()}
            if adds:
                notes.append(f"v{other}: graphAddNode refuses {len(adds)} more sets (e.g. {sorted(adds)[0]})")
        lines.append(f"| {name} | {types} | {ranks} | {'; '.join(dict.fromkeys(notes)) or 'same'} |")
    return "\n".join(lines)


def write_json(path: Path, doc: dict) -> None:
    """One line per op and arch (diffs stay readable)."""
    lines = ["{"]
    for key in ("about", "vendor", "archs", "dtypes", "tensors"):
        lines.append(f" {json.dumps(key)}: {json.dumps(doc[key])},")
    lines.append(' "ops": {')
    ops = list(doc["ops"].items())
    for i, (op, per_arch) in enumerate(ops):
        lines.append(f"  {json.dumps(op)}: {{")
        items = []
        for arch, entry in per_arch.items():
            # An arch whose entry equals an earlier arch's names it ("=68") instead.
            same = next((a for a, e in items if e == entry), None)
            items.append((arch, f"={same}" if same else entry))
        for j, (arch, entry) in enumerate(items):
            lines.append(f"   {json.dumps(arch)}: {json.dumps(entry, separators=(',', ':'))}"
                         + ("," if j < len(items) - 1 else ""))
        lines.append("  }" + ("," if i < len(ops) - 1 else ""))
    lines.append(" }")
    lines.append("}")
    Path(path).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
