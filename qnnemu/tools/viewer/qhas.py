"""QNN HTP Analysis Summary (QNN HTP backend documentation, "QNN HTP Analysis Summary (QHAS)"): an
analysis of optrace documents and its self-contained HTML report.

``summarize(doc)`` is the analysis (plain data: tests and the HTML read it); ``render_html``
writes one page for one or more documents with, per graph, collapsible sections as the
documentation's report has them:

- "HTP Overall Summary" (open): graph, SoC / arch, VTCM budget and peak, spill / fill bytes,
  spill-fill buffer, total and critical-path cycles and their microseconds at the document's
  core clock, steps, runs and the host execute times;
- "QNN Op Types": per op type its steps, cycles, share of all step cycles, wait and overlap
  cycles and microseconds; spill / fill steps appear under the documentation's System Service names
  (TcmToDram / DramToTcm); a pie chart (inline SVG) of the cycles per op type;
- "HTP Ops": every runlist step (name, QNN op type, kind, resource, thread, start, cycles,
  wait, overlap, VTCM bytes) with a filter box per text column;
- "Dominant Path": the timeline of the highest-priority step (priority HMX op, HVX op, DMA
  read, DMA write, launch/wait, CPU, as the documentation lists it);
- "Prepare Passes": what each prepare pass did.

Every table sorts on a column by its header's sort button (numbers numerically) and every
numeric column can be charted as a pie by its chart button; both are vanilla JavaScript in the
page, no external resources.  The page also reads its URL fragment, ``#sort=<table id>:<column
index>:<asc|desc>`` and ``#filter=<table id>:<column index>:<text>`` (joined by ``&``), so a
sorted / filtered view can be linked (and checked by a headless browser).
"""
from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable

from .chrometrace import (
    DOMINANT_PRIORITY,
    SYSTEM_SERVICE,
    check_document,
    core_mhz,
    cycles_to_us,
    document_clocks,
    dominant_path,
    runs_of,
    soc_name,
    step_resources,
)

# A fixed palette so the same report always renders the same (colour-blind friendly order).
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
PIE_MAX_SLICES = 9          # more op types than this: the rest become one "other" slice


def op_type_of(step: dict) -> str:
    return SYSTEM_SERVICE.get(step["kind"]) or step.get("op_type") or step["kind"]


def summarize(doc: dict) -> dict:
    """The analysis of one optrace document (see the module docstring for the sections)."""
    check_document(doc)
    mhz = core_mhz(doc)
    steps = doc["steps"]
    total_step_cycles = sum(s["cycles"] for s in steps)
    types: dict[str, dict] = {}
    for s in steps:
        row = types.setdefault(op_type_of(s), {"op_type": op_type_of(s), "steps": 0, "cycles": 0,
                                                "wait_cycles": 0, "overlap_cycles": 0})
        row["steps"] += 1
        row["cycles"] += s["cycles"]
        row["wait_cycles"] += s.get("wait_cycles", 0)
        row["overlap_cycles"] += s.get("overlap_cycles", 0)
    for row in types.values():
        row["share"] = row["cycles"] / total_step_cycles if total_step_cycles else 0.0
        row["us"] = cycles_to_us(row["cycles"], mhz)
    resources = step_resources(doc)
    ops = [{"step": s["index"], "name": s["name"], "op_type": op_type_of(s), "kind": s["kind"],
            "resource": s["resource"], "thread": s["thread"], "start_cycle": s["start_cycle"],
            "cycles": s["cycles"], "wait_cycles": s.get("wait_cycles", 0),
            "overlap_cycles": s.get("overlap_cycles", 0),
            "overlap_wait_cycles": s.get("overlap_wait_cycles", 0), "vtcm_bytes": s.get("vtcm_bytes", 0),
            "resources": resources[s["index"]]}
           for s in sorted(steps, key=lambda s: (s["start_cycle"], s["index"]))]
    runs = runs_of(doc)
    host = [r.end_us - r.start_us for r in runs if None not in (r.start_us, r.end_us)]
    path = dominant_path(doc)
    overall = {
        "graph": doc["graph"], "soc_model": doc["soc_model"], "soc": soc_name(doc["soc_model"]),
        "arch": f"v{doc['arch']}", "vtcm_budget_bytes": doc["vtcm_budget_bytes"],
        "peak_vtcm_bytes": doc["peak_vtcm_bytes"], "spill_bytes": doc["spill_bytes"],
        "fill_bytes": doc["fill_bytes"],
        "spill_fill_buffer_bytes": doc.get("spill_fill_buffer_bytes", 0),
        "total_cycles": doc["total_cycles"], "total_us": cycles_to_us(doc["total_cycles"], mhz),
        "critical_path_cycles": doc["critical_path_cycles"],
        "critical_path_us": cycles_to_us(doc["critical_path_cycles"], mhz),
        "steps": len(steps), "ops": sum(1 for s in steps if s["kind"] == "op"),
        "spills": sum(1 for s in steps if s["kind"] == "spill"),
        "fills": sum(1 for s in steps if s["kind"] == "fill"),
        "dominant_path_cycles": sum(seg["cycles"] for seg in path),
        "runs": len(host) if host else 0,
        "host_execute_us_avg": sum(host) / len(host) if host else None,
        "host_execute_us_min": min(host) if host else None,
        "host_execute_us_max": max(host) if host else None,
        "clocks": document_clocks(doc)}
    return {"overall": overall,
            "op_types": sorted(types.values(), key=lambda r: r["op_type"]),
            "ops": ops, "dominant_path": path, "passes": list(doc.get("passes", []))}


