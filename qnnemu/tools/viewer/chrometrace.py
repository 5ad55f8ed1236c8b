"""Optrace documents -> chrometrace (QNN HTP backend documentation, "QNN HTP Optrace Profiling": "Post Process
(Chrometrace Generation)", "Memory Bandwidth and Allocation graphs", "Multicore memory graphs",
"Gzip Compression of Chrometrace", "Runtrace Execution and Preemption Events").

The input is the optrace document of ``PreparedPlan.to_optrace()`` (``format: qnnemu.optrace``),
optionally with the ``execution`` key optrace profiling adds::

    "execution": {"start_us": .., "end_us": ..,                 # host wall clock, epoch us
                  "clocks": {"core_mhz": .., "hmx_mhz": .., "bus_mhz": .., "corner": ..},
                  "runs": [{"start_us": .., "end_us": ..,       # one per graphExecute
                            "yields": [{"start_us": .., "end_us": .., ...}], ...}, ...]}

The output is a trace in the Trace Event Format's JSON object form (``traceEvents``,
``displayTimeUnit``, ``otherData``) that Perfetto and chrome://tracing load:

- one process per (graph, HTP core); its threads are the schedule's resources -- "HVX thread
  <n>", "HMX <n>", "DMA queue <n>", "CPU <n>" (a step that overlaps the previous step of its
  lane goes to an extra "... (overlapping k)" lane so every lane stays well nested) -- carrying
  one complete event (``ph: X``) per runlist step and run, with the step's op type, resource,
  cycles, wait/overlap cycles, overlapping step names, VTCM bytes and blocks in ``args`` (and for
  the steps of an op split into tiles -- its tile fills and spills on the DMA lanes, its tile
  computes -- the tile index, the tile's shape and the tiled op);
- the "Dominant path" lane: the highest-priority step at every instant (QHAS's priority: HMX op,
  HVX op, DMA read (fill), DMA write (spill), launch/wait sync, CPU);
- counter events (``ph: C``) "VTCM alloc" (bytes of TCM blocks allocated, each block from the
  start of its first step to the end of its last step) and "DMA bandwidth" (MB/s of fills --
  DRAM read -- and spills -- DRAM write -- over their spans) per core;
- "<graph> Runtraces" (one complete event per graphExecute: the host's execute span) and
  "<graph> Yields" (preemptions the run reports) at the bottom of core 0;
- metadata events (``ph: M``) naming and ordering processes and threads.

Times: the schedule's start/end cycles are core-clock cycles; they become microseconds with the
document's ``execution.clocks.core_mhz`` (qnnemu.htp.perf.NOMINAL when the document has none).
Each run's steps start at the run's host start (relative to the first run); a run whose modelled
duration is longer than the host gap to the next run pushes the next one later (``args.shift_us``)
so runs never overlap on a lane.  Without ``execution`` there is one modelled run at 0.
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...headers import Q
from ...htp.perf import NOMINAL
from ...htp.plan_types import RESOURCES, STEP_KINDS, TCM
from ...htp.soc import SOCS

FORMAT = "qnnemu.optrace"
SUPPORTED_VERSIONS = (1,)

# Resource -> (lane name, order among a core's lanes). Lanes of one resource are numbered by
# the schedule's ``thread`` index.
LANE_KINDS = {"HVX": ("HVX thread", 0), "HMX": ("HMX", 1), "DMA": ("DMA queue", 2), "CPU": ("CPU", 3)}
# QHAS "Dominant Path" priority (the documentation: HMX op, HVX op, DMA reads, DMA writes, checkpoints, sync).
DOMINANT_PRIORITY = ("HMX op", "HVX op", "DMA read (fill)", "DMA write (spill)", "launch/wait",
                     "CPU op")
# The documentation's "System Service" names for the steps that are not ops of the network.
SYSTEM_SERVICE = {"fill": "DramToTcm", "spill": "TcmToDram"}

_TID_RUNTRACE = 9000
_TID_YIELDS = 9001
_TID_DOMINANT = 9002
_TID_LANE_BASE = 100


class OptraceError(ValueError):
    """A document that is not a usable optrace document; the message names the key."""


# ----------------------------------------------------------------------------- documents
def _need(obj: dict, key: str, kinds, where: str, minimum: float | None = None):
    if key not in obj:
        raise OptraceError(f"{where}: '{key}' is missing")
    value = obj[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in
                                        (kinds if isinstance(kinds, tuple) else (kinds,))):
        raise OptraceError(f"{where}.{key}: expected {_kind_names(kinds)}, got {json.dumps(value)[:60]}")
    if minimum is not None and value < minimum:
        raise OptraceError(f"{where}.{key}: must be >= {minimum}, got {value}")
    return value


def _kind_names(kinds) -> str:
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return "/".join({int: "integer", float: "number", str: "string", list: "list",
                     dict: "object", bool: "boolean", type(None): "null"}.get(k, k.__name__)
                    for k in kinds)


def _objects(items: list, where: str, key: str):
    """(``<where>: <key>[i]``, entry) of each entry of a list that must hold JSON objects."""
    for i, item in enumerate(items):
        w = f"{where}: {key}[{i}]"
        if not isinstance(item, dict):
            raise OptraceError(f"{w}: expected an object")
        yield w, item


def _check_steps(steps: list, where: str) -> set[int]:
    """The runlist steps' kinds, resources and cycles; returns their indices."""
    indices = set()
    for w, s in _objects(steps, where, "steps"):
        indices.add(_need(s, "index", int, w, 0))
        if _need(s, "kind", str, w) not in STEP_KINDS:
            raise OptraceError(f"{w}.kind: {s['kind']!r} is not one of {', '.join(STEP_KINDS)}")
        _need(s, "name", str, w)
        if _need(s, "resource", str, w) not in RESOURCES:
            raise OptraceError(f"{w}.resource: {s['resource']!r} is not one of {', '.join(RESOURCES)}")
        for key in ("cycles", "start_cycle", "end_cycle", "thread"):
            _need(s, key, int, w, 0)
        if s["end_cycle"] < s["start_cycle"]:
            raise OptraceError(f"{w}: end_cycle {s['end_cycle']} is before start_cycle {s['start_cycle']}")
        if s.get("tile") is not None:
            _need(s, "tile", int, w, 0)
    return indices


