"""Checks of what the profile viewer writes (qnnemu/tools/profile_viewer.py; QNN HTP backend
documentation, optrace "Post Process (Chrometrace Generation)", "QNN HTP Analysis Summary
(QHAS)"): ``check_trace`` against the Trace Event Format (required keys per phase, numeric
counters, named processes/threads, per-lane ordering and nesting), readers of a trace's X
events, thread names and counter series, and ``parse_html`` for the QHAS report's tables and
SVG pies.  Used by tests/test_profile_viewer.py and tests/test_htp_acceptance.py."""
from __future__ import annotations

import json
import math
from html.parser import HTMLParser

# Debian's chromium, to render the HTML report headless when it is installed.
CHROMIUM = "/usr/bin/chromium"


# ------------------------------------------------------------------------ trace checker
PHASES_REQUIRED = {
    "X": ("name", "ts", "dur", "pid", "tid"),
    "B": ("name", "ts", "pid", "tid"),
    "E": ("ts", "pid", "tid"),
    "C": ("name", "ts", "pid", "args"),
    "i": ("name", "ts", "pid", "tid"),
    "I": ("name", "ts", "pid", "tid"),
    "M": ("name", "pid", "args"),
    # flow events (start, finish): the optrace config's flow-event features
    "s": ("name", "cat", "id", "ts", "pid", "tid"),
    "f": ("name", "cat", "id", "ts", "pid", "tid"),
}
METADATA_ARGS = {"process_name": ("name", str), "thread_name": ("name", str),
                 "process_sort_index": ("sort_index", int), "thread_sort_index": ("sort_index", int),
                 "process_labels": ("labels", str)}


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_trace(trace) -> list[str]:
    """Problems of ``trace`` as a Trace Event Format JSON object (empty: valid)."""
    problems: list[str] = []
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["not a JSON object with a traceEvents list"]
    if trace.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        problems.append(f"displayTimeUnit {trace['displayTimeUnit']!r}")
    try:
        if json.loads(json.dumps(trace, allow_nan=False)) != trace:
            problems.append("does not survive a JSON round trip")
    except ValueError as e:
        problems.append(f"not strict JSON: {e}")
    named_pids, named_tids = set(), set()
    used_pids, used_tids = set(), set()
    lanes: dict[tuple, list[tuple[float, float, int]]] = {}
    counters: dict[tuple, tuple[float, set]] = {}
    begin_depth: dict[tuple, int] = {}
    flows: dict[tuple, list[str]] = {}
    for n, e in enumerate(trace["traceEvents"]):
        ph = e.get("ph") if isinstance(e, dict) else None
        if ph not in PHASES_REQUIRED:
            problems.append(f"event {n}: phase {ph!r}")
            continue
        missing = [k for k in PHASES_REQUIRED[ph] if k not in e]
        if missing:
            problems.append(f"event {n} ({ph}): missing {missing}")
            continue
        if "args" in e and not isinstance(e["args"], dict):
            problems.append(f"event {n}: args is not an object")
        if not isinstance(e["pid"], int) or ("tid" in e and not isinstance(e["tid"], int)):
            problems.append(f"event {n}: pid/tid not integers")
        if ph != "M" and (not _is_number(e["ts"]) or e["ts"] < 0):
            problems.append(f"event {n}: ts {e['ts']!r}")
            continue
        if ph != "M" and not isinstance(e.get("name", ""), str):
            problems.append(f"event {n}: name is not a string")
        if ph == "M":
            spec = METADATA_ARGS.get(e["name"])
            if spec is None or not isinstance(e["args"].get(spec[0]), spec[1]):
                problems.append(f"event {n}: metadata {e['name']!r} args {e['args']}")
                continue
            if e["name"].startswith("process"):
                named_pids.add(e["pid"]) if e["name"] == "process_name" else None
            elif e["name"] == "thread_name":
                named_tids.add((e["pid"], e.get("tid")))
        elif ph == "X":
            if not _is_number(e["dur"]) or e["dur"] < 0:
                problems.append(f"event {n}: dur {e['dur']!r}")
                continue
            lanes.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], n))
            used_pids.add(e["pid"])
            used_tids.add((e["pid"], e["tid"]))
        elif ph == "C":
            values = e["args"]
            if not values or not all(_is_number(v) for v in values.values()):
                problems.append(f"event {n}: counter {e['name']!r} values {values}")
                continue
            key = (e["pid"], e["name"], e.get("id"))
            last_ts, series = counters.get(key, (-1.0, set(values)))
            if e["ts"] < last_ts:
                problems.append(f"event {n}: counter {e['name']!r} goes back in time")
            if set(values) != series:
                problems.append(f"event {n}: counter {e['name']!r} changes its series")
            counters[key] = (e["ts"], series)
            used_pids.add(e["pid"])
        elif ph in ("i", "I"):
            if e.get("s", "t") not in ("g", "p", "t"):
                problems.append(f"event {n}: instant scope {e.get('s')!r}")
            used_pids.add(e["pid"])
            used_tids.add((e["pid"], e["tid"]))
        elif ph in ("s", "f"):
            flows.setdefault((e["cat"], e["id"]), []).append(ph)
            used_pids.add(e["pid"])
            used_tids.add((e["pid"], e["tid"]))
        else:  # B / E
            key = (e["pid"], e["tid"])
            begin_depth[key] = begin_depth.get(key, 0) + (1 if ph == "B" else -1)
            if begin_depth[key] < 0:
                problems.append(f"event {n}: E without B")
            used_pids.add(e["pid"])
            used_tids.add(key)
    problems += [f"B without E on {k}" for k, depth in begin_depth.items() if depth > 0]
    problems += [f"flow {k}: phases {v} (one s, then one f)" for k, v in flows.items() if v != ["s", "f"]]
    problems += [f"pid {p} has no process_name" for p in sorted(used_pids - named_pids)]
    problems += [f"lane {t} has no thread_name" for t in sorted(used_tids - named_tids)]
    eps = 1e-9
    for lane, spans in lanes.items():
        stack: list[tuple[float, float, int]] = []
        last_ts = -1.0
        for start, end, n in spans:
            if start < last_ts - eps:
                problems.append(f"lane {lane}: event {n} starts before the previous one")
            last_ts = start
            while stack and stack[-1][1] <= start + eps:
                stack.pop()
            if stack and end > stack[-1][1] + eps:
                problems.append(f"lane {lane}: event {n} [{start}, {end}] overlaps event "
                                f"{stack[-1][2]} [{stack[-1][0]}, {stack[-1][1]}] without nesting")
            stack.append((start, end, n))
    return problems


