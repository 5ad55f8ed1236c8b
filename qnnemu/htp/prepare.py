"""The HTP prepare pipeline at graphFinalize (QNN HTP backend documentation, "Scheduling and
Allocation").

``prepare_graph(graph) -> PreparedPlan`` runs the six passes of that section, each leaving its
result in the plan (qnnemu/htp/plan_types.py) and one line in ``plan.passes``:

1. register blocks: every tensor a node touches becomes a block with its memory type, size and
   alignment -- graph inputs/outputs and static weights ``Plain`` (DDR, streamed through VTCM by
   DMA), activations ``TCM`` (VTCM; float32 held as float16); ops that need working memory get
   a ``TCM`` scratch block; views and folded relus write in place (their output shares the
   input's block);
2. pre-schedule: a topological order (the "runlist") that lowers the peak of live TCM bytes: the
   graph is partitioned at low-TCM boundaries until each part is small enough to order exactly
   (a search over the part's dependency-closed prefixes); never worse than graph order;
3. spill/fill insertion: walking the runlist, where the live TCM set of an op exceeds the VTCM
   budget, the block needed furthest in the future is copied out to DDR (spill, once per
   tensor) and copied back (fill) before its next use.  An op whose own working set exceeds
   the budget is tiled (qnnemu/htp/tiling.py: the access rule of its family, double-buffered
   tiles of the largest size that fits): its inputs are read from DDR copies and its outputs
   written to DDR copies, tile by tile; only an op whose smallest tile cannot fit fails
   finalize (rule QNNEMU-prepare-working-set).  The pass runs over a ladder of budgets and
   keeps the fewest spill bytes, then fill bytes, so spill bytes never grow with the VTCM
   budget, nor fill bytes at equal spill bytes, nor tiles and tile bytes at equal spill and
   fill bytes (tiles alone may: docs/htp-prepare.md "Monotone in the budget");
4. launch/wait split: DMA copies (spill, fill, and each tile's fill and spill) and HMX ops become
   a launch step on their background resource and a wait step their consumers depend on;
5. offset allocation: TCM blocks get VTCM offsets (greedy by size, blocks not live together may
   share addresses, preferring addresses whose previous owners died long ago), the ordering
   constraints such sharing creates are recorded, spilled copies get offsets in the spill-fill
   buffer;
6. re-schedule: list scheduling of the steps over the HVX threads, the HMX unit and the DMA queue
   within dependencies and the allocator's constraints (start/end, wait and overlap cycles).

The plan is a model of what the HTP would do; the numeric execution (qnnemu/core/plan.py) is
separate and unaffected.  docs/htp-prepare.md documents the passes, sizes and formulas.
"""
from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import QnnError
from ..headers import Q
from ..location import Location
from ..rules import error
from . import cost, services, tiling
from .plan_types import PLAIN, TCM, Block, PreparedPlan, Step, Tiling
from .settings import device_model, graph_settings

TCM_ALIGN = 2048             # VTCM blocks: size and alignment granule (one 2 KiB crouton)
PLAIN_ALIGN = 256            # DDR blocks (graph I/O, weights, spilled copies)
BUDGET_GRANULE = 64 * 1024   # VTCM requests are multiples of 64 KiB ("Byte-Granularity VTCM")
PRESCHEDULE_STATE_LIMIT = 1000   # prefixes the exact ordering of one partition may explore
O3_SEARCH_FACTOR = 4             # optimization level 3 with the SoC configured explores this much more
RECENT_STEPS = 8             # allocator: sharing addresses with a block freed this recently costs parallelism
WAIT_CYCLES = 0              # a wait step only synchronizes


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def _log(graph):
    return getattr(graph, "log", None)


# ---------------------------------------------------------------------------------- analysis
@dataclass
class _Tensor:
    tid: int
    name: str
    kind: str          # TCM or PLAIN
    size: int          # aligned bytes
    raw: int           # bytes of the data
    producer: int | None = None      # node index
    consumers: tuple[int, ...] = ()  # node indices (sorted, unique); a block: of every alias too
    alias_of: int | None = None      # the tensor whose block this one shares (in-place op output)


@dataclass
class _Node:
    index: int
    name: str
    op_type: str
    tcm_in: tuple[int, ...]
    tcm_out: tuple[int, ...]
    plain_in: tuple[int, ...]
    plain_out: tuple[int, ...]
    scratch: int
    cost: cost.OpCost
    preds: frozenset

    @property
    def working_set(self) -> int:
        return self.in_bytes + self.out_bytes + self.scratch

    in_bytes: int = 0
    out_bytes: int = 0