def _check_references(doc: dict, blocks: list, indices: set[int], where: str) -> None:
    """TCM blocks and tilings, whose step references must name steps of the document."""
    for w, b in _objects(blocks, where, "blocks"):
        _need(b, "name", str, w)
        _need(b, "size", int, w, 0)
        for key in ("first_step", "last_step"):
            if b.get(key) is not None and b[key] not in indices:
                raise OptraceError(f"{w}.{key}: step {b[key]} is not in steps[]")
    tilings = doc.get("tilings", [])
    if not isinstance(tilings, list):
        raise OptraceError(f"{where}.tilings: expected a list, got {json.dumps(tilings)[:60]}")
    for w, t in _objects(tilings, where, "tilings"):
        _need(t, "node", str, w)
        _need(t, "tiles", int, w, 1)
        for j in t.get("steps", []):
            if j not in indices:
                raise OptraceError(f"{w}.steps: step {j} is not in steps[]")


def _check_execution(execution: Any, where: str) -> None:
    """The ``execution`` key optrace profiling adds: clocks and runs with their yields."""
    w = f"{where}: execution"
    if not isinstance(execution, dict):
        raise OptraceError(f"{w}: expected an object")
    clocks = execution.get("clocks")
    if clocks is not None:
        _need({"clocks": clocks}, "clocks", dict, w)
        if "core_mhz" in clocks:
            _need(clocks, "core_mhz", (int, float), f"{w}.clocks")
            if clocks["core_mhz"] <= 0:
                raise OptraceError(f"{w}.clocks.core_mhz: must be > 0, got {clocks['core_mhz']}")
    for i, run in enumerate(execution.get("runs") or []):
        rw = f"{w}.runs[{i}]"
        if not isinstance(run, dict):
            raise OptraceError(f"{rw}: expected an object")
        for key in ("start_us", "end_us"):
            if key in run:
                _need(run, key, (int, float), rw)
        for key in ("accel_start_us", "accel_end_us", "vtcm_acquire_us", "power_on_us"):
            if run.get(key) is not None:
                _need(run, key, (int, float), rw)
        yields = run.get("yields", [])
        if isinstance(yields, bool) or not isinstance(yields, (int, list)):
            raise OptraceError(f"{rw}.yields: expected a count or a list of yields, got "
                               f"{json.dumps(yields)[:60]}")
        for j, y in enumerate(yields if isinstance(yields, list) else []):
            if not isinstance(y, dict) or not isinstance(y.get("start_us"), (int, float)):
                raise OptraceError(f"{rw}.yields[{j}]: expected an object with a numeric start_us")


def check_document(doc: Any, where: str = "optrace document") -> dict:
    """Checks the keys the viewer relies on (types, ranges, step/block references) and returns
    ``doc``; raises OptraceError naming the first problem."""
    if not isinstance(doc, dict):
        raise OptraceError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise OptraceError(f"{where}: format is {doc.get('format')!r}, expected {FORMAT!r}")
    if doc.get("version") not in SUPPORTED_VERSIONS:
        raise OptraceError(f"{where}: version {doc.get('version')!r} is not supported "
                           f"(supported: {', '.join(map(str, SUPPORTED_VERSIONS))})")
    _need(doc, "graph", str, where)
    for key in ("total_cycles", "critical_path_cycles", "peak_vtcm_bytes", "spill_bytes",
                "fill_bytes", "vtcm_budget_bytes"):
        _need(doc, key, int, where, 0)
    steps = _need(doc, "steps", list, where)
    blocks = _need(doc, "blocks", list, where)
    indices = _check_steps(steps, where)
    _check_references(doc, blocks, indices, where)
    if doc.get("execution") is not None:
        _check_execution(doc["execution"], where)
    return doc