# ----------------------------------------------------------------------------- SVG pie
def pie_slices(values: list[tuple[str, float]], max_slices: int = PIE_MAX_SLICES) -> list[tuple[str, float]]:
    """The (label, value) slices drawn: positive values, largest first, the tail beyond
    ``max_slices`` summed into "other"."""
    values = sorted(((k, v) for k, v in values if v > 0), key=lambda kv: (-kv[1], kv[0]))
    if len(values) > max_slices:
        values = values[:max_slices - 1] + [("other", sum(v for _, v in values[max_slices - 1:]))]
    return values


def pie_svg(values: list[tuple[str, float]], title: str, svg_id: str) -> str:
    """An inline SVG pie chart with a legend (label, value, percent) of ``values``."""
    slices = pie_slices(values)
    total = sum(v for _, v in slices)
    r, cx, cy = 90, 100, 100
    height = max(210, 24 + 18 * len(slices))
    parts = [(f'<svg id="{svg_id}" class="pie" xmlns="http://www.w3.org/2000/svg" width="520" '
              f'height="{height}" viewBox="0 0 520 {height}" role="img" aria-label="{html.escape(title)}">'),
             f"<title>{html.escape(title)}</title>"]
    if total <= 0:
        parts.append('<text x="10" y="20">no data</text></svg>')
        return "".join(parts)
    angle = -math.pi / 2
    for i, (label, value) in enumerate(slices):
        colour = PALETTE[i % len(PALETTE)]
        frac = value / total
        tip = f"{label}: {value:g} ({frac:.1%})"
        if frac >= 0.999999:
            parts.append(f'<circle class="slice" cx="{cx}" cy="{cy}" r="{r}" fill="{colour}" '
                         f'data-label="{html.escape(label)}"><title>{html.escape(tip)}</title></circle>')
        else:
            end = angle + 2 * math.pi * frac
            x1, y1 = cx + r * math.cos(angle), cy + r * math.sin(angle)
            x2, y2 = cx + r * math.cos(end), cy + r * math.sin(end)
            large = 1 if frac > 0.5 else 0
            parts.append(f'<path class="slice" d="M{cx},{cy} L{x1:.2f},{y1:.2f} A{r},{r} 0 {large} 1 '
                         f'{x2:.2f},{y2:.2f} Z" fill="{colour}" data-label="{html.escape(label)}">'
                         f'<title>{html.escape(tip)}</title></path>')
            angle = end
        y = 20 + 18 * i
        parts.append(f'<rect x="210" y="{y - 10}" width="12" height="12" fill="{colour}"/>'
                     f'<text x="228" y="{y}" font-size="12">{html.escape(label)}: {value:g} '
                     f'({frac:.1%})</text>')
    parts.append("</svg>")
    return "".join(parts)


