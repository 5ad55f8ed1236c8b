"""Deterministic HTP timelines of scenarios with QNN graphs and non-QNN clients (QNN "HTP Yielding
and Pre-Emption": "Base Case: Single Client Pre-Emption", "Resource Sharing under Concurrency";
QNN HTP backend documentation, "Yielding and Pre-Emption").

A scenario is a device (SoC row or arch / VTCM / HVX threads) and clients: QNN graphs and
"Client App"s with a priority, HMX and HVX units, VTCM, a PD, and runs (arrival time, and either
the op durations of a QNN graph -- it can yield at each op boundary -- or a duration).  The
simulator replays it on the virtual clock with the shared HTP's decision function
(qnnemu/htp/runtime.py ``admit``) and gives:

* ``rows``: the resource table of the documentation's examples -- at every time the holders
  change: Time, HMX, HVX0..n, VTCM 0..m (one column per MB of VTCM); the final all-idle row is
  left out, as in the documentation;
* ``chrometrace``: a Trace Event Format JSON (one process per PD, threads HMX / HVXi / VTCM i,
  X events per client and lane, instant events for each pre-emption);
* per client: yield count and the time it waited for an eviction (pre-emption wait).

Scenario JSON::

    {"device": {"arch": 75, "vtcm_mb": 4, "hvx_threads": 2},          # or {"soc": "SM8650"}
     "clients": [{"name": "Graph 1", "kind": "qnn", "priority": "HIGH", "pd": 1,
                  "hmx": 1, "hvx": 1, "vtcm_mb": 3,
                  "runs": [{"at": 0, "ops": [10, 10, 10]}]},
                 {"name": "Client App", "kind": "app", "priority": "MEDIUM",
                  "hmx": 0, "hvx": 1, "vtcm_mb": 1, "runs": [{"at": 10, "duration": 50}]}]}

``vtcm_bytes`` may replace ``vtcm_mb``; requests are rounded to the arch's granule.  Priorities:
LOW / MEDIUM (= NORMAL) / NORMAL_HIGH / HIGH, a Qnn_Priority_t (int), or a Hexagon OS priority
as a hex string ("0xc2").
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from .runtime import MIB, Client, Device, Placement, admit, os_priority, round_vtcm
from .soc import parse_soc_model

EPS = 1e-9


class ScenarioError(ValueError):
    """A scenario that cannot be run (what is wrong, and where)."""


@dataclass
class Row:
    time: float
    hmx: str
    hvx: list[str]
    vtcm: list[str]

    def cells(self) -> list[str]:
        return [self.hmx, *self.hvx, *self.vtcm]


@dataclass
class Timeline:
    device: Device
    rows: list[Row]
    spans: list[dict]                 # {client, label, pd, start, end, hmx, hvx, vtcm}
    preemptions: list[dict]           # {time, client, label, by}
    yields: dict[str, int] = field(default_factory=dict)            # label -> count
    preemption_wait: dict[str, float] = field(default_factory=dict)  # label -> total wait
    end: float = 0.0

    def table(self) -> str:
        """The text table (columns Time, HMX, HVX0.., VTCM 0..)."""
        head = ["Time", "HMX", *[f"HVX{i}" for i in range(self.device.hvx_threads)],
                *[f"VTCM {i}" for i in range(len(self.rows[0].vtcm) if self.rows else 0)]]
        body = [[_fmt(r.time), *r.cells()] for r in self.rows]
        widths = [max(len(x) for x in col) for col in zip(head, *body)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *body]]
        return "\n".join(lines) + "\n"

    def chrometrace(self) -> dict:
        events: list[dict] = []
        pds = sorted({s["pd"] for s in self.spans}) or [0]
        lanes = (["HMX"] + [f"HVX{i}" for i in range(self.device.hvx_threads)]
                 + [f"VTCM {i}" for i in range(_vtcm_columns(self.device))])
        for pd in pds:
            events.append({"ph": "M", "name": "process_name", "pid": pd, "args": {"name": f"PD {pd}"}})
            for tid, lane in enumerate(lanes):
                events.append({"ph": "M", "name": "thread_name", "pid": pd, "tid": tid, "args": {"name": lane}})
        for s in self.spans:
            tids = ([0] if s["hmx"] else []) + [1 + i for i in s["hvx"]] + \
                   [1 + self.device.hvx_threads + i for i in s["vtcm"]]
            for tid in tids:
                events.append({"ph": "X", "name": s["label"], "cat": "execution", "pid": s["pd"],
                               "tid": tid, "ts": s["start"], "dur": s["end"] - s["start"],
                               "args": {"client": s["client"]}})
        for p in self.preemptions:
            events.append({"ph": "i", "name": f"pre-empted by {p['by']}", "cat": "preemption",
                           "pid": p["pd"], "tid": 0, "ts": p["time"], "s": "t",
                           "args": {"client": p["label"], "wait": p["wait"]}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}


def _fmt(t: float) -> str:
    return str(int(t)) if abs(t - round(t)) < EPS else f"{t:g}"


def _vtcm_columns(device: Device) -> int:
    return max(1, device.vtcm_bytes // MIB)


def _device(spec: dict) -> Device:
    if not isinstance(spec, dict):
        raise ScenarioError("device: give an object with soc, or arch / vtcm_mb / hvx_threads")
    if "soc" in spec:
        soc = parse_soc_model(str(spec["soc"]))
        if soc is None:
            raise ScenarioError(f"device.soc: {spec['soc']!r} is no SoC of the emulator's SoC table")
        base = Device.of(soc)
    else:
        base = Device(arch=75, vtcm_bytes=8 * MIB, hvx_threads=4)
    try:
        arch = int(spec.get("arch", base.arch))
        vtcm = int(spec["vtcm_bytes"]) if "vtcm_bytes" in spec else \
            int(spec.get("vtcm_mb", base.vtcm_bytes // MIB)) * MIB
        hvx = int(spec.get("hvx_threads", base.hvx_threads))
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"device: {exc}") from None
    if vtcm <= 0 or hvx <= 0:
        raise ScenarioError("device: vtcm and hvx_threads must be positive")
    return Device(arch=arch, vtcm_bytes=vtcm, hvx_threads=hvx)


def load_clients(scenario: dict, device: Device) -> list[tuple[float, Client, str]]:
    """(arrival, client, label) of every run of every scenario client."""
    out = []
    clients = scenario.get("clients")
    if not isinstance(clients, list) or not clients:
        raise ScenarioError("clients: give a non-empty list")
    for i, spec in enumerate(clients):
        where = f"clients[{i}]"
        try:
            label = str(spec["name"])
            kind = spec.get("kind", "qnn")
            if kind not in ("qnn", "app"):
                raise ScenarioError(f"{where}.kind: {kind!r} is neither 'qnn' nor 'app'")
            prio = os_priority(spec.get("priority", "NORMAL"))
            vtcm = int(spec["vtcm_bytes"]) if "vtcm_bytes" in spec else round(float(spec.get("vtcm_mb", 0)) * MIB)
            vtcm = round_vtcm(vtcm, device.arch)
            hmx = int(spec.get("hmx", 1 if kind == "qnn" else 0))
            hvx, pd = int(spec.get("hvx", 1)), int(spec.get("pd", 0))
            runs = spec["runs"]
        except ScenarioError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ScenarioError(f"{where}: {exc!r}") from None
        if vtcm > device.vtcm_bytes or hvx > device.hvx_threads or hvx < 0 or hmx < 0:
            raise ScenarioError(f"{where}: needs more than the device has (VTCM {vtcm} of "
                                f"{device.vtcm_bytes} bytes, HVX {hvx} of {device.hvx_threads})")
        if kind == "qnn" and hmx < 1:
            raise ScenarioError(f"{where}.hmx: QNN always takes the HMX unit")
        for j, run in enumerate(runs):
            if "ops" in run:
                work = [float(w) for w in run["ops"]]
            elif "duration" in run:
                work = [float(run["duration"])]
            else:
                raise ScenarioError(f"{where}.runs[{j}]: give ops (durations) or duration")
            if not work or any(w <= 0 for w in work):
                raise ScenarioError(f"{where}.runs[{j}]: durations must be positive")
            client = Client(name=f"{label}#{j}", priority=prio, hmx=hmx, hvx=hvx, vtcm=vtcm, pd=pd,
                            qnn=kind == "qnn", work=work, yield_anywhere=kind == "app")
            out.append((float(run.get("at", 0)), client, label))
    return out


def simulate(scenario: dict) -> Timeline:
    """Runs ``scenario`` on the virtual clock."""
    device = _device(scenario.get("device", {}))
    arrivals = load_clients(scenario, device)
    arrivals.sort(key=lambda a: a[0])
    for seq, (_, client, _) in enumerate(arrivals):
        client.seq = seq
    labels = {c.name: label for _, c, label in arrivals}
    placement = Placement(device)
    running: dict[str, Client] = {}
    started: dict[str, float] = {}
    evict_wait_since: dict[str, float] = {}
    finished: set[str] = set()
    tl = Timeline(device, [], [], [])
    now = 0.0
    last_cells = None
    pending = list(arrivals)
    for _ in range(100000):
        ready = [c for at, c, _ in arrivals if at <= now + EPS and c.name not in finished]
        pinned: set[str] = set()
        while True:
            chosen = admit(device, ready, set(running), pinned)
            names = {c.name for c, _ in chosen}
            newly = {n for n, c in running.items() if n not in names and n not in pinned
                     and abs((c.next_yield_point(c.done) or -1) - c.done) > EPS}
            if not newly:
                break
            pinned |= newly
        names = {c.name for c, _ in chosen}
        # a waiting client that outranks a client still running to its yield point waits for
        # that eviction (the pre-emption wait)
        for n in pinned:
            for c in ready:
                if c.name not in running and c.name not in names and c.priority < running[n].priority:
                    evict_wait_since.setdefault(c.name, now)
        # running clients stopping now: pre-empted at their yield point
        for n in [n for n in running if n not in names]:
            c = running.pop(n)
            _close(tl, placement, c, labels, started.pop(n), now)
            by = next((x for x, _ in chosen if x.name not in running), None)
            wait = now - evict_wait_since.get(by.name, now) if by is not None else 0.0
            tl.preemptions.append({"time": now, "client": n, "label": labels[n],
                                   "by": labels[by.name] if by is not None else "",
                                   "pd": c.pd, "wait": wait})
            tl.yields[labels[n]] = tl.yields.get(labels[n], 0) + 1
        for c, _ in chosen:
            if c.name not in running:
                running[c.name] = c
                started[c.name] = now
                if c.name in evict_wait_since:
                    waited = now - evict_wait_since.pop(c.name)
                    tl.preemption_wait[labels[c.name]] = tl.preemption_wait.get(labels[c.name], 0.0) + waited
        # lanes of the clients that keep running stay; new ones are placed
        old = dict(placement.grants)
        grants = placement.update([(c, h) for c, h in chosen])
        for n in running:
            if n in old and old[n] != grants[n]:
                raise AssertionError("a running client's lanes moved")
        cells = _cells(device, grants, labels)
        if cells != last_cells and any(cells):
            tl.rows.append(Row(now, cells[0], cells[1:1 + device.hvx_threads], cells[1 + device.hvx_threads:]))
        last_cells = cells
        # next event
        candidates = [at for at, _, _ in pending if at > now + EPS]
        for n, c in running.items():
            candidates.append(now + c.remaining)
            if n in pinned:
                candidates.append(now + (c.next_yield_point(c.done) or c.total) - c.done)
        if not candidates:
            break
        nxt = min(candidates)
        for c in running.values():
            c.done += nxt - now
        now = nxt
        for n in [n for n, c in running.items() if c.remaining <= EPS]:
            c = running.pop(n)
            _close(tl, placement, c, labels, started.pop(n), now)
            finished.add(n)
    else:
        raise ScenarioError("the scenario does not settle (more than 100000 decisions)")
    tl.end = now
    return tl


def _close(tl: Timeline, placement: Placement, client: Client, labels, start: float, end: float) -> None:
    g = placement.grants[client.name]
    lo, hi = g.vtcm
    vtcm_cols = [i for i in range(_vtcm_columns(placement.device)) if lo < (i + 1) * MIB and hi > i * MIB]
    if end > start + EPS:
        tl.spans.append({"client": client.name, "label": labels[client.name], "pd": client.pd,
                         "start": start, "end": end, "hmx": g.hmx, "hvx": list(g.hvx_lanes),
                         "vtcm": vtcm_cols if hi > lo else []})


def _cells(device: Device, grants, labels) -> list[str]:
    cells = [""] * (1 + device.hvx_threads + _vtcm_columns(device))
    for name, g in grants.items():
        label = labels[name]
        if g.hmx:
            cells[0] = label
        for lane in g.hvx_lanes:
            cells[1 + lane] = label
        lo, hi = g.vtcm
        for i in range(_vtcm_columns(device)):
            if hi > lo and lo < (i + 1) * MIB and hi > i * MIB:
                cells[1 + device.hvx_threads + i] = label
    return cells


def run_file(path: str) -> Timeline:
    with open(path, encoding="utf-8") as f:
        try:
            scenario = json.load(f)
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{path}: not JSON: {exc}") from None
    if not isinstance(scenario, dict):
        raise ScenarioError(f"{path}: the scenario is a JSON object")
    return simulate(scenario)