def soc_name(soc_model: int) -> str:
    """SoC model code -> name: the SoC table's when there is one, else the QNN enum's."""
    info = SOCS.get(soc_model)
    if info is not None and getattr(info, "name", None):
        return str(info.name)
    name = Q.enum("QNN_SOC_MODEL_").get(soc_model)
    return name[len("QNN_SOC_MODEL_"):] if name else f"SoC {soc_model}"


def document_clocks(doc: dict) -> dict:
    """The clocks the document's cycles convert with: ``execution.clocks`` (the votes active at
    the execution); else the plan's ``reference_clocks`` (what its cycles are counted at); else
    qnnemu.htp.perf.NOMINAL.  ``source`` says which."""
    out = {"core_mhz": NOMINAL.core_mhz, "hmx_mhz": NOMINAL.hmx_mhz, "bus_mhz": NOMINAL.bus_mhz,
           "corner": NOMINAL.corner, "source": "nominal"}
    for source, clocks in (("reference", doc.get("reference_clocks")),
                           ("execution", (doc.get("execution") or {}).get("clocks"))):
        if isinstance(clocks, dict) and isinstance(clocks.get("core_mhz"), (int, float)) \
                and clocks["core_mhz"] > 0:
            out.update(clocks)
            out["source"] = source
    return out


def core_mhz(doc: dict) -> float:
    """The core clock (MHz = cycles per microsecond) the document's cycles convert with."""
    return float(document_clocks(doc)["core_mhz"])


def cycles_to_us(cycles: float, mhz: float) -> float:
    """Core-clock cycles -> microseconds (MHz = cycles per microsecond)."""
    return cycles / mhz


def step_core(step: dict) -> int:
    """The HTP core a step ran on (documents of single-core plans have no ``core`` key)."""
    return int(step.get("core", 0))


def step_dma_bytes(step: dict, blocks: dict[str, dict]) -> int:
    """Bytes a spill or fill step moves: its own ``dma_bytes``/``bytes`` when the plan records
    them, else the sizes of the blocks it copies (a fill writes its outputs into VTCM, a spill
    reads its inputs out of VTCM)."""
    for key in ("dma_bytes", "bytes"):
        if isinstance(step.get(key), int) and step[key] > 0:
            return step[key]
    first, second = (step.get("outputs", []), step.get("inputs", [])) if step["kind"] == "fill" \
        else (step.get("inputs", []), step.get("outputs", []))
    for names in (first, second):
        total = sum(blocks[n]["size"] for n in dict.fromkeys(names) if n in blocks)
        if total:
            return total
    return 0


# --------------------------------------------------------------------- timeline analysis
def vtcm_timeline(doc: dict, core: int | None = None) -> list[tuple[int, int]]:
    """(cycle, bytes allocated from that cycle on) change points of the TCM blocks: a block is
    allocated from the start of its first step to the end of its last step."""
    steps = {s["index"]: s for s in doc["steps"]}
    deltas: dict[int, int] = {}
    for b in doc["blocks"]:
        if b.get("kind") != TCM or b.get("first_step") is None or b.get("last_step") is None:
            continue
        first, last = steps[b["first_step"]], steps[b["last_step"]]
        if core is not None and step_core(first) != core:
            continue
        start = min(first["start_cycle"], last["start_cycle"])
        end = max(first["end_cycle"], last["end_cycle"])
        deltas[start] = deltas.get(start, 0) + b["size"]
        deltas[end] = deltas.get(end, 0) - b["size"]
    points, level = [], 0
    for cycle in sorted(deltas):
        level += deltas[cycle]
        if not points or points[-1][1] != level:   # blocks swapped at one instant: no change
            points.append((cycle, level))
    return points


def dma_timeline(doc: dict, core: int | None = None) -> list[tuple[int, float, float]]:
    """(cycle, fill bytes per cycle, spill bytes per cycle) change points: each spill/fill moves
    its bytes evenly over its span (zero-length steps carry no bandwidth)."""
    blocks = {b["name"]: b for b in doc["blocks"]}
    deltas: dict[int, list[float]] = {}
    for s in doc["steps"]:
        if s["kind"] not in ("spill", "fill") or (core is not None and step_core(s) != core):
            continue
        span = s["end_cycle"] - s["start_cycle"]
        if span <= 0:
            continue
        rate = step_dma_bytes(s, blocks) / span
        column = 0 if s["kind"] == "fill" else 1
        for cycle, sign in ((s["start_cycle"], 1), (s["end_cycle"], -1)):
            d = deltas.setdefault(cycle, [0.0, 0.0])
            d[column] += sign * rate
    points, fill, spill = [], 0.0, 0.0
    for cycle in sorted(deltas):
        fill += deltas[cycle][0]
        spill += deltas[cycle][1]
        # Sums of floats that cancel: snap tiny residues to 0 so idle stretches read 0.
        fill, spill = (0.0 if abs(fill) < 1e-9 else fill), (0.0 if abs(spill) < 1e-9 else spill)
        if not points or points[-1][1:] != (fill, spill):
            points.append((cycle, fill, spill))
    return points