# ----------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} summary{font-size:1.15em;font-weight:bold;cursor:pointer;margin:.6em 0}
table{border-collapse:collapse;margin:.4em 0 1em 0;font-size:13px}
th,td{border:1px solid #bbb;padding:2px 6px} th{background:#eef}
td.num{text-align:right;font-variant-numeric:tabular-nums}
button.sort,button.chart{border:none;background:none;cursor:pointer;padding:0 2px;font-size:12px}
input.filter{width:8em;font-size:12px}
.graph{border-top:2px solid #446;margin-top:1.2em}
"""

_JS = r"""
(function(){
function cellValue(row, col){
  var c = row.cells[col]; var v = c.getAttribute('data-value');
  if (v !== null && v !== '' && !isNaN(Number(v))) return Number(v);
  return c.textContent.trim().toLowerCase();
}
function sortTable(table, col, dir){
  var body = table.tBodies[0]; var rows = Array.prototype.slice.call(body.rows);
  var sign = dir === 'desc' ? -1 : 1;
  rows.sort(function(a, b){
    var x = cellValue(a, col), y = cellValue(b, col);
    if (typeof x === 'number' && typeof y === 'number') return sign * (x - y);
    return sign * String(x).localeCompare(String(y));
  });
  rows.forEach(function(r){ body.appendChild(r); });
  table.setAttribute('data-sorted', col + ':' + dir);
}
function applyFilters(table){
  var inputs = table.querySelectorAll('input.filter');
  var rows = table.tBodies[0].rows;
  for (var i = 0; i < rows.length; i++){
    var show = true;
    inputs.forEach(function(inp){
      var text = inp.value.trim().toLowerCase(); var col = Number(inp.getAttribute('data-col'));
      if (text && rows[i].cells[col].textContent.toLowerCase().indexOf(text) < 0) show = false;
    });
    rows[i].style.display = show ? '' : 'none';
    rows[i].setAttribute('data-shown', show ? '1' : '0');
  }
}
var PALETTE = %PALETTE%;
function chartColumn(table, col){
  var rows = Array.prototype.slice.call(table.tBodies[0].rows).filter(function(r){
    return r.style.display !== 'none'; });
  var labelCol = Number(table.getAttribute('data-label-col') || 0);
  var data = rows.map(function(r){ return [r.cells[labelCol].textContent.trim(),
                                           Number(r.cells[col].getAttribute('data-value')) || 0]; })
                 .filter(function(d){ return d[1] > 0; })
                 .sort(function(a, b){ return b[1] - a[1]; });
  if (data.length > 9){ var rest = data.slice(8).reduce(function(s, d){ return s + d[1]; }, 0);
                        data = data.slice(0, 8).concat([['other', rest]]); }
  var total = data.reduce(function(s, d){ return s + d[1]; }, 0);
  var ns = 'http://www.w3.org/2000/svg';
  var holder = document.getElementById(table.id + '-chart');
  holder.innerHTML = '';
  var svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'pie'); svg.setAttribute('width', '520');
  svg.setAttribute('height', String(Math.max(210, 24 + 18 * data.length)));
  var title = table.tHead.rows[0].cells[col].getAttribute('data-name');
  svg.setAttribute('aria-label', title);
  var angle = -Math.PI / 2;
  data.forEach(function(d, i){
    var frac = total ? d[1] / total : 0; var colour = PALETTE[i % PALETTE.length];
    var el;
    if (frac >= 0.999999){ el = document.createElementNS(ns, 'circle');
      el.setAttribute('cx', 100); el.setAttribute('cy', 100); el.setAttribute('r', 90); }
    else { var end = angle + 2 * Math.PI * frac;
      el = document.createElementNS(ns, 'path');
      el.setAttribute('d', 'M100,100 L' + (100 + 90 * Math.cos(angle)) + ',' + (100 + 90 * Math.sin(angle)) +
        ' A90,90 0 ' + (frac > 0.5 ? 1 : 0) + ' 1 ' +
        (100 + 90 * Math.cos(end)) + ',' + (100 + 90 * Math.sin(end)) + ' Z');
      angle = end; }
    el.setAttribute('class', 'slice'); el.setAttribute('fill', colour); el.setAttribute('data-label', d[0]);
    svg.appendChild(el);
    var t = document.createElementNS(ns, 'text'); t.setAttribute('x', 228); t.setAttribute('y', 20 + 18 * i);
    t.setAttribute('font-size', 12);
    t.textContent = d[0] + ': ' + d[1] + ' (' + (100 * frac).toFixed(1) + '%)';
    svg.appendChild(t);
  });
  holder.appendChild(svg);
}
document.querySelectorAll('table.qhas').forEach(function(table){
  table.querySelectorAll('button.sort').forEach(function(b){
    b.addEventListener('click', function(){
      var col = Number(b.getAttribute('data-col'));
      var cur = table.getAttribute('data-sorted');
      sortTable(table, col, cur === col + ':desc' ? 'asc' : 'desc');
    });
  });
  table.querySelectorAll('button.chart').forEach(function(b){
    b.addEventListener('click', function(){ chartColumn(table, Number(b.getAttribute('data-col'))); });
  });
  table.querySelectorAll('input.filter').forEach(function(inp){
    inp.addEventListener('input', function(){ applyFilters(table); });
  });
});
// Deep links: #sort=<table>:<col>:<dir>&filter=<table>:<col>:<text>
location.hash.replace(/^#/, '').split('&').forEach(function(part){
  var eq = part.indexOf('='); if (eq < 0) return;
  var key = part.slice(0, eq); var f = decodeURIComponent(part.slice(eq + 1)).split(':');
  var table = document.getElementById(f[0]); if (!table) return;
  if (key === 'sort') sortTable(table, Number(f[1]), f[2] === 'asc' ? 'asc' : 'desc');
  if (key === 'filter'){
    var inp = table.querySelector('input.filter[data-col="' + Number(f[1]) + '"]');
    if (inp){ inp.value = f.slice(2).join(':'); applyFilters(table); }
  }
  if (key === 'chart') chartColumn(table, Number(f[1]));
});
document.body.setAttribute('data-ready', '1');
})();
"""


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def _table(table_id: str, columns: list[tuple[str, str, str]], rows: list[dict],
           label_col: int = 0) -> str:
    """columns: (key, header, "num" | "text" | "filter") -- "filter" text columns get a filter
    box; "num" columns a chart button and a ``data-value`` per cell for sorting/charting."""
    out = [f'<table class="qhas" id="{table_id}" data-label-col="{label_col}"><thead><tr>']
    for i, (_key, header, kind) in enumerate(columns):
        chart = (f'<button class="chart" data-col="{i}" title="pie chart of this column">'
                 f'&#9684;</button>') if kind == "num" else ""
        out.append(f'<th data-name="{html.escape(header)}" data-kind="{kind}">{html.escape(header)}'
                   f'<button class="sort" data-col="{i}" title="sort">&#8645;</button>{chart}</th>')
    out.append("</tr>")
    if any(kind == "filter" for _, _, kind in columns):
        out.append('<tr class="filters">')
        for i, (_key, header, kind) in enumerate(columns):
            out.append(f'<th><input class="filter" data-col="{i}" placeholder="filter" '
                       f'aria-label="filter {html.escape(header)}"></th>' if kind == "filter" else "<th></th>")
        out.append("</tr>")
    out.append("</thead><tbody>")
    for row in rows:
        out.append("<tr>")
        for key, _header, kind in columns:
            value = row.get(key)
            if kind == "num" and isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append(f'<td class="num" data-value="{value!r}">{html.escape(_fmt(value))}</td>')
            else:
                out.append(f"<td>{html.escape(_fmt(value))}</td>")
        out.append("</tr>")
    out.append(f'</tbody></table><div class="chart-holder" id="{table_id}-chart"></div>')
    return "".join(out)


def _overall_table(overall: dict) -> str:
    rows = [("Graph", overall["graph"]), ("SoC", f"{overall['soc']} ({overall['soc_model']})"),
            ("HTP arch", overall["arch"]),
            ("Core clock", (f"{overall['clocks']['core_mhz']:g} MHz ({overall['clocks'].get('corner', '')}, "
                            f"{overall['clocks']['source']})")),
            ("VTCM budget (bytes)", overall["vtcm_budget_bytes"]),
            ("Peak VTCM (bytes)", overall["peak_vtcm_bytes"]),
            ("Spill bytes", overall["spill_bytes"]), ("Fill bytes", overall["fill_bytes"]),
            ("Spill-fill buffer (bytes)", overall["spill_fill_buffer_bytes"]),
            ("Total cycles", overall["total_cycles"]), ("Total (us)", overall["total_us"]),
            ("Critical path cycles", overall["critical_path_cycles"]),
            ("Critical path (us)", overall["critical_path_us"]),
            ("Dominant path cycles", overall["dominant_path_cycles"]),
            ("Steps (ops / spills / fills)",
             f"{overall['steps']} ({overall['ops']} / {overall['spills']} / {overall['fills']})"),
            ("Runs", overall["runs"]),
            ("Host execute (us) avg / min / max",
             " / ".join(_fmt(overall[k]) for k in ("host_execute_us_avg", "host_execute_us_min",
                                                    "host_execute_us_max")))]
    body = "".join(f'<tr><th scope="row">{html.escape(k)}</th>'
                   f'<td{" class=num" if isinstance(v, (int, float)) else ""}>{html.escape(_fmt(v))}</td></tr>'
                   for k, v in rows)
    return f'<table class="overall">{body}</table>'


def render_html(docs: Iterable[dict], title: str = "QNN HTP Analysis Summary") -> str:
    """The QHAS HTML report of the documents: one self-contained page."""
    docs = list(docs)
    sections = []
    for g, doc in enumerate(docs):
        s = summarize(doc)
        ov = s["overall"]
        p = f"g{g}"
        op_types = [dict(r, share=round(100 * r["share"], 2), us=round(r["us"], 3)) for r in s["op_types"]]
        types_table = _table(f"{p}-optypes", [("op_type", "QNN Op Type", "filter"),
                                               ("steps", "Steps", "num"), ("cycles", "Cycles", "num"),
                                               ("share", "% of cycles", "num"), ("us", "us", "num"),
                                               ("wait_cycles", "Wait cycles", "num"),
                                               ("overlap_cycles", "Overlap cycles", "num")], op_types)
        pie = pie_svg([(r["op_type"], r["cycles"]) for r in s["op_types"]],
                      f"{ov['graph']}: cycles per op type", f"{p}-optypes-pie")
        ops_table = _table(f"{p}-ops", [("step", "Step", "num"), ("name", "HTP Op", "filter"),
                                         ("op_type", "QNN Op", "filter"), ("kind", "Kind", "filter"),
                                         ("resource", "Resource", "filter"), ("thread", "Thread", "num"),
                                         ("start_cycle", "Start cycle", "num"), ("cycles", "Cycles", "num"),
                                         ("wait_cycles", "Wait cycles", "num"),
                                         ("overlap_cycles", "Overlap cycles", "num"),
                                         ("overlap_wait_cycles", "Overlap (wait) cycles", "num"),
                                         ("vtcm_bytes", "VTCM bytes", "num"),
                                         ("resources", "Resources", "filter")], s["ops"], label_col=1)
        path_rows = [dict(seg, order=i) for i, seg in enumerate(s["dominant_path"])]
        path_table = _table(f"{p}-path", [("order", "#", "num"), ("name", "HTP Op", "filter"),
                                           ("op_type", "QNN Op", "filter"), ("class", "Priority class", "filter"),
                                           ("resource", "Resource", "filter"),
                                           ("start_cycle", "Start cycle", "num"),
                                           ("end_cycle", "End cycle", "num"), ("cycles", "Cycles", "num")],
                            path_rows, label_col=1)
        passes = "".join(f"<li>{html.escape(line)}</li>" for line in s["passes"]) or "<li>none recorded</li>"
        priority = ", ".join(DOMINANT_PRIORITY)
        sections.append(
            f'<div class="graph" id="{p}"><h2>Graph {html.escape(ov["graph"])}</h2>'
            f'<details open id="{p}-overall"><summary>HTP Overall Summary</summary>{_overall_table(ov)}</details>'
            f'<details open id="{p}-types"><summary>QNN Op Types</summary>{types_table}{pie}</details>'
            f'<details id="{p}-htpops"><summary>HTP Ops</summary>{ops_table}</details>'
            f'<details id="{p}-dominant"><summary>Dominant Path</summary>'
            f'<p>The highest-priority step at each instant; priority: {html.escape(priority)}.</p>'
            f'{path_table}</details>'
            f'<details id="{p}-passes"><summary>Prepare Passes</summary><ol>{passes}</ol></details></div>')
    js = _JS.replace("%PALETTE%", json.dumps(list(PALETTE)))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>'
            f'<p>Produced by qnnemu-profile-viewer from {len(docs)} optrace document(s). Sort a column '
            f'with &#8645;, chart it with &#9684;, filter rows with the boxes.</p>'
            f'{"".join(sections)}<script>{js}</script></body></html>\n')