class _Analysis:
    """Per-tensor and per-node facts the passes share."""

    def __init__(self, graph, model, settings):
        self.graph, self.model, self.settings = graph, model, settings
        self.tensors: dict[int, _Tensor] = {}
        consumers: dict[int, set] = {}
        for k, node in enumerate(graph.nodes):
            for tid in (*node.inputs, *node.outputs):
                if tid is not None and tid not in self.tensors:
                    t = graph.tensor(tid)
                    if cost.in_ddr(t):
                        raw = cost.tensor_bytes(t)
                        self.tensors[tid] = _Tensor(tid, t.name, PLAIN, _round_up(raw, PLAIN_ALIGN), raw)
                    else:
                        raw = cost.vtcm_tensor_bytes(t)
                        self.tensors[tid] = _Tensor(tid, t.name, TCM, max(TCM_ALIGN, _round_up(raw, TCM_ALIGN)), raw)
            for tid in node.inputs:
                if tid is not None:
                    consumers.setdefault(tid, set()).add(k)
            for tid in node.outputs:
                self.tensors[tid].producer = k
        for tid, cs in consumers.items():
            self.tensors[tid].consumers = tuple(sorted(cs))
        # In-place ops: a view (Reshape, Squeeze, ExpandDims) or a relu folded into its
        # convolution writes its output over its input when nothing else reads the input: the
        # output shares the input's block (one block per storage, named after the first tensor).
        self.in_place: set[int] = set()
        for k, node in enumerate(graph.nodes):
            ins = [t for t in node.inputs if t is not None]
            if len(ins) != 1 or len(node.outputs) != 1:
                continue
            src, dst = self.tensors[ins[0]], self.tensors[node.outputs[0]]
            if src.kind == TCM and dst.kind == TCM and src.consumers == (k,) and src.size == dst.size and \
                    (cost.op_class(node.op_type).kind == "view" or cost.folded_relu(node, graph, settings)):
                dst.alias_of = self.root(src.tid)
                self.in_place.add(k)
        for t in self.tensors.values():
            if t.alias_of is not None:
                root = self.tensors[t.alias_of]
                root.consumers = tuple(sorted({*root.consumers, *t.consumers}))
        self.nodes: list[_Node] = []
        for k, node in enumerate(graph.nodes):
            ins = list(dict.fromkeys(t for t in node.inputs if t is not None))
            outs = list(dict.fromkeys(node.outputs))
            c = cost.op_cost(node, graph, model, settings)
            scratch = cost.scratch_bytes(node, settings, graph) + cost.stream_buffer_bytes(
                cost.vtcm_streamed_bytes(node, graph, settings, c.resource), cost.stream_rows_bytes(node, graph))
            # A value a LATER node produces (an APP_READWRITE tensor carrying state to the next
            # execute) is read as the previous execute left it: no dependency.
            preds = frozenset(p for t in ins if (p := self.tensors[t].producer) is not None and p < k)
            tcm_in = tuple(dict.fromkeys(self.root(t) for t in ins if self.tensors[t].kind == TCM))
            tcm_out = tuple(t for t in outs if self.tensors[t].kind == TCM and self.tensors[t].alias_of is None)
            n = _Node(k, node.name, node.op_type, tcm_in, tcm_out,
                      tuple(t for t in ins if self.tensors[t].kind == PLAIN),
                      tuple(t for t in outs if self.tensors[t].kind == PLAIN), scratch, c, preds)
            n.in_bytes = sum(self.tensors[t].size for t in tcm_in)
            n.out_bytes = sum(self.tensors[t].size for t in tcm_out)
            self.nodes.append(n)

        self._catalogs: dict[int, tiling.TileCatalog | None] = {}

    # ---- tiling
    def catalog(self, v: int) -> tiling.TileCatalog | None:
        """Every way to tile node ``v`` (None for in-place ops: they run on their input's block,
        in VTCM or, when it is bigger than the budget, on its DDR copy)."""
        if v not in self._catalogs:
            self._catalogs[v] = None if v in self.in_place else self._make_catalog(v)
        return self._catalogs[v]

    def _make_catalog(self, v: int) -> tiling.TileCatalog:
        node, n = self.graph.nodes[v], self.nodes[v]
        pattern = tiling.access_pattern(node)
        widen = cost.widened_element_bytes(node)
        by_index_in = {sl.index: sl for sl in pattern.inputs}
        by_index_out = {sl.index: sl for sl in pattern.outputs}

        def tensors(tids, specs, slices, wanted):
            out, seen = [], set()
            for i, (tid, spec) in enumerate(zip(tids, specs)):
                if tid is None or spec is None:
                    continue
                root = self.root(tid)
                if root not in wanted or root in seen:
                    continue
                seen.add(root)
                shape = tuple(int(d) for d in spec.shape)
                sl = slices.get(i) or tiling.Slice(i, tuple(tiling.AxisMap("full", extent=e) for e in shape), shape)
                elems = math.prod(shape) or 1
                stored = self.tensors[tid].raw / elems
                out.append(tiling.Tensor(sl, max(stored, widen), self.tensors[tid].raw, root, stored))
            return out
        ins = tensors(node.inputs, node.input_specs, by_index_in, set(n.tcm_in))
        outs = tensors(node.outputs, node.output_specs, by_index_out, set(n.tcm_out))
        # a tile streams its share of the DDR activations and all the weights; the widening
        # scratch of "widen" ops moves into the slices (they are counted at 16 bits)
        streamed = cost.vtcm_streamed_bytes(node, self.graph, self.settings, n.cost.resource)
        weights = cost.vtcm_streamed_bytes(node, self.graph, self.settings, n.cost.resource, activations=False)
        rows = cost.stream_rows_bytes(node, self.graph)
        fixed = 0 if widen else cost.scratch_bytes(node, self.settings, self.graph)

        def scratch(share: float) -> int:
            plain = weights + math.ceil((streamed - weights) * share)
            return fixed + cost.stream_buffer_bytes(plain, rows)
        return tiling.TileCatalog(pattern, ins, outs, scratch)

    def min_working_set(self, v: int) -> int:
        """The least VTCM node ``v`` can run in: its working set, its smallest tile's, or for
        an in-place op whose block is on DDR nothing but its scratch."""
        n = self.nodes[v]
        if v in self.in_place:
            return n.scratch
        c = self.catalog(v)
        small = c.smallest() if c is not None else None
        return min(n.working_set, small.working_set) if small is not None else n.working_set

    def floor(self) -> int:
        """The least budget every op fits (whole, tiled or on its DDR copy): the largest of the
        ops' least working sets (only ops with a working set above the running answer need
        their tilings listed)."""
        out = 0
        for v in sorted(range(len(self.nodes)), key=lambda v: -self.nodes[v].working_set):
            if self.nodes[v].working_set <= out:
                break
            out = max(out, self.min_working_set(v))
        return out

    def tiling(self, v: int, budget: int) -> tiling.Option | None:
        """The tiling of node ``v`` at ``budget`` (None: it is not tiled, or cannot be)."""
        if v in self.in_place or self.nodes[v].working_set <= budget:
            return None
        c = self.catalog(v)
        return c.best(budget) if c is not None else None

    def root(self, tid: int) -> int:
        """The tensor whose block ``tid`` lives in (itself unless written in place)."""
        while (alias := self.tensors[tid].alias_of) is not None:
            tid = alias
        return tid

    def blocks(self):
        """Tensors that own a block (not in-place outputs)."""
        return (t for t in self.tensors.values() if t.alias_of is None)

    def size(self, tid: int) -> int:
        return self.tensors[tid].size


# ---------------------------------------------------------------------- pass 1: the blocks
def register_blocks(a: _Analysis, plan: PreparedPlan) -> None:
    seen = set()
    for node in a.graph.nodes:
        for tid in (*node.inputs, *node.outputs):
            if tid is None or tid in seen:
                continue
            seen.add(tid)
            t = a.tensors[tid]
            if t.alias_of is not None:
                plan.aliases[t.name] = a.tensors[a.root(tid)].name
                continue
            plan.blocks.append(Block(t.name, t.kind, t.size, TCM_ALIGN if t.kind == TCM else PLAIN_ALIGN,
                                     tensor_id=tid))
    for n in a.nodes:
        if n.scratch:
            plan.blocks.append(Block(f"{n.name}#scratch", TCM, n.scratch, TCM_ALIGN, role="scratch"))
    tcm = [b for b in plan.blocks if b.kind == TCM and b.role == "tensor"]
    plain = [b for b in plan.blocks if b.kind == PLAIN]
    scratch = [b for b in plan.blocks if b.role == "scratch"]
    plan.passes.append(
        f"register blocks: {len(tcm)} TCM activation blocks ({sum(b.size for b in tcm)} B), "
        f"{len(plain)} Plain DDR blocks ({sum(b.size for b in plain)} B: graph I/O and weights), "
        f"{len(scratch)} TCM scratch blocks ({sum(b.size for b in scratch)} B), "
        f"{len(plan.aliases)} in-place output(s) sharing their input's block; "
        f"TCM granule {TCM_ALIGN} B, Plain granule {PLAIN_ALIGN} B")


# -------------------------------------------------------------------- pass 2: pre-schedule
def live_peak(a: _Analysis, order: list[int]) -> int:
    """Peak bytes of TCM blocks live while an op of ``order`` runs (no spilling): blocks from
    their producer to their last reader, plus the running op's scratch."""
    pos = {v: i for i, v in enumerate(order)}
    last: dict[int, int] = {}
    for v in order:
        for t in a.nodes[v].tcm_out:
            cs = a.tensors[t].consumers
            last[t] = max((pos[c] for c in cs), default=pos[v])
    live = peak = 0
    for i, v in enumerate(order):
        n = a.nodes[v]
        live += n.out_bytes
        peak = max(peak, live + n.scratch)
        for t in {*n.tcm_in, *n.tcm_out}:
            if last[t] == i:
                live -= a.size(t)
    return peak


def _crossing(a: _Analysis) -> list[int]:
    """Bytes of TCM tensors live across each boundary g (between graph-order ops g-1 and g)."""
    n = len(a.nodes)
    diff = [0] * (n + 2)
    for t in a.blocks():
        if t.kind != TCM or t.producer is None or not t.consumers:
            continue
        last = max(t.consumers)
        if last > t.producer:
            diff[t.producer + 1] += t.size
            diff[last + 1] -= t.size
    out, run = [], 0
    for g in range(n + 1):
        run += diff[g]
        out.append(run)
    return out