def dominant_class(step: dict) -> int:
    """The step's rank in DOMINANT_PRIORITY (0 = highest)."""
    if step["kind"] == "fill":
        return 2
    if step["kind"] == "spill":
        return 3
    if step["kind"] in ("launch", "wait"):
        return 4
    return {"HMX": 0, "HVX": 1, "DMA": 2}.get(step["resource"], 5)


def dominant_path(doc: dict) -> list[dict]:
    """QHAS "Dominant Path": at every instant of the schedule the running step of highest
    priority (ties: the earlier start, then the lower index); consecutive instants of the same
    step are merged into one segment ``{step, name, op_type, kind, resource, class,
    start_cycle, end_cycle, cycles}``.  Idle stretches have no segment."""
    steps = [s for s in doc["steps"] if s["end_cycle"] > s["start_cycle"]]
    starts: dict[int, list[dict]] = {}
    for s in steps:
        starts.setdefault(s["start_cycle"], []).append(s)
    cuts = sorted({c for s in steps for c in (s["start_cycle"], s["end_cycle"])})
    segments: list[dict] = []
    active: dict[int, dict] = {}   # a sweep: only the steps running now (a few lanes' worth)
    for lo, hi in zip(cuts, cuts[1:]):
        for s in starts.get(lo, []):
            active[s["index"]] = s
        for i in [i for i, s in active.items() if s["end_cycle"] <= lo]:
            del active[i]
        running = active.values()
        if not running:
            continue
        best = min(running, key=lambda s: (dominant_class(s), s["start_cycle"], s["index"]))
        if segments and segments[-1]["step"] == best["index"] and segments[-1]["end_cycle"] == lo:
            segments[-1]["end_cycle"] = hi
            segments[-1]["cycles"] = hi - segments[-1]["start_cycle"]
            continue
        segments.append({"step": best["index"], "name": best["name"], "op_type": best.get("op_type"),
                         "kind": best["kind"], "resource": best["resource"],
                         "class": DOMINANT_PRIORITY[dominant_class(best)],
                         "start_cycle": lo, "end_cycle": hi, "cycles": hi - lo})
    return segments


def assign_lanes(doc: dict) -> dict[int, tuple[int, str, int, int]]:
    """step index -> (core, resource, thread, overlap lane k): steps of one (core, resource,
    thread) in start order; a step starting before the previous one of its lane ended goes to
    the first later lane that is free (k = 1, 2, ...), so every lane's spans are disjoint."""
    out: dict[int, tuple[int, str, int, int]] = {}
    lane_ends: dict[tuple[int, str, int], list[int]] = {}
    for s in sorted(doc["steps"], key=lambda s: (s["start_cycle"], s["end_cycle"], s["index"])):
        key = (step_core(s), s["resource"], s["thread"])
        ends = lane_ends.setdefault(key, [])
        for k, end in enumerate(ends):
            if end <= s["start_cycle"]:
                ends[k] = s["end_cycle"]
                break
        else:
            k = len(ends)
            ends.append(s["end_cycle"])
        out[s["index"]] = (*key, k)
    return out


def step_resources(doc: dict) -> dict[int, list[str]]:
    """step index -> the resources linting's "Resources" lists for it, in RESOURCES order: the
    step's own ``resources`` when the plan records them, else those of every step of the same
    node (an op split into launch/wait uses both steps' resources), else its ``resource``."""
    by_node: dict[int, set[str]] = {}
    for s in doc["steps"]:
        if s.get("node_index") is not None:
            by_node.setdefault(s["node_index"], set()).update([s["resource"], *(s.get("resources") or [])])
    out = {}
    for s in doc["steps"]:
        used = set(s.get("resources") or []) or by_node.get(s.get("node_index"), set()) or {s["resource"]}
        out[s["index"]] = [r for r in RESOURCES if r in used] + sorted(used - set(RESOURCES))
    return out


# ----------------------------------------------------------------------------- runs
@dataclass
class Run:
    """One graphExecute of a document.  Times are host wall clock (epoch us); None for the
    modelled run of a document without ``execution``."""
    index: int
    start_us: float | None
    end_us: float | None
    accel_start_us: float | None = None     # where the steps' cycle 0 is (default: start_us)
    accel_end_us: float | None = None
    vtcm_acquire_us: float = 0.0            # resource acquisition before the accelerator starts
    power_on_us: float = 0.0
    yields: list[dict] = field(default_factory=list)   # preemption spans/instants, if listed
    yield_count: int = 0
    extra: dict = field(default_factory=dict)