def assert_valid(trace) -> None:
    problems = check_trace(trace)
    assert not problems, "the chrometrace follows the Trace Event Format: " + "; ".join(problems[:8])


def x_events(trace, cat=None, pid=None):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"] == cat)
            and (pid is None or e["pid"] == pid)]


def thread_names(trace) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def counter_series(trace, name, series, pid=1) -> list[tuple[float, float]]:
    return [(e["ts"], e["args"][series]) for e in trace["traceEvents"]
            if e["ph"] == "C" and e["name"] == name and e["pid"] == pid]


class HtmlPage(HTMLParser):
    """Tables (id -> header texts, body rows of cell texts), SVG pies and external references."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, dict] = {}
        self.svgs = 0
        self.slices: dict[str, list[str]] = {}
        self.external: list[str] = []
        self.scripts = 0
        self.details: list[str] = []
        self._table = None
        self._section = None
        self._row = None
        self._cell = None
        self._svg = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if a.get(key):
                self.external.append(a[key])
        if tag == "script":
            self.scripts += 1
        elif tag == "details":
            self.details.append(a.get("id", ""))
        elif tag == "table" and a.get("class") == "qhas":
            self._table = a["id"]
            self.tables[self._table] = {"headers": [], "rows": []}
        elif tag in ("thead", "tbody") and self._table:
            self._section = tag
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "svg":
            self.svgs += 1
            self._svg = a.get("id")
            self.slices[self._svg] = []
        elif tag in ("path", "circle") and self._svg and "slice" in (a.get("class") or ""):
            self.slices[self._svg].append(a.get("data-label"))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._section == "thead" and not self.tables[self._table]["headers"]:
                self.tables[self._table]["headers"] = self._row
            elif self._section == "tbody":
                self.tables[self._table]["rows"].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = self._section = None
        elif tag == "svg":
            self._svg = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse_html(text: str) -> HtmlPage:
    page = HtmlPage()
    page.feed(text)
    page.close()
    return page
