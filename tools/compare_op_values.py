"""Executes the op support configurations (tools/op_support_cases.py) with deterministic data on
the vendor's x86-64 libQnnHtp.so and on qnnemu and compares the outputs (QnnGraph_execute of the
one-node graphs tools/probe_op_support.py measures; docs/op-support.md, "Plain integers").

    python3 tools/compare_op_values.py                     # the "plain" cases on v73
    python3 tools/compare_op_values.py --ops Relu Softmax --archs 73 75 --wide --all
    python3 tools/compare_op_values.py --json /tmp/values.json

Cases: every sweep case at the op's canonical rank whose one-node graph the vendor finalized on
the arch (qnnemu/htp/op_support.json); by default only those with a plain INT_*/UINT_*/BOOL_8
data tensor, and the conversions (Cast, Convert, Quantize, Dequantize) and logic ops
(``--all``: every one).  Data: float inputs uniform in [-3, 3], fixed-point inputs over their
whole code range, plain integers in [-5, 5] ([0, 5] unsigned; ``--wide``: the whole 8/16-bit
range, [-1000, 1000] for wider types), BOOL_8 0 / 1; static weights and biases random too;
integer index-like inputs (a fixed data type in the template: indices, positions, selectors) 0
or 1.  Each backend runs in its own worker subprocess per arch (the vendor's SoC setting is
process-wide), restarted after a case that kills it.

An output agrees when its values are within one code (integer and fixed-point outputs) or
within 1e-2 relative to the output's largest magnitude (float outputs).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

import numpy as np  # noqa: E402
from op_support_cases import FIXED, PAIR_OPS, qnn_dtype  # noqa: E402

PLAIN = ("INT_8", "UINT_8", "INT_16", "UINT_16", "INT_32", "UINT_32", "INT_64", "BOOL_8")
LOGIC_OPS = {"ElementWiseAnd", "ElementWiseOr", "ElementWiseXor", "ElementWiseNot"}
CASE_TIMEOUT = 3600


# ---- one case ------------------------------------------------------------------------------------
def _data(dtype: str, shape, rng, wide: bool) -> np.ndarray:
    from qnnemu.core import dtypes
    npd = dtypes.numpy_dtype(qnn_dtype(dtype))
    if dtype == "BOOL_8":
        return rng.integers(0, 2, shape).astype(npd)
    if dtype.startswith("FLOAT") or dtype == "BFLOAT_16":
        return rng.uniform(-3, 3, shape).astype(npd)
    info = np.iinfo(npd)
    if dtype in FIXED or (wide and info.bits <= 16):
        return rng.integers(info.min, int(info.max) + 1, shape, dtype=np.int64).astype(npd)
    lo = 0 if info.min == 0 else (-1000 if wide else -5)
    return rng.integers(lo, (1000 if wide else 5) + 1, shape).astype(npd)


def execute(be, case: dict, seed: int = 0, wide: bool = False) -> dict:
    """Builds ``case``'s one-node graph on backend ``be`` (qnnemu.client.Backend), runs it once
    with deterministic data; returns {"outputs": [[dtype, values], ...]} or {"error": text}."""
    from probe_op_support import config_of, template_of

    from qnnemu.client import QnnCallError
    from qnnemu.headers import Q
    rng = np.random.default_rng(seed)
    try:
        cfg, tpl = config_of(case), template_of(case)
        ctx = be.context()
        try:
            g = ctx.graph("g")
            ins, feeds = [], {}
            for k, (t, spec) in enumerate(zip(cfg.inputs, tpl.inputs)):
                qd = qnn_dtype(t.dtype)
                if t.null:
                    ins.append(g._tensor(f"in{k}", (0,), qd, Q.QNN_TENSOR_TYPE_NULL))
                    continue
                index_like = spec.role not in ("x", "w", "b", "y")
                if t.data is not None:
                    data = t.data if index_like or spec.role == "x" else _data(t.dtype, t.shape, rng, wide)
                    ins.append(g.static(f"in{k}", data, qd, quant=t.quant))
                    continue
                arr = (rng.integers(0, 2, t.shape).astype(_np(t.dtype)) if index_like
                       else _data(t.dtype, t.shape, rng, wide))
                ins.append(g.input(f"in{k}", t.shape, qd, quant=t.quant))
                feeds[f"in{k}"] = arr
            outs = [(f"out{j}", t.shape, qnn_dtype(t.dtype)) + ((t.quant,) if t.quant else ())
                    for j, t in enumerate(cfg.outputs)]
            g.node(cfg.op, ins, outs, dict(cfg.params), name="node", app_read=True)
            g.finalize()
            res = g.execute(feeds)
            return {"outputs": [[t.dtype, res[f"out{j}"].astype(np.float64).tolist()]
                                for j, t in enumerate(cfg.outputs)]}
        finally:
            ctx.free()
            be._contexts.remove(ctx)
    except QnnCallError as e:
        return {"error": f"{e.function}: {e.code}"}


def _np(dtype: str):
    from qnnemu.core import dtypes
    return dtypes.numpy_dtype(qnn_dtype(dtype))


def agree(a: list, b: list) -> tuple[bool, str]:
    """Whether two executions' outputs agree (see the module docstring), and how they differ."""
    for j, ((dtype, x), (_, y)) in enumerate(zip(a, b)):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.shape != y.shape:
            return False, f"out{j}: shapes {x.shape} != {y.shape}"
        if dtype.startswith("FLOAT"):
            both_nan = np.isnan(x) & np.isnan(y)
            d = np.where(both_nan, 0.0, np.abs(x - y))
            scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(y), y, 0)), initial=0)))
            if not (np.nanmax(d, initial=0) <= 1e-2 * scale):
                k = int(np.nanargmax(d))
                return False, f"out{j}: {x.reshape(-1)[k]} != {y.reshape(-1)[k]} (of {x.size})"
        else:
            d = np.abs(x - y)
            if d.max(initial=0) > 1:
                k = int(np.argmax(d))
                return False, (f"out{j}: {x.reshape(-1)[k]:g} != {y.reshape(-1)[k]:g} ({int((d > 1).sum())} of "
                               f"{x.size} differ by more than one)")
    return True, ""