_RUN_KEYS = ("start_us", "end_us", "accel_start_us", "accel_end_us", "vtcm_acquire_us",
             "power_on_us", "yields")


def _run(i: int, r: dict) -> Run:
    yields = r.get("yields")
    listed = list(yields) if isinstance(yields, list) else []
    count = len(listed) if isinstance(yields, list) else int(yields or 0)
    return Run(i, r.get("start_us"), r.get("end_us"), r.get("accel_start_us"), r.get("accel_end_us"),
               float(r.get("vtcm_acquire_us") or 0), float(r.get("power_on_us") or 0), listed, count,
               {k: v for k, v in r.items() if k not in _RUN_KEYS})


def runs_of(doc: dict) -> list[Run]:
    """The document's executions: ``execution.runs``; else one run spanning ``execution``'s
    start/end; else one modelled run without host times."""
    execution = doc.get("execution") or {}
    runs = execution.get("runs") or []
    if runs:
        return [_run(i, r) for i, r in enumerate(runs)]
    return [Run(0, execution.get("start_us"), execution.get("end_us"))]


def run_record(run: Run) -> dict:
    """A Run back as an ``execution.runs`` entry (merge_documents)."""
    out = dict(run.extra)
    for key in _RUN_KEYS[:-1]:
        value = getattr(run, key)
        if value is not None and (value or key in ("start_us", "end_us")):
            out[key] = value
    out["yields"] = run.yields if run.yields else run.yield_count
    return out


def modelled_cycles(doc: dict) -> int:
    """The schedule's length: the last step end (or total_cycles when that is longer)."""
    return max([doc["total_cycles"]] + [s["end_cycle"] for s in doc["steps"]])


# ----------------------------------------------------------------------------- the trace
class _Trace:
    def __init__(self):
        self.events: list[dict] = []
        self.named: set[tuple[int, int | None]] = set()

    def process(self, pid: int, name: str, sort_index: int, labels: str | None = None) -> None:
        if (pid, None) in self.named:
            return
        self.named.add((pid, None))
        self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                            "args": {"name": name}})
        self.events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                            "args": {"sort_index": sort_index}})
        if labels:
            self.events.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                                "args": {"labels": labels}})

    def thread(self, pid: int, tid: int, name: str, sort_index: int) -> None:
        if (pid, tid) in self.named:
            return
        self.named.add((pid, tid))
        self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                            "args": {"name": name}})
        self.events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                            "args": {"sort_index": sort_index}})


def _lane_tid(resource: str, thread: int, k: int) -> tuple[int, str, int]:
    label, order = LANE_KINDS[resource]
    tid = _TID_LANE_BASE + order * 1000 + thread * 10 + k
    name = f"{label} {thread}" + (f" (overlapping {k})" if k else "")
    return tid, name, tid


def _round_us(value: float) -> float:
    # Nanosecond resolution: enough for 1 GHz cycles, keeps the file small and stable.
    return round(value, 3)


class _Analysis:
    """What build_trace derives from one document, computed once for all its runs."""

    def __init__(self, doc: dict):
        self.doc = doc
        self.lanes = assign_lanes(doc)
        self.names = {s["index"]: s["name"] for s in doc["steps"]}
        self.resources = step_resources(doc)
        self.dominant = dominant_path(doc)
        self._vtcm: dict[int, list] = {}
        self._dma: dict[int, list] = {}

    def vtcm(self, core: int) -> list[tuple[int, int]]:
        if core not in self._vtcm:
            self._vtcm[core] = vtcm_timeline(self.doc, core)
        return self._vtcm[core]

    def dma(self, core: int) -> list[tuple[int, float, float]]:
        if core not in self._dma:
            self._dma[core] = dma_timeline(self.doc, core)
        return self._dma[core]


def _span(start_us: float, end_us: float) -> dict:
    """ts/dur of a complete event, rounded at both ends (not start and length) so that spans
    nested in time stay nested after rounding."""
    ts, end = _round_us(start_us), _round_us(end_us)
    return {"ts": ts, "dur": _round_us(end - ts)}


@dataclass
class _PlacedRun:
    """One graphExecute of one document, placed on the trace's time axis (microseconds from
    the first host start ``t0``)."""

    number: int            # the run's index among its graph's runs
    doc: dict
    run: Run
    analysis: _Analysis
    mhz: float
    model_us: float        # the modelled schedule's length
    t0: float
    base: float            # the run's (host) start
    accel: float           # the accelerator's start
    extent_start: float
    extent_end: float
    shift: float           # how much later the run moves so as not to overlap the previous one

    @property
    def origin(self) -> float:
        """Where the steps' cycle 0 is."""
        return self.accel + self.shift

    def rel(self, t: float | None, default: float) -> float:
        return default if t is None else t - self.t0

    def at_cycle(self, cycle: float) -> float:
        return self.origin + cycles_to_us(cycle, self.mhz)