def _order_exactly(a: _Analysis, lo: int, hi: int, limit: int = PRESCHEDULE_STATE_LIMIT) -> list[int] | None:
    """The order of graph-order ops lo..hi-1 with the least peak of live TCM (ties: least summed
    live bytes), searching the part's dependency-closed prefixes; None past the state limit.
    Only the order inside the part changes, so tensors crossing its ends are constant."""
    seg = list(range(lo, hi))
    m = len(seg)
    pred_mask = [0] * m
    succ: list[list[int]] = [[] for _ in range(m)]
    for k in range(m):
        for p in a.nodes[seg[k]].preds:
            if lo <= p < hi:
                pred_mask[k] |= 1 << (p - lo)
                succ[p - lo].append(k)
    base = 0
    frees: list[list[tuple[int, int]]] = [[] for _ in range(m)]   # (consumer mask, bytes) per op
    dead_out = [0] * m
    for t in a.blocks():
        if t.kind != TCM or t.producer is None:
            continue
        p = t.producer
        if p >= hi:
            continue
        cmask = 0
        after = False
        for c in t.consumers:
            if lo <= c < hi:
                cmask |= 1 << (c - lo)
            elif c >= hi:
                after = True
        if p < lo:
            if not cmask and not after:
                continue
            base += t.size
        elif not t.consumers:
            dead_out[p - lo] += t.size
            continue
        if not after and cmask:
            for c in t.consumers:
                if lo <= c < hi:
                    frees[c - lo].append((cmask, t.size))
    out_b = [a.nodes[v].out_bytes for v in seg]
    scr = [a.nodes[v].scratch for v in seg]
    # state: mask -> [peak, area, mem, avail, parent, op]
    start_avail = sum(1 << k for k in range(m) if pred_mask[k] == 0)
    states: dict[int, list[Any]] = {0: [0, 0, base, start_avail, None, None]}
    layer = [0]
    for _ in range(m):
        nxt: dict[int, list] = {}
        for s in layer:
            peak, area, mem, avail, _, _ = states[s]
            bits = avail
            while bits:
                low = bits & -bits
                bits ^= low
                k = low.bit_length() - 1
                ns = s | low
                run_peak = mem + out_b[k] + scr[k]
                new_mem = mem + out_b[k] - dead_out[k] - sum(b for cm, b in frees[k] if cm & ~ns == 0)
                key = (max(peak, run_peak), area + new_mem)
                cur = nxt.get(ns)
                if cur is None:
                    if len(states) + len(nxt) >= limit:
                        return None
                    na = avail & ~low
                    for w in succ[k]:
                        if pred_mask[w] & ~ns == 0:
                            na |= 1 << w
                    nxt[ns] = [key[0], key[1], new_mem, na, s, k]
                elif key < (cur[0], cur[1]):
                    cur[0], cur[1], cur[4], cur[5] = key[0], key[1], s, k
        states.update(nxt)
        layer = list(nxt)
    order = []
    s = (1 << m) - 1
    while s:
        st = states[s]
        order.append(seg[st[5]])
        s = st[4]
    return order[::-1]