# ---- which cases ---------------------------------------------------------------------------------
def value_cases(arch: int, ops: list[str], everything: bool = False) -> list[dict]:
    """The sweep cases at each op's canonical rank whose one-node graph the vendor finalized on
    ``arch`` (op_support.json); without ``everything``, those with a plain integer or BOOL_8 data
    type, and every case of the conversions and logic ops."""
    from probe_op_support import config_of, sweep_cases

    from qnnemu.htp import op_support
    out = []
    for op in ops:
        for c in sweep_cases(op, canonical_only=True):
            cfg = config_of(c)
            sup = op_support.support(cfg.entry, arch)
            sig = op_support.normalized(",".join("-" if t.null else t.dtype for t in cfg.inputs) + "->" +
                                        ",".join(t.dtype for t in cfg.outputs))
            rank = max((len(t.shape) for t in cfg.inputs + cfg.outputs if not t.null), default=0)
            if sup is None or rank not in sup.finalized.get(sig, ()):
                continue
            plain = any(not t.null and t.dtype in PLAIN for t in cfg.inputs + cfg.outputs)
            if everything or plain or op in PAIR_OPS or op in LOGIC_OPS or cfg.entry in (
                    "ElementWiseBinary[operation=1]", "ElementWiseBinary[operation=15]",
                    "ElementWiseBinary[operation=19]", "ElementWiseUnary[operation=9]"):
                out.append(c)
    return out