def _place_runs(graph_docs: list[dict], t0: float) -> list[_PlacedRun]:
    """Runs of every document of one graph, in host order; a run starts at its host start or,
    when the previous modelled run is still going, right after it."""
    scheduled = [(d, r) for d in graph_docs for r in runs_of(d)]
    scheduled.sort(key=lambda dr: (dr[1].start_us is None, dr[1].start_us or 0.0))
    analyses: dict[int, _Analysis] = {}  # runs of one document share its analysis (maybe thousands)
    placed = []
    cursor = 0.0
    for number, (d, run) in enumerate(scheduled):
        if id(d) not in analyses:
            analyses[id(d)] = _Analysis(d)
        mhz = core_mhz(d)
        model_us = cycles_to_us(modelled_cycles(d), mhz)
        p = _PlacedRun(number, d, run, analyses[id(d)], mhz, model_us, t0, 0.0, 0.0, 0.0, 0.0, 0.0)
        p.base = p.rel(run.start_us, cursor)
        p.accel = p.rel(run.accel_start_us, p.base)
        p.extent_start = min(p.base, p.accel)
        p.extent_end = max(p.rel(run.end_us, p.base), p.accel + model_us, p.rel(run.accel_end_us, p.accel))
        # A run whose span would reach into the previous run's moves later as a whole.
        p.shift = max(0.0, cursor - p.extent_start)
        cursor = p.extent_end + p.shift
        placed.append(p)
    return placed


def _step_args(s: dict, p: _PlacedRun, resource: str, thread: int, blocks: dict, tiled: dict) -> dict:
    """The ``args`` of one runlist step's complete event."""
    names, resources = p.analysis.names, p.analysis.resources
    args = {"step": s["index"], "kind": s["kind"], "op_type": s.get("op_type"),
            "resource": resource, "thread": thread, "cycles": s["cycles"],
            "start_cycle": s["start_cycle"], "end_cycle": s["end_cycle"],
            "wait_cycles": s.get("wait_cycles", 0),
            "overlap_cycles": s.get("overlap_cycles", 0),
            "overlap_with": [names.get(i, f"step {i}") for i in s.get("overlap_steps", [])],
            "overlap_wait_cycles": s.get("overlap_wait_cycles", 0),
            "overlap_wait_with": [names.get(i, f"step {i}")
                                  for i in s.get("overlap_wait_steps", [])],
            "resources": resources[s["index"]], "threads": s.get("threads", 1),
            "vtcm_bytes": s.get("vtcm_bytes", 0), "inputs": s.get("inputs", []),
            "outputs": s.get("outputs", []), "run": p.number}
    if s.get("node_index") is not None:
        args["node_index"] = s["node_index"]
    if s.get("note"):
        args["note"] = s["note"]
    if s["kind"] not in SYSTEM_SERVICE and s.get("bytes"):
        args["ddr_bytes"] = s["bytes"]
    if s["kind"] in SYSTEM_SERVICE:
        args["system_service"] = SYSTEM_SERVICE[s["kind"]]
        args["dma_bytes"] = step_dma_bytes(s, blocks)
    if s.get("tile") is not None:   # a step of an op split into tiles
        args["tile"] = s["tile"]
        args["tile_shape"] = s.get("tile_shape", [])
        args["tiled_node"] = tiled.get(s.get("tile_node"), s.get("tile_node"))
    return args


def _add_steps(trace: _Trace, p: _PlacedRun, pids: dict[tuple[str, int], int], graph: str) -> None:
    """One complete event per runlist step, on its resource's lane."""
    d = p.doc
    blocks = {b["name"]: b for b in d["blocks"]}
    tiled = {t.get("node_index"): t.get("node") for t in d.get("tilings") or [] if isinstance(t, dict)}
    for s in sorted(d["steps"], key=lambda s: (s["start_cycle"], s["index"])):
        core, resource, thread, k = p.analysis.lanes[s["index"]]
        pid = pids[(graph, core)]
        tid, lane_name, sort_index = _lane_tid(resource, thread, k)
        trace.thread(pid, tid, lane_name, sort_index)
        trace.events.append({
            "ph": "X", "name": s["name"], "cat": s["kind"], "pid": pid, "tid": tid,
            **_span(p.at_cycle(s["start_cycle"]), p.at_cycle(s["end_cycle"])),
            "args": _step_args(s, p, resource, thread, blocks, tiled)})


def _add_counters(trace: _Trace, p: _PlacedRun, pids: dict[tuple[str, int], int], graph: str,
                  cores: list[int]) -> None:
    """The "VTCM alloc" and "DMA bandwidth" counters of each core (memory_info)."""
    for core in cores:
        pid = pids[(graph, core)]
        for cycle, level in p.analysis.vtcm(core):
            trace.events.append({"ph": "C", "name": "VTCM alloc", "pid": pid, "tid": 0,
                                 "ts": _round_us(p.at_cycle(cycle)), "args": {"bytes": level}})
        for cycle, fill, spill in p.analysis.dma(core):
            # bytes per cycle * cycles per us = bytes per us = MB/s
            trace.events.append({"ph": "C", "name": "DMA bandwidth", "pid": pid, "tid": 0,
                                 "ts": _round_us(p.at_cycle(cycle)),
                                 "args": {"DRAM read (fill) MB/s": round(fill * p.mhz, 3),
                                          "DRAM write (spill) MB/s": round(spill * p.mhz, 3)}})