def preschedule(a: _Analysis, plan: PreparedPlan, limit: int = PRESCHEDULE_STATE_LIMIT) -> list[int]:
    """Pass 2; ``limit``: prefixes the exact ordering of one partition may explore (O3 with the
    SoC known searches more)."""
    n = len(a.nodes)
    cross = _crossing(a)
    parts: list[tuple[int, int]] = []
    work = [(0, n)]
    orders: dict[tuple[int, int], list[int]] = {}
    while work:
        lo, hi = work.pop()
        order = _order_exactly(a, lo, hi, limit) if hi - lo <= limit else None
        if order is not None:
            orders[(lo, hi)] = order
            parts.append((lo, hi))
            continue
        # cut at the boundary with the fewest live TCM bytes in the middle half (balanced cuts
        # keep the number of partitioning rounds logarithmic)
        q = max(1, (hi - lo) // 4)
        mid = (lo + hi) / 2
        g = min(range(lo + q, hi - q + 1) if hi - lo >= 4 else range(lo + 1, hi),
                key=lambda g: (cross[g], abs(g - mid), g))
        work.append((g, hi))
        work.append((lo, g))
    parts.sort()
    runlist = [v for p in parts for v in orders[p]]
    baseline = list(range(n))
    plan.graph_order_peak_bytes = live_peak(a, baseline)
    plan.runlist_peak_bytes = live_peak(a, runlist)
    if plan.runlist_peak_bytes > plan.graph_order_peak_bytes:   # cannot happen: each part is optimal
        runlist, plan.runlist_peak_bytes = baseline, plan.graph_order_peak_bytes
    plan.prescheduled_order = runlist
    plan.partitions = [orders[p] for p in parts]
    moved = sum(1 for i, v in enumerate(runlist) if v != i)
    plan.passes.append(
        f"pre-schedule: runlist of {n} ops in {len(parts)} partition(s) cut at low-TCM boundaries; "
        f"peak live TCM {plan.runlist_peak_bytes} B (graph order {plan.graph_order_peak_bytes} B); "
        f"{moved} op(s) moved from graph order")
    return runlist


def graph_order(a: _Analysis, plan: PreparedPlan) -> list[int]:
    """Pass 2 at optimization level 1 (FINALIZE_OPTIMIZATION_FLAG = 1, the fast prepare): no
    search, the runlist is the graph order."""
    order = list(range(len(a.nodes)))
    plan.graph_order_peak_bytes = plan.runlist_peak_bytes = live_peak(a, order)
    plan.prescheduled_order = order
    plan.partitions = [order]
    plan.passes.append(
        f"pre-schedule: skipped at optimization level 1: runlist in graph order ({len(order)} ops); "
        f"peak live TCM {plan.runlist_peak_bytes} B")
    return order


# ------------------------------------------------------------------ pass 3: spill and fill
@dataclass
class _SpillResult:
    budget: int
    # ("op", node) / ("tile", node) / ("ddr", node: in place on its DDR copy) / ("spill", tensor) / ("fill", tensor)
    entries: list[tuple[str, int]]
    spill_bytes: int                 # whole-tensor spills + the tiles' spills
    fill_bytes: int                  # whole-tensor fills + the tiles' fills
    reused_copies: int               # evictions that needed no spill (the DDR copy existed)
    flush: bool = False              # the fragmentation fallback: every op's blocks via DDR
    tilings: dict[int, tiling.Option] = field(default_factory=dict)   # tiled node -> its tiling
    tile_spill_bytes: int = 0
    tile_fill_bytes: int = 0
    need_peak: int = 0               # the most VTCM the pass asked for before any eviction
    # The least budget at which the same choices (tilings, in-place ops on DDR) make the very
    # same eviction decisions: every room request that could evict and did not (or stopped
    # evicting) had at most this much; a lower rung with the same choices reuses the pass.
    reuse_floor: int = 0

    @property
    def tiles(self) -> int:
        return sum(o.tiles for o in self.tilings.values())

    def key(self) -> tuple:
        """Plans are ranked by spill bytes, then fill bytes, then the largest budget (then a
        ladder plan before the flush plan): a total order, so the best of a family of plans
        that grows with VTCM never ranks worse with more VTCM.  Tiles are not ranked: a lower
        rung's plan tiles more but may move fewer bytes (docs/htp-prepare.md)."""
        return (self.spill_bytes, self.fill_bytes, -self.budget, self.flush)


def _working_set_error(a: _Analysis, v: int, budget: int) -> QnnError | None:
    """The error graphFinalize raises for node ``v`` when it fits the budget neither whole, nor
    tiled, nor (in place) on its DDR copy: with the numbers of its smallest tile."""
    n = a.nodes[v]
    if n.working_set <= budget or a.min_working_set(v) <= budget:
        return None
    c = a.catalog(v)
    small = c.smallest() if c is not None else None
    if c is not None and small is not None:
        shape = [small.extent if j == small.axis else
                 (1 if j < small.axis and c.pattern.tileable[j] else e)
                 for j, e in enumerate(c.pattern.space)]
        tiles = (f"and so does its smallest tile ({c.pattern.rule} rule: a {shape} box of its "
                 f"{list(c.pattern.space)} iteration space, {small.tiles} tiles): {small.working_set} bytes "
                 f"(tile inputs {small.in_bytes} + tile outputs {small.out_bytes} + scratch {small.scratch})")
    else:
        why = c.pattern.why if c is not None and c.pattern.why else \
            "no axis but the depth (the last axis, never split) to split"
        tiles = f"and it cannot be tiled ({why})"
    return error(Location("graphFinalize"), "QNNEMU-prepare-working-set",
                 f"graph '{a.graph.name}': node '{n.name}' ({n.op_type}): its working set of "
                 f"{n.working_set} bytes of VTCM (inputs {n.in_bytes} + outputs {n.out_bytes} + scratch "
                 f"{n.scratch}) exceeds the graph's VTCM budget of {budget} bytes, {tiles} (raise "
                 f"QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE or make the tensors smaller)",
                 code=Q.QNN_GRAPH_ERROR_MEM_ALLOC)


def check_working_sets(a: _Analysis, budget: int) -> None:
    """Every op must fit the budget whole, tiled, or (in place) on its DDR copy."""
    for v in range(len(a.nodes)):
        err = _working_set_error(a, v, budget)
        if err is not None:
            raise err


def working_set_errors(graph) -> dict[str, QnnError]:
    """node name -> the error graphFinalize would raise for that node's VTCM working set (every
    node, not just the first): graphValidate's per-node view of pass 3."""
    settings = graph_settings(graph)
    a = _Analysis(graph, device_model(graph), settings)
    return {a.nodes[v].name: err for v in range(len(a.nodes))
            if (err := _working_set_error(a, v, settings.vtcm_bytes)) is not None}


def pass_choices(a: _Analysis, order: list[int], budget: int) -> tuple[dict[int, tiling.Option], set[int]]:
    """What a spill pass at ``budget`` decides before it runs: the tiling of every op whose
    working set exceeds the budget, and the in-place ops among them that run on their DDR copy."""
    tiles: dict[int, tiling.Option] = {}
    on_ddr: set[int] = set()
    for v in order:
        if a.nodes[v].working_set > budget:
            option = a.tiling(v, budget)
            if option is not None:
                tiles[v] = option
            elif v in a.in_place:
                on_ddr.add(v)
    return tiles, on_ddr


def spill_pass(a: _Analysis, order: list[int], budget: int, flush: bool = False,
               choices: tuple[dict[int, tiling.Option], set[int]] | None = None) -> _SpillResult:
    """Belady-like eviction: the resident block whose next read is furthest away goes first.

    Ops whose working set exceeds ``budget`` are tiled (their TCM inputs are read from DDR
    copies, spilled first when they have none, and their TCM outputs written to DDR copies, tile
    by tile); an in-place op whose block exceeds the budget runs on its DDR copy.

    ``flush``: the fallback when no budget's plan can be allocated without fragmentation --
    before each op every resident block leaves VTCM, so only one op's blocks (its filled
    inputs, outputs and scratch, or its tiles) are ever live together and they pack from 0.

    ``choices``: ``pass_choices(a, order, budget)`` when the caller has them already."""
    tiles, on_ddr = choices if choices is not None else pass_choices(a, order, budget)
    uses: dict[int, list[int]] = {}     # reads that need the block in VTCM (for eviction)
    last_read: dict[int, int] = {}      # the last read of any kind (DDR reads of tiled ops too)
    for i, v in enumerate(order):
        for t in a.nodes[v].tcm_in:
            last_read[t] = i
            if v not in tiles and v not in on_ddr:
                uses.setdefault(t, []).append(i)
    resident: dict[int, None] = {}
    used = 0
    copies: set[int] = set()
    entries: list[tuple[str, int]] = []
    spill = fill = reused = tile_spill = tile_fill = need_peak = floor = 0

    def make_room(i: int, need: int, pinned: set[int]) -> int:
        # (``floor``: a request met without evicting, or after evicting down to ``need``, is met
        # the same way at any budget down to ``need``; one that ran out of victims at this budget
        # runs out at every lower one.  With ``flush`` nothing is resident here: no floor.)
        nonlocal used, spill, reused, need_peak, floor
        need_peak = max(need_peak, need)
        if need <= budget:
            if not flush:
                floor = max(floor, need)
            return need
        victims = []
        for t in resident:
            if t in pinned:
                continue
            u = uses.get(t, [])
            j = bisect.bisect_right(u, i)
            victims.append((u[j] if j < len(u) else math.inf, a.size(t), t))
        victims.sort(reverse=True)
        for _, size, t in victims:
            if need <= budget:
                break
            if t in copies:
                reused += 1
            else:
                entries.append(("spill", t))
                copies.add(t)
                spill += size
            del resident[t]
            used -= size
            need -= size
        if need <= budget:
            floor = max(floor, need)
        return need

    for i, v in enumerate(order):
        n = a.nodes[v]
        if flush:
            for t in list(resident):
                if t in copies:
                    reused += 1
                else:
                    entries.append(("spill", t))
                    copies.add(t)
                    spill += a.size(t)
                del resident[t]
            used = 0
        if v in tiles or v in on_ddr:
            # reads DDR copies: a resident input without one is spilled (and may stay)
            for t in n.tcm_in:
                if t not in copies:
                    entries.append(("spill", t))
                    copies.add(t)
                    spill += a.size(t)
            option = tiles.get(v)
            make_room(i, used + (option.working_set if option is not None else n.scratch), set())
            if option is not None:
                entries.append(("tile", v))
                tile_spill += option.spill_bytes
                tile_fill += option.fill_bytes
                copies.update(n.tcm_out)      # written to DDR copies, never resident
            else:
                entries.append(("ddr", v))
        else:
            missing = [t for t in n.tcm_in if t not in resident]
            make_room(i, used + sum(a.size(t) for t in missing) + n.out_bytes + n.scratch, set(n.tcm_in))
            for t in missing:
                entries.append(("fill", t))
                fill += a.size(t)
                resident[t] = None
                used += a.size(t)
            entries.append(("op", v))
            for t in n.tcm_out:
                resident[t] = None
                used += a.size(t)
        for t in {*n.tcm_in, *n.tcm_out}:
            if last_read.get(t, -1) <= i and t in resident:
                del resident[t]
                used -= a.size(t)
    return _SpillResult(budget, entries, spill + tile_spill, fill + tile_fill, reused, flush, tiles,
                        tile_spill, tile_fill, need_peak, floor)


class _Rungs:
    """Spill passes of one kind (ladder plans or, with ``flush``, flush plans) at the rungs of the
    budget ladder, made on demand.  A pass's decisions depend on its budget only through its
    choices (which ops are tiled and how, which in-place ops run on DDR) and through the room
    requests that evict (or could), so a lower rung with the same choices and a budget at or
    above a made pass's ``reuse_floor`` makes exactly the same entries: it reuses that pass with
    its own budget instead of running again (the ladder has a rung every 64 KiB)."""

    def __init__(self, a: _Analysis, order: list[int], flush: bool):
        self.a, self.order, self.flush = a, order, flush
        self.made: list[tuple[tuple, _SpillResult]] = []

    def at(self, budget: int, choices=None, made: _SpillResult | None = None) -> _SpillResult:
        """The pass at ``budget`` (``choices``: pass_choices at it when known; ``made``: the pass
        itself, already run)."""
        choices = choices if choices is not None else pass_choices(self.a, self.order, budget)
        tiles, on_ddr = choices
        same = (tuple((v, id(o)) for v, o in tiles.items()), frozenset(on_ddr))
        for key, r in self.made:
            if key == same and r.reuse_floor <= budget <= r.budget:
                return replace(r, budget=budget, entries=list(r.entries), tilings=dict(r.tilings))
        r = made if made is not None else spill_pass(self.a, self.order, budget, self.flush, choices)
        self.made.append((same, r))
        return r


def _spill_passes(a: _Analysis, order: list[int], budgets: list[int], flush: bool = False,
                  first: _SpillResult | None = None) -> list[_SpillResult]:
    """spill_pass at each of ``budgets`` (largest first; ``first``: the pass at budgets[0],
    already made), reusing passes as ``_Rungs`` does."""
    rungs = _Rungs(a, order, flush)
    return [rungs.at(b, made=first if k == 0 else None) for k, b in enumerate(budgets)]


def _ladder_fixed(budget: int, floor: int) -> set[int]:
    """The ladder's budgets that depend on the graph's floor only (see budget_ladder)."""
    return {*range(TCM_ALIGN, BUDGET_GRANULE + 1, TCM_ALIGN), *range(BUDGET_GRANULE, budget + 1, BUDGET_GRANULE),
            *range(floor, floor + BUDGET_GRANULE, TCM_ALIGN)}


def budget_ladder(budget: int, floor: int, peak: int | None = None) -> list[int]:
    """Budgets the spill pass tries, largest first: those of a fixed set between ``floor`` (the
    largest working set) and ``budget``.  The set depends on the graph only -- multiples of
    2 KiB up to 64 KiB, of 64 KiB above, the 32 multiples of 2 KiB from ``floor`` up, and the
    runlist's live ``peak`` (at which nothing spills) -- so a larger budget's ladder contains
    every smaller budget's and keeping the plan with the fewest spill bytes over the ladder
    makes spill bytes never grow with VTCM (a plan that fits a smaller budget fits a larger)."""
    floor = _round_up(floor, TCM_ALIGN)
    fixed = _ladder_fixed(budget, floor)
    if peak is not None:
        fixed.add(_round_up(peak, TCM_ALIGN))
    return sorted((b for b in fixed if floor <= b <= budget), reverse=True)


# --------------------------------------------------------- pass 4: steps with launch/wait
@dataclass
class _Steps:
    steps: list[Step]
    blocks: dict[str, Block]          # every block by name (registered + fills + spill copies + tiles)
    touched: list[set[str]]           # blocks each step needs in place while it runs
    hmx_split: int
    dma_split: int
    flush: bool = False               # built from the flush (fragmentation fallback) plan
    tilings: list[Tiling] = field(default_factory=list)


def build_steps(a: _Analysis, plan: PreparedPlan, sp: _SpillResult) -> _Steps:
    blocks = {b.name: Block(**b.__dict__) for b in plan.blocks}
    current: dict[int, str] = {}       # tensor -> its block now in VTCM
    fills: dict[int, int] = {}
    steps: list[Step] = []
    touched: list[set[str]] = []
    writer: dict[str, list[int]] = {}  # block -> the steps whose completion makes it readable
    tilings: list[Tiling] = []
    hmx = dma = 0

    def add(step: Step, reads: list[str], writes: list[str], extra: Sequence[str] = ()) -> int:
        step.index = len(steps)
        step.deps = sorted({w for b in reads for w in writer.get(b, ())})
        steps.append(step)
        touched.append({*reads, *writes, *extra})
        return step.index

    def add_wait(launch: int, name: str) -> int:
        src = steps[launch]
        w = Step(index=0, kind="wait", name=name, op_type=src.op_type, node_index=src.node_index,
                 resource="CPU", cycles=WAIT_CYCLES, resources=["CPU"], pair=launch, tile=src.tile,
                 tile_node=src.tile_node, tile_shape=list(src.tile_shape))
        i = add(w, [], [])
        steps[i].deps = [launch]
        touched[i] = set(touched[launch])     # the launched work holds its blocks until done
        steps[launch].pair = i
        return i

    def copy_block(t: int) -> str:
        """The DDR copy of tensor ``t`` in the spill-fill buffer (created on first use)."""
        info = a.tensors[t]
        name = f"{info.name}#spill"
        if name not in blocks:
            blocks[name] = Block(name, PLAIN, _round_up(info.raw, PLAIN_ALIGN) or PLAIN_ALIGN, PLAIN_ALIGN,
                                 tensor_id=t, role="spill")
        return name

    def compute(x: int, name: str, reads: list[str], writes: list[str], extra: list[str], c: cost.OpCost,
                **tile) -> int:
        """The op's compute step(s): one HVX step, or an HMX launch + wait; returns the step
        consumers wait for."""
        nonlocal hmx
        n = a.nodes[x]
        common = dict(op_type=n.op_type, node_index=x, inputs=reads, outputs=writes, cycles=c.cycles,
                      resources=list(c.resources), threads=c.threads, bytes=c.dma_bytes, note=c.note, **tile)
        if c.resource == "HMX":
            i = add(Step(index=0, kind="launch", name=f"{name}:launch", resource="HMX", **common), reads, writes, extra)
            hmx += 1
            return add_wait(i, f"{name}:wait")
        return add(Step(index=0, kind="op", name=name, resource="HVX", **common), reads, writes, extra)

    for kind, x in sp.entries:
        if kind == "op":
            n = a.nodes[x]
            node = a.graph.nodes[x]
            reads = [current[t] for t in n.tcm_in] + [a.tensors[t].name for t in n.plain_in]
            writes = [a.tensors[t].name for t in (*n.tcm_out, *n.plain_out)]
            if x in a.in_place:   # rewrites its input's block: readers of the output wait for it
                writes = [current[n.tcm_in[0]]] + writes
            extra = [f"{n.name}#scratch"] if n.scratch else []
            done = compute(x, node.name, reads, writes, extra, n.cost)
            for t in n.tcm_out:
                current[t] = a.tensors[t].name
            for b in writes:
                writer[b] = [done]
        elif kind == "ddr":
            # an in-place op whose block is bigger than the budget: it runs on the DDR copy
            n = a.nodes[x]
            node = a.graph.nodes[x]
            copy = copy_block(n.tcm_in[0])
            current.pop(n.tcm_in[0], None)
            reads = [copy] + [a.tensors[t].name for t in n.plain_in]
            writes = [copy] + [a.tensors[t].name for t in n.plain_out]
            done = compute(x, node.name, reads, writes, [f"{n.name}#scratch"] if n.scratch else [], n.cost)
            for b in writes:
                writer[b] = [done]
        elif kind == "tile":
            t_ = _tile_steps(a, x, sp.tilings[x], steps, blocks, writer, add, add_wait, compute, copy_block)
            tilings.append(t_)
            dma += sum(1 for i in t_.steps if steps[i].kind in ("fill", "spill"))
        elif kind == "spill":
            info = a.tensors[x]
            copy = copy_block(x)
            src = current[x]
            i = add(Step(index=0, kind="spill", name=f"{info.name}:spill", resource="DMA",
                         cycles=cost.spill_fill_cycles(info.size, a.settings), resources=["DMA"], bytes=info.size,
                         inputs=[src], outputs=[copy]), [src], [copy])
            writer[copy] = [add_wait(i, f"{info.name}:spill:wait")]
            dma += 1
        else:  # fill
            info = a.tensors[x]
            fills[x] = fills.get(x, 0) + 1
            name = f"{info.name}#fill{fills[x]}"
            blocks[name] = Block(name, TCM, info.size, TCM_ALIGN, tensor_id=x, role="fill")
            copy = copy_block(x)
            i = add(Step(index=0, kind="fill", name=f"{info.name}:fill", resource="DMA",
                         cycles=cost.spill_fill_cycles(info.size, a.settings), resources=["DMA"], bytes=info.size,
                         inputs=[copy], outputs=[name]), [copy], [name])
            writer[name] = [add_wait(i, f"{info.name}:fill:wait")]
            current[x] = name
            dma += 1
    for blk in blocks.values():
        blk.first_step = blk.last_step = blk.offset = blk.ddr_offset = None
    for i, names in enumerate(touched):
        for name in names:
            blk = blocks[name]
            blk.first_step = i if blk.first_step is None else blk.first_step
            blk.last_step = i
    return _Steps(steps, blocks, touched, hmx, dma, sp.flush, tilings)


def _tile_steps(a: _Analysis, x: int, option: tiling.Option, steps, blocks, writer, add, add_wait, compute,
                copy_block) -> Tiling:
    """The steps of a tiled op: per tile a DMA fill of its input slices (from the inputs' DDR
    copies into a tile block), the compute, and a DMA spill of its output slices (into the
    outputs' DDR copies); double-buffered (``option.buffers`` 2) the runlist is fill 0, fill 1,
    compute 0, then per tile fill i+1, compute i, spill i-1, so tile i+1's fill and tile i-1's
    spill have their own buffers while tile i computes."""
    n, node = a.nodes[x], a.graph.nodes[x]
    cat = a.catalog(x)
    assert cat is not None   # (an op is only tiled through its catalog's option)
    tiles = tiling.tiles_of(cat, option)
    in_copies = [copy_block(t.block) for t in cat.inputs]
    out_copies = [copy_block(t.block) for t in cat.outputs]
    plain_in = [a.tensors[t].name for t in n.plain_in]
    plain_out = [a.tensors[t].name for t in n.plain_out]
    scratch = [f"{n.name}#scratch"] if n.scratch and option.scratch else []
    if scratch:   # a tile's scratch: the op's own and the buffer its share of DDR tensors streams through
        blocks[scratch[0]].size = option.scratch
    costs: dict[float, cost.OpCost] = {}
    first = len(steps)
    fill_cycles, compute_cycles, spill_cycles = [], [], []
    in_block: dict[int, str] = {}
    out_block: dict[int, str] = {}
    done: dict[int, int] = {}
    for b in out_copies + plain_out:
        writer[b] = []

    def tile_info(tile: tiling.Tile) -> dict:
        return dict(tile=tile.index, tile_node=x, tile_shape=tile.shape)

    def fill(tile: tiling.Tile) -> None:
        if not cat.inputs:
            fill_cycles.append(0)
            return
        name = f"{n.name}#tile{tile.index}:in"
        blocks[name] = Block(name, TCM, option.in_bytes, TCM_ALIGN, role="tile")
        in_block[tile.index] = name
        cycles = cost.tile_copy_cycles(tile.fills, a.settings)
        fill_cycles.append(cycles)
        i = add(Step(index=0, kind="fill", name=f"{node.name}:tile{tile.index}:fill", resource="DMA",
                     cycles=cycles, resources=["DMA"], bytes=sum(tile.fills), inputs=list(in_copies),
                     outputs=[name], **tile_info(tile)), in_copies, [name])
        writer[name] = [add_wait(i, f"{node.name}:tile{tile.index}:fill:wait")]

    def run(tile: tiling.Tile) -> None:
        c = costs.get(tile.share)
        if c is None:
            c = costs[tile.share] = cost.op_cost(node, a.graph, a.model, a.settings, share=tile.share)
        compute_cycles.append(c.cycles)
        reads = ([in_block[tile.index]] if tile.index in in_block else []) + plain_in
        writes = plain_out[:]
        if cat.outputs:
            name = f"{n.name}#tile{tile.index}:out"
            blocks[name] = Block(name, TCM, option.out_bytes, TCM_ALIGN, role="tile")
            out_block[tile.index] = name
            writes = [name] + writes
        done[tile.index] = compute(x, f"{node.name}:tile{tile.index}", reads, writes, scratch, c, **tile_info(tile))
        if tile.index in out_block:
            writer[out_block[tile.index]] = [done[tile.index]]
        for b in plain_out:
            writer[b].append(done[tile.index])

    def spill(tile: tiling.Tile) -> None:
        if tile.index not in out_block:
            spill_cycles.append(0)
            return
        name = out_block[tile.index]
        cycles = cost.tile_copy_cycles(tile.spills, a.settings)
        spill_cycles.append(cycles)
        i = add(Step(index=0, kind="spill", name=f"{node.name}:tile{tile.index}:spill", resource="DMA",
                     cycles=cycles, resources=["DMA"], bytes=sum(tile.spills), inputs=[name],
                     outputs=list(out_copies), **tile_info(tile)), [name], out_copies)
        w = add_wait(i, f"{node.name}:tile{tile.index}:spill:wait")
        for b in out_copies:
            writer[b].append(w)

    if option.buffers >= 2:
        fill(tiles[0])
        if len(tiles) > 1:
            fill(tiles[1])
        run(tiles[0])
        for k in range(1, len(tiles)):
            if k + 1 < len(tiles):
                fill(tiles[k + 1])
            run(tiles[k])
            spill(tiles[k - 1])
        spill(tiles[-1])
    else:
        for tile in tiles:
            fill(tile)
            run(tile)
            spill(tile)
    # each list got one entry per tile, in tile order (fills run ahead, spills behind)
    fills_by, runs_by, spills_by = fill_cycles, compute_cycles, spill_cycles
    big, last = tiles[0], tiles[-1]
    return Tiling(
        node=node.name, node_index=x, op_type=n.op_type, rule=cat.pattern.rule, axis=option.axis,
        tiles=option.tiles, tile_shape=big.shape, last_tile_shape=last.shape,
        iteration_space=list(cat.pattern.space), buffers=option.buffers, working_set_bytes=option.working_set,
        untiled_working_set_bytes=n.working_set, tile_in_bytes=option.in_bytes, tile_out_bytes=option.out_bytes,
        scratch_bytes=option.scratch, fill_bytes_per_tile=max(sum(t.fills) for t in tiles),
        spill_bytes_per_tile=max(sum(t.spills) for t in tiles), fill_bytes=option.fill_bytes,
        spill_bytes=option.spill_bytes, fill_cycles_per_tile=max(fills_by), compute_cycles_per_tile=max(runs_by),
        spill_cycles_per_tile=max(spills_by),
        serial_cycles=sum(fills_by) + sum(runs_by) + sum(spills_by),
        pipelined_cycles=cost.tiled_cycles(fills_by, runs_by, spills_by, option.buffers),
        steps=list(range(first, len(steps))))


# ----------------------------------------------------------------- pass 5: the offsets
def _span(b: Block) -> tuple[int, int]:
    """(first, last) runlist step of a block the runlist touches (only those are placed)."""
    assert b.first_step is not None and b.last_step is not None
    return b.first_step, b.last_step


def _place(items: list[Block], align: int, limit: int | None, by_time: bool = False) -> dict[str, int]:
    """Greedy by size (``by_time``: by first step): each block takes an address range no block
    live at the same time holds.  With a ``limit`` (the plan's budget), among the ranges below
    it, a block prefers one shared with no block freed within the last few steps (such sharing
    orders ops that could otherwise run in parallel), then one that does not raise the peak, then
    the lowest; without a limit (the spill-fill buffer, the compact retries) it takes the lowest."""
    steps = max((_span(b)[1] for b in items), default=-1) + 1
    live_at: list[list[tuple[int, int]]] = [[] for _ in range(steps)]   # step -> (offset, end) held
    ending_at: list[list[tuple[int, int]]] = [[] for _ in range(steps)]  # step -> ranges freed after it
    peak = 0
    out: dict[str, int] = {}
    # by time: earliest first, and of those the longest-lived (it then sits low, out of the way)
    order = (lambda b: (_span(b)[0], -_span(b)[1], -b.size, b.name)) if by_time else \
        (lambda b: (-b.size, _span(b)[0], b.name))
    for b in sorted(items, key=order):
        first, last = _span(b)
        busy = sorted({r for s in range(first, last + 1) for r in live_at[s]})
        candidates = sorted({0, *(_round_up(e, align) for _, e in busy)})
        fits = []
        for off in candidates:
            if all(off + b.size <= o or off >= e for o, e in busy):
                fits.append(off)
        best = fits[0]
        if limit is not None:
            inside = [off for off in fits if off + b.size <= limit]
            recent = [r for s in range(max(0, first - RECENT_STEPS), first) for r in ending_at[s]]

            def score(off, b=b, recent=recent, peak=peak):   # bound now: called within this iteration only
                shared = sum(1 for o, e in recent if not (off + b.size <= o or off >= e))
                return (shared, off + b.size > peak, off)
            if inside:
                best = min(inside, key=score)
        out[b.name] = best
        r = (best, best + b.size)
        for s in range(first, last + 1):
            live_at[s].append(r)
        ending_at[last].append(r)
        peak = max(peak, best + b.size)
    return out


def allocate(st: _Steps, budget: int, compact: bool = False) -> tuple[int, list[tuple[int, int]], int]:
    """Offsets for the TCM blocks (within ``budget`` where possible; ``compact``: lowest first,
    the better of size order and time order) and the spill copies; returns (peak VTCM,
    constraints, spill-fill buffer bytes)."""
    tcm = [b for b in st.blocks.values() if b.kind == TCM and b.first_step is not None]
    if compact:
        tries = [_place(tcm, TCM_ALIGN, None), _place(tcm, TCM_ALIGN, None, by_time=True)]
        offsets = min(tries, key=lambda o: max((o[b.name] + b.size for b in tcm), default=0))
    else:
        offsets = _place(tcm, TCM_ALIGN, budget)
    for name, off in offsets.items():
        st.blocks[name].offset = off
    copies = [b for b in st.blocks.values() if b.role == "spill" and b.first_step is not None]
    ddr_offsets = _place(copies, PLAIN_ALIGN, None)
    for name, off in ddr_offsets.items():
        st.blocks[name].ddr_offset = off
    peak = max((offsets[b.name] + b.size for b in tcm), default=0)
    buffer = max((ddr_offsets[b.name] + b.size for b in copies), default=0)
    # The ordering a shared address creates: a block may only be written once the previous
    # owner of each of its bytes is dead.  Only the most recent owner of each byte range is
    # recorded; older owners are ordered before it by its own constraint (transitively).
    constraints = set()
    owners: list[tuple[int, int, Block]] = []   # disjoint (start, end, last owner), sorted
    for q in sorted(tcm, key=lambda b: (_span(b)[0], offsets[b.name], b.name)):
        lo, hi = offsets[q.name], offsets[q.name] + q.size
        q_first = _span(q)[0]
        i = bisect.bisect_right(owners, (lo, math.inf)) - 1
        i = max(i, 0)
        kept = owners[:i]
        for seg in owners[i:]:
            a_, b_, p = seg
            if a_ >= hi:
                kept.append(seg)
                continue
            if b_ <= lo:
                kept.append(seg)
                continue
            p_last = _span(p)[1]
            if p_last < q_first and p_last not in st.steps[q_first].deps:
                constraints.add((p_last, q_first))
            if a_ < lo:
                kept.append((a_, lo, p))
            if b_ > hi:
                kept.append((hi, b_, p))
        kept.append((lo, hi, q))
        kept.sort(key=lambda x: (x[0], x[1]))
        owners = kept
    return peak, sorted(constraints), buffer


def overlapping_live_blocks(blocks) -> list[tuple[str, str]]:
    """Pairs of TCM blocks live at a common step whose VTCM ranges intersect (must be none)."""
    tcm = sorted((b for b in blocks if b.kind == TCM and b.offset is not None), key=lambda b: b.offset)
    bad = []
    for i, p in enumerate(tcm):
        for q in tcm[i + 1:]:
            if q.offset >= p.offset + p.size:
                break
            if p.first_step <= q.last_step and q.first_step <= p.last_step:
                bad.append((p.name, q.name))
    return bad


# ------------------------------------------------------------------- pass 6: re-schedule
SCHEDULE_POLICIES = ("critical-path", "runlist")


def reschedule(steps: list[Step], constraints: list[tuple[int, int]], hvx_threads: int,
               hmx: bool, policy: str = "critical-path", cores: int = 1) -> tuple[int, int]:
    """List scheduling over ``hvx_threads`` HVX threads, one HMX unit and one DMA queue; wait
    steps take no resource.  ``policy``: "critical-path" (the ready step with the highest
    remaining critical path goes first) or "runlist" (the fast prepare of optimization level 1:
    the steps start in runlist order, none before the one ahead of it has started).  ``cores``:
    NUM_CORES of a multi-core SoC, each core with its own HVX threads, HMX unit and DMA queue.
    Returns (total cycles, critical-path cycles)."""
    if policy not in SCHEDULE_POLICIES:
        raise ValueError(f"reschedule: policy {policy!r} is not one of {SCHEDULE_POLICIES}")
    n = len(steps)
    preds = [set(s.deps) for s in steps]
    for a_, b_ in constraints:
        preds[b_].add(a_)
    succs: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for p in preds[i]:
            succs[p].append(i)
    level = [0] * n
    for i in range(n - 1, -1, -1):
        level[i] = steps[i].cycles + max((level[s] for s in succs[i]), default=0)
    rank = [-v for v in level] if policy == "critical-path" else list(range(n))
    # HMX steps only exist on SoCs with an HMX (the cost model sends their ops to HVX otherwise)
    cores = max(1, int(cores))
    units = {"HVX": [0] * (max(1, hvx_threads) * cores), "HMX": [0] * cores, "DMA": [0] * cores}
    indeg = [len(p) for p in preds]
    ready = [0] * n
    waiting = [(0, i) for i in range(n) if indeg[i] == 0]     # (ready time, step): deps done
    heapq.heapify(waiting)
    candidates: list[tuple[int, int]] = []                    # (rank, step): ready now
    running: list[tuple[int, int]] = []                       # (end, step)
    done = 0
    t = 0
    in_order = policy == "runlist"
    next_issue = 0        # in_order: the only step that may start next
    while done < n:
        progressed = True
        while progressed:
            progressed = False
            while waiting and waiting[0][0] <= t:
                _, i = heapq.heappop(waiting)
                heapq.heappush(candidates, (rank[i], i))
            blocked = []
            while candidates:
                item = heapq.heappop(candidates)
                i = item[1]
                s = steps[i]
                if in_order and i != next_issue:
                    blocked.append(item)
                    continue
                if s.resource == "CPU":
                    s.thread = 0
                else:
                    pool = units[s.resource]
                    need = min(s.threads, len(pool)) if s.resource == "HVX" else 1
                    free = [u for u, busy in enumerate(pool) if busy <= t]
                    if len(free) < need:
                        blocked.append(item)
                        continue
                    for u in free[:need]:
                        pool[u] = t + s.cycles
                    s.thread = free[0]
                s.start_cycle, s.end_cycle, s.ready_cycle = t, t + s.cycles, ready[i]
                s.wait_cycles = t - ready[i]
                heapq.heappush(running, (s.end_cycle, i))
                progressed = True
                if in_order:
                    next_issue += 1
                    # the step now allowed may already be a candidate: look again
                    for item in blocked:
                        heapq.heappush(candidates, item)
                    blocked = []
            for item in blocked:
                heapq.heappush(candidates, item)
            while running and running[0][0] <= t:
                end, i = heapq.heappop(running)
                done += 1
                for s_ in succs[i]:
                    indeg[s_] -= 1
                    ready[s_] = max(ready[s_], end)
                    if indeg[s_] == 0:
                        heapq.heappush(waiting, (ready[s_], s_))
                progressed = True
        if done == n:
            break
        upcoming = ([running[0][0]] if running else []) + ([waiting[0][0]] if waiting else [])
        if not upcoming:
            raise RuntimeError(f"reschedule: steps {sorted(i for _, i in candidates)} can never start")
        t = min(upcoming)
    _overlaps(steps)
    total = max((s.end_cycle for s in steps), default=0)
    return total, max(level, default=0)


def _covered(lo: int, hi: int, spans: list[tuple[int, int]]) -> int:
    """Cycles of [lo, hi) covered by the union of ``spans``."""
    clipped = sorted((max(lo, a), min(hi, b)) for a, b in spans if min(hi, b) > max(lo, a))
    total = 0
    cur: tuple[int, int] | None = None   # the union's current run
    for a, b in clipped:
        if cur is None or a > cur[1]:
            total += (cur[1] - cur[0]) if cur is not None else 0
            cur = (a, b)
        else:
            cur = (cur[0], max(cur[1], b))
    return total + ((cur[1] - cur[0]) if cur is not None else 0)


def _overlaps(steps: list[Step]) -> None:
    spans = sorted((s.start_cycle, s.end_cycle, s.index) for s in steps if s.end_cycle > s.start_cycle)
    starts = [a for a, _, _ in spans]
    reach, top = [], 0          # reach[j]: the latest end among spans[:j + 1]
    for _, b, _ in spans:
        top = max(top, b)
        reach.append(top)
    for s in steps:
        for lo, hi, which in ((s.start_cycle, s.end_cycle, "run"), (s.ready_cycle, s.start_cycle, "wait")):
            if hi <= lo:
                continue
            others = []
            j = bisect.bisect_left(starts, hi) - 1
            while j >= 0 and reach[j] > lo:      # no earlier span reaches past ``lo``: stop
                a, b, k = spans[j]
                if b > lo and k != s.index:
                    others.append((a, b, k))
                j -= 1
            cycles = _covered(lo, hi, [(a, b) for a, b, _ in others])
            if which == "run":
                s.overlap_cycles, s.overlap_steps = cycles, sorted(k for _, _, k in others)
            else:
                s.overlap_wait_cycles, s.overlap_wait_steps = cycles, sorted(k for _, _, k in others)


# ------------------------------------------------------------------------------ the driver
def _memory_plan(a: _Analysis, plan: PreparedPlan, order: list[int], budget: int, search: bool = True):
    """Passes 3-5 for the graph's VTCM ``budget``: the spill pass (tiling the ops that do not fit)
    and the flush plan at each budget of the ladder; the best by ``_SpillResult.key`` whose
    allocation fits is kept.  The candidates of a smaller budget are among those of a larger
    one and the key is a total order, so spill bytes never grow with the budget, nor fill bytes
    at equal spill bytes; at equal spill and fill bytes the kept plan's own budget never shrinks
    (its tiles never multiply)."""
    built: dict[tuple, _Steps] = {}
    packed_too_big: set[tuple] = set()     # steps whose lowest-first packing exceeds the budget

    def attempt(r: _SpillResult):
        # Rungs often plan identical entries; their steps are shared, but each is placed within
        # its own budget (a lower limit can pack where a higher one fragments), so none is
        # skipped; the lowest-first packing ignores the limit and is tried once per steps.
        key = (tuple(r.entries), tuple(sorted(r.tilings.items())), r.flush)
        st = built.get(key)
        if st is None:
            st = built[key] = build_steps(a, plan, r)
        for compact in (False, True):
            if compact and key in packed_too_big:
                continue
            peak, constraints, buffer = allocate(st, r.budget, compact)
            if peak <= budget:
                return r, st, peak, constraints, buffer
            if compact:
                packed_too_big.add(key)
        return None
    def first_plan(top: int):
        choices = pass_choices(a, order, top)
        first = spill_pass(a, order, top, choices=choices)
        if not search or (not first.spill_bytes and not first.fill_bytes):
            # (optimization level 1 keeps the first plan that fits: no search over budgets)
            got = attempt(first)          # nothing to spill, fill or tile: nothing beats it
            if got is not None:
                return choices, first, got
        return choices, first, None

    # The ladder's top rung is the budget itself when the budget is one of the ladder's budgets
    # whatever the floor (2 KiB multiples to 64 KiB, 64 KiB multiples above; every op fits it:
    # check_working_sets passed): then its plan is made first, and when it needs no search the
    # floor (the tilings of every large op) is never listed.
    on_ladder = budget % BUDGET_GRANULE == 0 if budget > BUDGET_GRANULE else budget % TCM_ALIGN == 0 < budget
    made = first_plan(budget) if on_ladder else None
    if made is not None and made[2] is not None:
        return made[2]
    floor = a.floor()
    ladder = budget_ladder(budget, floor, plan.runlist_peak_bytes) or [budget]
    if made is None or ladder[0] != budget:
        made = first_plan(ladder[0])
        if made[2] is not None:
            return made[2]
    choices, first, _ = made
    # Candidates: every ladder budget's plan and its flush plan (the fragmentation fallback: one
    # op's blocks at a time, which always packs within that budget); the best by key that fits
    # is kept.  Whether a plan fits depends on the plan only (offsets are placed within the
    # plan's own budget, or packed lowest-first), so a plan that fits a budget fits every larger
    # one.  A rung's tilings alone spill their tiles' outputs (``least_spill``), so a rung whose
    # tilings spill more than a made plan's spill bytes cannot rank before it: rungs are made
    # only while they could, which keeps the very plan a search over every rung keeps.
    by_budget = {ladder[0]: choices, **{b: pass_choices(a, order, b) for b in ladder[1:]}}
    least_spill = {b: sum(o.spill_bytes for o in tiles.values()) for b, (tiles, _) in by_budget.items()}
    kinds = {False: _Rungs(a, order, False), True: _Rungs(a, order, True)}
    candidates = [kinds[False].at(ladder[0], choices, made=first)]
    pending = [(b, flush) for flush in (False, True) for b in ladder if (b, flush) != (ladder[0], False)]
    while candidates or pending:
        best = min(candidates, key=_SpillResult.key, default=None)
        bound = best.spill_bytes if best is not None else math.inf
        due = [(b, flush) for b, flush in pending if least_spill[b] <= bound]
        if due:
            candidates += [kinds[flush].at(b, by_budget[b]) for b, flush in due]
            pending = [p for p in pending if least_spill[p[0]] > bound]
            continue
        assert best is not None
        candidates.remove(best)
        got = attempt(best)
        if got is not None:
            return got
    raise AssertionError(f"prepare: no flush plan of '{a.graph.name}' fits {budget} bytes")


def prepare_graph(graph) -> PreparedPlan:
    model = device_model(graph)
    settings = graph_settings(graph)
    hmx = bool(getattr(model, "hmx", True))
    ref = cost.REFERENCE
    plan = PreparedPlan(graph=graph.name, soc_model=model.soc_model, arch=model.arch,
                        vtcm_budget_bytes=settings.vtcm_bytes, hvx_threads=settings.hvx_threads, hmx=hmx,
                        reference_clocks={"core_mhz": ref.core_mhz, "hmx_mhz": ref.hmx_mhz,
                                          "bus_mhz": ref.bus_mhz})
    level = int(settings.optimization_level)
    # O3 takes the SoC into account "when possible": with QNN_HTP_DEVICE_CONFIG_OPTION_SOC given
    thorough = level >= 3 and bool(getattr(model, "soc_configured", False))
    plan.optimization_level = level
    a = _Analysis(graph, model, settings)
    register_blocks(a, plan)                                      # 1
    if level <= 1:                                                # 2
        order = graph_order(a, plan)
    else:
        order = preschedule(a, plan, PRESCHEDULE_STATE_LIMIT * (O3_SEARCH_FACTOR if thorough else 1))
    check_working_sets(a, settings.vtcm_bytes)                    # 3
    sp, st, peak, constraints, buffer = _memory_plan(a, plan, order, settings.vtcm_bytes, search=level >= 2)
    plan.planning_budget_bytes = sp.budget
    plan.spill_bytes, plan.fill_bytes = sp.spill_bytes, sp.fill_bytes
    plan.spill_fill_buffer_bytes = buffer
    plan.tilings = st.tilings
    plan.tiles, plan.tile_fill_bytes, plan.tile_spill_bytes = sp.tiles, sp.tile_fill_bytes, sp.tile_spill_bytes
    fallback = " (fragmentation fallback: every op's blocks through DDR)" if sp.flush else ""
    n_spill = sum(1 for k, _ in sp.entries if k == "spill")
    n_fill = sum(1 for k, _ in sp.entries if k == "fill")
    tiled = (f"; {len(sp.tilings)} op(s) over VTCM tiled into {sp.tiles} tiles (tile fills "
             f"{sp.tile_fill_bytes} B, tile spills {sp.tile_spill_bytes} B)") if sp.tilings else ""
    on_ddr = sum(1 for k, _ in sp.entries if k == "ddr")
    on_ddr_text = f"; {on_ddr} in-place op(s) on their DDR copy" if on_ddr else ""
    plan.passes.append(
        f"spill/fill: VTCM budget {settings.vtcm_bytes} B (planned at {sp.budget} B): {n_spill} spill(s) "
        f"{sp.spill_bytes - sp.tile_spill_bytes} B, {n_fill} fill(s) {sp.fill_bytes - sp.tile_fill_bytes} B, "
        f"{sp.reused_copies} eviction(s) reusing a DDR copy{tiled}{on_ddr_text}; spill-fill buffer "
        f"{buffer} B{fallback}")
    plan.steps = st.steps                                         # 4
    plan.passes.append(
        f"launch/wait: {st.hmx_split} HMX op(s) and {st.dma_split} DMA copies split into launch + wait; "
        f"{len(st.steps)} steps")
    plan.blocks = list(st.blocks.values())                        # 5
    plan.constraints = constraints
    plan.peak_vtcm_bytes = peak
    tcm_live = [(*_span(b), b.size) for b in plan.blocks if b.kind == TCM and b.first_step is not None]
    diff = [0] * (len(plan.steps) + 1)
    for f, l_, size in tcm_live:
        diff[f] += size
        diff[l_ + 1] -= size
    live = 0
    for s in plan.steps:
        live += diff[s.index]
        s.vtcm_bytes = live
    plan.passes.append(
        f"allocate: {len(tcm_live)} TCM blocks at VTCM offsets, peak {peak} B of {settings.vtcm_bytes} B; "
        f"{len(constraints)} ordering constraint(s) from shared addresses")
    policy = "runlist" if level <= 1 else "critical-path"           # 6
    cores = int(getattr(settings, "num_cores", 1) or 1)
    plan.total_cycles, plan.critical_path_cycles = reschedule(
        plan.steps, constraints, settings.hvx_threads, hmx, policy, cores)
    if thorough:   # O3: both priority rules, the shorter schedule kept
        other = reschedule(plan.steps, constraints, settings.hvx_threads, hmx, "runlist", cores)
        if other[0] < plan.total_cycles:
            policy, (plan.total_cycles, plan.critical_path_cycles) = "runlist", other
        else:
            reschedule(plan.steps, constraints, settings.hvx_threads, hmx, policy, cores)
    plan.schedule_policy, plan.cores = policy, cores
    plan.passes.append(
        f"re-schedule: {plan.total_cycles} cycles (critical path {plan.critical_path_cycles}) on "
        f"{settings.hvx_threads} HVX thread(s){', 1 HMX' if hmx else ''}, 1 DMA queue"
        f"{f' on each of {cores} cores' if cores > 1 else ''}; "
        f"optimization level {level}: {policy} priority"
        f"{' (both rules tried, the SoC configured)' if thorough else ''}")
    services.add_system_services(plan, {t.tid: t.raw for t in a.tensors.values()})   # System Service steps
    log = _log(graph)
    if log is not None:
        for line in plan.passes:
            log.debug(f"graphFinalize: graph '{graph.name}': {line}")
    return plan