# ---- workers -------------------------------------------------------------------------------------
def worker_main(argv: list[str]) -> int:
    library, soc, cases_file, results_file, wide = argv
    from qnnemu.client import Backend, htp_device_config
    cases = json.loads(Path(cases_file).read_text())
    done = set()
    if Path(results_file).exists():
        done = {json.loads(line)["i"] for line in Path(results_file).read_text().splitlines() if line.strip()}
    be = Backend(None if library == "ours" else library, log_level=None,
                 device_configs=[htp_device_config("SOC", socModel=int(soc))])
    with open(results_file, "a") as out:
        for i, case in enumerate(cases):
            if i in done:
                continue
            out.write(json.dumps({"i": i, "start": True}) + "\n")
            out.flush()
            out.write(json.dumps({"i": i, **execute(be, case, seed=i, wide=wide == "1")}) + "\n")
            out.flush()
    return 0


def run_backend(library: str | None, arch: int, cases: list[dict], wide: bool = False) -> list[dict]:
    """``cases`` on ``library`` (None: qnnemu) in worker subprocesses on an SoC of ``arch``; a
    case that kills its worker is recorded as {"error": "crash ..."}."""
    from probe_op_support import arch_soc, vendor_env
    env = vendor_env()[1] if library else dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("QNNEMU_OP_SUPPORT", None)
    with tempfile.TemporaryDirectory(prefix="op-values-") as tmp:
        cases_file, results_file = Path(tmp) / "cases.json", Path(tmp) / "results.jsonl"
        cases_file.write_text(json.dumps(cases))
        results: dict[int, dict] = {}
        while True:
            proc = subprocess.run([sys.executable, __file__, "worker", library or "ours", str(arch_soc(arch)),
                                   str(cases_file), str(results_file), "1" if wide else "0"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=CASE_TIMEOUT)
            started = None
            for line in results_file.read_text().splitlines():
                ev = json.loads(line)
                if ev.get("start"):
                    started = ev["i"]
                else:
                    results[ev["i"]] = ev
                    started = None
            if proc.returncode == 0 and started is None:
                break
            if started is None:
                raise RuntimeError(f"worker failed ({proc.returncode}) without a case in progress")
            with open(results_file, "a") as f:
                f.write(json.dumps({"i": started, "error": f"crash {proc.returncode}"}) + "\n")
        return [results[i] for i in range(len(cases))]


def compare(arch: int, cases: list[dict], wide: bool = False) -> list[dict]:
    """Each case on both backends: {"case", "vendor", "ours", "agree", "why"}."""
    from probe_op_support import vendor_env
    theirs = run_backend(vendor_env()[0], arch, cases, wide)
    ours = run_backend(None, arch, cases, wide)
    rows = []
    for c, v, o in zip(cases, theirs, ours):
        if "error" in v or "error" in o:
            ok = ("error" in v) == ("error" in o)
            why = f"vendor {v.get('error', 'ran')}, qnnemu {o.get('error', 'ran')}"
        else:
            ok, why = agree(o["outputs"], v["outputs"])
        rows.append({"case": c, "vendor": v, "ours": o, "agree": ok, "why": why})
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "worker":
        return worker_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", nargs="*")
    p.add_argument("--archs", nargs="*", type=int, default=[73])
    p.add_argument("--wide", action="store_true", help="plain integers over their whole range")
    p.add_argument("--all", action="store_true", help="every finalized case, not only the plain ones")
    p.add_argument("--json", type=Path, help="write every row here")
    a = p.parse_args(argv)
    from qnnemu import ops as qops
    ops = sorted(a.ops or qops.REGISTRY)
    everything = []
    for arch in a.archs:
        cases = value_cases(arch, ops, a.all)
        rows = compare(arch, cases, a.wide)
        everything += [{"arch": arch, **r} for r in rows]
        bad = [r for r in rows if not r["agree"]]
        by_op = collections.Counter(r["case"]["op"] for r in bad)
        print(f"v{arch}: {len(rows)} cases, {len(rows) - len(bad)} agree, {len(bad)} differ {dict(by_op)}")
        for r in bad:
            c = r["case"]
            print(f"  {c['op']}{'[' + str(c['variant']) + ']' if c.get('variant') is not None else ''} "
                  f"{c['x']}{'->' + c['y'] if c.get('y') else ''}: {r['why']}")
    if a.json:
        a.json.write_text(json.dumps(everything, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