def _add_dominant(trace: _Trace, p: _PlacedRun, main_pid: int) -> None:
    """The "Dominant path" lane: the highest-priority step at every instant."""
    trace.thread(main_pid, _TID_DOMINANT, "Dominant path", _TID_DOMINANT)
    for seg in p.analysis.dominant:
        trace.events.append({
            "ph": "X", "name": seg["name"], "cat": "dominant", "pid": main_pid,
            "tid": _TID_DOMINANT, **_span(p.at_cycle(seg["start_cycle"]), p.at_cycle(seg["end_cycle"])),
            "args": {"class": seg["class"], "step": seg["step"], "op_type": seg["op_type"],
                     "cycles": seg["cycles"], "run": p.number}})


def _add_runtrace(trace: _Trace, p: _PlacedRun, main_pid: int, graph: str) -> None:
    """The "<graph> Runtraces" lane: the run's host span, then the execution events inside it --
    resource acquisition right before the accelerator starts (clipped to the run), then the
    accelerator span."""
    run, shift = p.run, p.shift
    trace.thread(main_pid, _TID_RUNTRACE, f"{graph} Runtraces", _TID_RUNTRACE)
    host_us = (run.end_us - run.start_us) if None not in (run.start_us, run.end_us) else None
    trace.events.append({
        "ph": "X", "name": f"{graph} execute #{p.number}", "cat": "runtrace",
        "pid": main_pid, "tid": _TID_RUNTRACE, **_span(p.extent_start + shift, p.extent_end + shift),
        "args": {"run": p.number, "host_start_us": run.start_us, "host_end_us": run.end_us,
                 "host_us": host_us, "accel_start_us": run.accel_start_us,
                 "accel_end_us": run.accel_end_us, "modelled_us": round(p.model_us, 3),
                 "modelled_cycles": modelled_cycles(p.doc), "core_mhz": p.mhz,
                 "yields": run.yield_count, "shift_us": round(shift, 3), **run.extra}})
    accel = p.accel
    accel_end = p.rel(run.accel_end_us, accel + p.model_us)
    children = []
    power_start = max(p.extent_start, accel - run.power_on_us)
    vtcm_start = max(p.extent_start, power_start - run.vtcm_acquire_us)
    if run.vtcm_acquire_us:
        children.append(("VTCM acquire", vtcm_start, power_start - vtcm_start))
    if run.power_on_us:
        children.append(("HVX + HMX power on and acquire", power_start, accel - power_start))
    children.append(("accelerator", accel, max(0.0, accel_end - accel)))
    for name, start, dur in children:
        trace.events.append({"ph": "X", "name": name, "cat": "runtrace", "pid": main_pid,
                             "tid": _TID_RUNTRACE, **_span(start + shift, start + shift + dur),
                             "args": {"run": p.number}})


def _add_yields(trace: _Trace, p: _PlacedRun, main_pid: int, graph: str) -> None:
    """The "<graph> Yields" lane: the preemptions the run reports (a span, or an instant when
    the yield has no end)."""
    run = p.run
    if run.yields:
        trace.thread(main_pid, _TID_YIELDS, f"{graph} Yields", _TID_YIELDS)
    for y in sorted(run.yields, key=lambda y: y["start_us"]):
        ts = _round_us(y["start_us"] - p.t0 + p.shift if run.start_us is not None
                       else p.origin + y["start_us"])
        extra = {k: v for k, v in y.items() if k not in ("start_us", "end_us")}
        if isinstance(y.get("end_us"), (int, float)):
            trace.events.append({"ph": "X", "name": "yield", "cat": "preemption",
                                 "pid": main_pid, "tid": _TID_YIELDS,
                                 **_span(ts, ts + y["end_us"] - y["start_us"]),
                                 "args": {"run": p.number, **extra}})
        else:
            trace.events.append({"ph": "i", "s": "t", "name": "yield", "cat": "preemption",
                                 "pid": main_pid, "tid": _TID_YIELDS, "ts": ts,
                                 "args": {"run": p.number, **extra}})


def _graph_info(graph: str, graph_docs: list[dict], runs: int) -> dict:
    """``otherData.graphs[]``: a graph's documents, runs and its first document's summary."""
    d0 = graph_docs[0]
    return {"graph": graph, "documents": len(graph_docs), "runs": runs,
            "clocks": document_clocks(d0), "soc_model": d0["soc_model"],
            "arch": d0["arch"], "vtcm_budget_bytes": d0["vtcm_budget_bytes"],
            "peak_vtcm_bytes": d0["peak_vtcm_bytes"], "spill_bytes": d0["spill_bytes"],
            "fill_bytes": d0["fill_bytes"], "total_cycles": d0["total_cycles"],
            "critical_path_cycles": d0["critical_path_cycles"], "tiles": d0.get("tiles", 0),
            "tiled_ops": len(d0.get("tilings") or [])}


def build_trace(docs: Iterable[dict], source: str | None = None, runtrace: bool = True,
                memory_info: bool = True, dominant: bool = True) -> dict:
    """The chrometrace (Trace Event Format, JSON object form) of one or more optrace documents.
    Documents of the same graph share its processes; their runs follow each other in time.
    ``runtrace`` / ``memory_info`` are the optrace config features of those names (the
    Runtraces/Yields lanes; the VTCM alloc and DMA bandwidth counters); ``dominant`` the
    Dominant path lane."""
    docs = [check_document(d, f"optrace document {i}") for i, d in enumerate(docs)]
    if not docs:
        raise OptraceError("no optrace documents to trace")
    trace = _Trace()
    by_graph: dict[str, list[dict]] = {}
    for d in docs:
        by_graph.setdefault(d["graph"], []).append(d)
    host_starts = [r.start_us for d in docs for r in runs_of(d) if r.start_us is not None]
    t0 = min(host_starts) if host_starts else 0.0
    pids: dict[tuple[str, int], int] = {}
    graphs_info = []
    for g_order, (graph, graph_docs) in enumerate(by_graph.items()):
        cores = sorted({step_core(s) for d in graph_docs for s in d["steps"]} or {0})
        d0 = graph_docs[0]
        for core in cores:
            pid = pids.setdefault((graph, core), len(pids) + 1)
            trace.process(pid, f"{graph} - HTP core {core}", g_order * 100 + core,
                          f"{soc_name(d0['soc_model'])}, v{d0['arch']}")
        main_pid = pids[(graph, cores[0])]
        placed = _place_runs(graph_docs, t0)
        for p in placed:
            _add_steps(trace, p, pids, graph)
            if memory_info:
                _add_counters(trace, p, pids, graph, cores)
            if dominant:
                _add_dominant(trace, p, main_pid)
            if runtrace:
                _add_runtrace(trace, p, main_pid, graph)
                _add_yields(trace, p, main_pid, graph)
        graphs_info.append(_graph_info(graph, graph_docs, len(placed)))
    # Metadata first, then by time: what viewers expect and what keeps lanes monotonic.
    trace.events.sort(key=lambda e: (e["ph"] != "M", e.get("ts", 0)))
    return {"traceEvents": trace.events, "displayTimeUnit": "ns",
            "otherData": {"producer": "qnnemu-profile-viewer", "source": source,
                          "time_origin_host_us": t0, "graphs": graphs_info}}


def write_trace(trace: dict, path: str, compress: bool = False) -> str:
    """Writes the trace as JSON; gzip-compressed ("Gzip Compression of Chrometrace") when
    ``compress`` or the name ends in ``.gz`` (``.gz`` is appended when compressing a name that
    lacks it). Returns the path written."""
    data = json.dumps(trace, separators=(",", ":")).encode("utf-8")
    if compress or path.endswith(".gz"):
        if not path.endswith(".gz"):
            path += ".gz"
        # mtime 0: the same trace always compresses to the same bytes.
        with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
            gz.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)
    return path


def read_trace(path: str) -> dict:
    """A trace written by write_trace (gzip detected by its magic bytes)."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def merge_documents(docs: Iterable[dict]) -> list[dict]:
    """Documents of the same prepared graph at the same clocks (one per profiled graphExecute)
    merged into one whose ``execution.runs`` lists every run, in the order given; documents
    that differ in anything but their execution stay separate."""
    merged: list[dict] = []
    keys: dict[str, int] = {}
    for d in docs:
        execution = d.get("execution") or {}
        plan = {k: v for k, v in d.items() if k != "execution"}
        key = json.dumps([plan, execution.get("clocks")], sort_keys=True)
        runs = [run_record(r) for r in runs_of(d)]
        if key in keys:
            target = merged[keys[key]]
            target["execution"]["runs"] += runs
            starts = [r["start_us"] for r in target["execution"]["runs"] if "start_us" in r]
            ends = [r["end_us"] for r in target["execution"]["runs"] if "end_us" in r]
            target["execution"]["start_us"] = min(starts) if starts else None
            target["execution"]["end_us"] = max(ends) if ends else None
            continue
        keys[key] = len(merged)
        out = dict(plan)
        out["execution"] = {"start_us": execution.get("start_us"), "end_us": execution.get("end_us"),
                            "runs": runs}
        if execution.get("clocks") is not None:
            out["execution"]["clocks"] = execution["clocks"]
        merged.append(out)
    return merged
