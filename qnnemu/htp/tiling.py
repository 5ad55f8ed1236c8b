"""Tiling of ops through VTCM: how the HTP prepare pipeline (QNN HTP backend documentation,
"Scheduling and Allocation") splits an op whose working set exceeds the graph's VTCM budget into
smaller operations ("To be able to fit into the VTCM, heavy operations are split into smaller
operations", "QNN Context Binary size"), each tile's inputs filled into and outputs spilled out
of VTCM by DMA ("Sequencing and Data Paging").

``access_pattern(node) -> Pattern`` says, per op family, which axes of the op's iteration space
(its first output, for Split its input) may be split and which box of every input and output a
box of that space touches:

- elementwise ops tile freely (every axis; a broadcast input axis reads its one element);
- convolutions, depthwise convolutions and pools tile over batch and output rows / columns
  (depths): an output row range reads the input rows of its windows, halo rows included
  (kernel, stride, dilation, padding); transposed convolutions read the input rows that
  scatter into it; channels stay whole;
- MatMul tiles over batch, output rows, output columns and the reduction depth K (in0 rows x
  K, K x in1 columns; a split K adds partial sums); FullyConnected the same way, its static
  weights streamed whole for every tile;
- reductions, Softmax and norms tile over their input (a split reduced axis carries partial
  results from tile to tile; the norms and Softmax then read their tiles twice: statistics, then
  the normalized values);
- Concat / Split tile every axis (each input / output touches its part of the box); Transpose
  through its permutation; Resize through the scale; other data movement and copies stream
  their inputs in proportion to the output (a DMA stream);
- Lstm tiles over the batch (the sequence and the state stay whole).

``TileCatalog(pattern, tensors, scratch)`` lists every possible tiling of one op (a split axis
and a tile extent along it; one index per tile along the tileable axes before it, whole after
it; single- or double-buffered) with its VTCM need, and ``best(budget)`` picks the tiling with
the fewest tiles whose working set fits (then double-buffered: tile i+1 fills while tile i
computes; then the fewest bytes moved).  A larger budget can only offer more tilings, so an
op's tile count never rises with the budget it is tiled for (prepare's ladder may still tile
more ops with more VTCM when that moves fewer bytes).  docs/htp-prepare.md "Tiling" documents
the rules.
"""
from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass, field
from typing import cast

from . import cost

TILE_ALIGN = 2048       # a tile slice in VTCM takes whole 2 KiB croutons, as every TCM block


# ------------------------------------------------------------------------------- axis maps
@dataclass(frozen=True)
class AxisMap:
    """How one axis of a tensor follows one axis (``axis``) of the iteration space.

    kind: "same" (the same index range), "one" (a broadcast axis: one element), "full" (the
    whole axis, whatever the box), "window" (the input range of sliding windows: ``kernel`` the
    dilated extent, ``stride``, ``pad`` before), "scatter" (the input range a transposed
    convolution scatters into the box), "part" (the tensor covers ``[offset, offset + extent)``
    of the space axis: Concat inputs, Split outputs), "scale" (a resize: ``extent`` input
    elements for ``out`` output elements, one neighbour of halo)."""
    kind: str
    axis: int = -1
    extent: int = 1
    kernel: int = 1
    stride: int = 1
    pad: int = 0
    offset: int = 0
    out: int = 1

    def needed(self, a: int, b: int) -> int:
        """Elements of this tensor axis touched by the space range [a, b)."""
        k = self.kind
        if k == "same":
            return b - a
        if k == "one":
            return 1
        if k == "full":
            return self.extent
        if k == "window":
            # whole stride groups are fetched: a kernel smaller than the stride reads a full stride
            lo = a * self.stride - self.pad
            hi = (b - 1) * self.stride - self.pad + max(self.kernel, self.stride)
            return max(0, min(hi, self.extent) - max(lo, 0))
        if k == "scatter":
            # input i writes outputs [i*s - p, i*s - p + kernel)
            lo = (a + self.pad - self.kernel) // self.stride + 1
            hi = -((-(b + self.pad)) // self.stride)      # ceil((b + p) / s)
            return max(0, min(hi, self.extent) - max(lo, 0))
        if k == "part":
            return max(0, min(b, self.offset + self.extent) - max(a, self.offset))
        if k == "scale":
            lo = (a * self.extent) // self.out
            hi = -((-b * self.extent) // self.out) + 1
            return max(0, min(hi, self.extent) - max(lo - 1, 0))
        raise ValueError(f"AxisMap.needed: unknown kind {k!r}")


@dataclass
class Slice:
    """A tensor an op reads or writes through its tiles: one AxisMap per tensor axis, or
    ``maps=None`` (streamed: a tile touches the tensor's bytes in proportion to its share of the
    iteration space, as a contiguous DMA stream)."""
    index: int                      # input / output position in the node
    maps: tuple[AxisMap, ...] | None
    shape: tuple[int, ...]


@dataclass
class Pattern:
    """The access pattern of one op for tiling."""
    rule: str                       # the family rule (docs/htp-prepare.md "Tiling")
    space: tuple[int, ...]          # the iteration space (tiles are boxes of it)
    tileable: tuple[bool, ...]      # per space axis: may tiles split it
    inputs: list[Slice] = field(default_factory=list)
    outputs: list[Slice] = field(default_factory=list)
    why: str = ""                   # why nothing can be tiled (no tileable axis)
    reduced: tuple[bool, ...] = ()  # per space axis: the op reduces over it (split: partial results)
    passes: int = 1                 # reads of the input when a reduced axis is split (norms: 2)
    splits_depth: bool = False      # MatMul / FullyConnected: the last space axis (K) may be split

    @property
    def can_tile(self) -> bool:
        return any(t and e > 1 for t, e in zip(self.tileable, self.space))


def _shape(spec) -> tuple[int, ...]:
    return tuple(int(d) for d in spec.shape) if spec is not None else ()


def _param(node, name, default=None):
    params = getattr(node, "params", None) or {}
    value = params.get(name, default) if isinstance(params, dict) else default
    return default if value is None else value


def _ints(value, n: int, default: int) -> list[int]:
    if value is None:
        return [default] * n
    flat = [int(v) for v in (value.reshape(-1).tolist() if hasattr(value, "reshape") else
                             (value if isinstance(value, (list, tuple)) else [value]))]
    if len(flat) == 1 and n > 1:
        flat = flat * n
    return (flat + [default] * n)[:n]


def _axes(value, rank: int, default: list[int]) -> list[int]:
    if value is None:
        return default
    flat = value.reshape(-1).tolist() if hasattr(value, "reshape") else \
        (list(value) if isinstance(value, (list, tuple)) else [value])
    return sorted({int(v) % rank for v in flat}) if rank else []


def _broadcast(shape, space) -> tuple[AxisMap, ...]:
    """Right-aligned numpy broadcasting of ``shape`` against the space."""
    lead = len(space) - len(shape)
    maps = []
    for j, e in enumerate(shape):
        o = j + lead
        if o < 0:
            maps.append(AxisMap("full", extent=e))
        elif e == space[o]:
            maps.append(AxisMap("same", o, e))
        elif e == 1:
            maps.append(AxisMap("one", o, 1))
        else:
            maps.append(AxisMap("full", extent=e))
    return tuple(maps)


def _identity(shape) -> tuple[AxisMap, ...]:
    return tuple(AxisMap("same", j, e) for j, e in enumerate(shape))


def _streamed(node, space, tileable, rule, why="") -> Pattern:
    ins = [Slice(i, None, _shape(s)) for i, s in enumerate(node.input_specs) if s is not None]
    outs = [Slice(i, None, _shape(s)) for i, s in enumerate(node.output_specs) if s is not None]
    return Pattern(rule, tuple(space), tuple(tileable), ins, outs, why)


_WINDOW_OPS = ("Conv1d", "Conv2d", "Conv3d", "DepthWiseConv1d", "DepthWiseConv2d",
               "PoolMax2d", "PoolAvg2d", "PoolMax3d", "PoolAvg3d")
_SCATTER_OPS = ("TransposeConv1d", "TransposeConv2d", "TransposeConv3d")
_RESIZE_OPS = ("Resize", "ResizeBilinear", "ResizeNearestNeighbor")
_ROW_AXIS_OPS = ("Softmax", "LogSoftmax", "CumulativeSum", "L2Norm")
_AXES_OPS = ("LayerNorm", "RmsNorm")
_KEEPDIM_REDUCE = ("ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")


def access_pattern(node) -> Pattern:
    """The tiling access pattern of ``node`` (a qnnemu.core.graph.Node or a stand-in with
    op_type, params, input_specs, output_specs).  The last axis of the iteration space (the
    depth: channels of an image, features of a row) is never split: the vendor's backend
    refuses an op whose depth rows do not fit VTCM, whatever its other axes -- except the
    reduction depth K of MatMul / FullyConnected (their iteration space ends in K)."""
    p = _access_pattern(node)
    by_rule = p.tileable
    if p.tileable and p.tileable[-1] and not p.splits_depth:
        p.tileable = p.tileable[:-1] + (False,)
    if not p.can_tile:
        reasons = []
        for j, e in enumerate(p.space):
            if j == len(p.space) - 1:
                reasons.append(f"axis {j} ({e}) is the depth, never split")
            elif e <= 1:
                reasons.append(f"axis {j} has extent {e}")
            elif not by_rule[j]:
                reasons.append(f"axis {j} ({e}) is needed whole by the {p.rule} rule")
        detail = "; ".join(reasons) or "the op has no axes"
        p.why = f"{p.why}: {detail}" if p.why else detail
    return p


def _access_pattern(node) -> Pattern:
    op = node.op_type
    ins, outs = node.input_specs, node.output_specs
    y = outs[0] if outs else None
    space = _shape(y)
    rank = len(space)
    kind = cost.op_class(op).kind
    x = ins[0] if ins else None
    if y is None or x is None:
        return _streamed(node, space, [False] * rank, "none", "the op has no input or output")

    def out_maps(maps_of) -> list[Slice]:
        return [Slice(i, maps_of(i, _shape(s)), _shape(s)) for i, s in enumerate(outs) if s is not None]

    if op in _WINDOW_OPS or op in _SCATTER_OPS:
        xs = _shape(x)
        spatial = rank - 2
        if len(xs) != rank or spatial < 1:
            return _streamed(node, space, [True] + [False] * (rank - 1), "stream")
        if op.startswith("Pool"):
            kernel = _ints(_param(node, "filter_size"), spatial, 1)
            dil = [1] * spatial
        else:
            w = ins[1] if len(ins) > 1 else None
            kernel = list(_shape(w)[:spatial]) if w is not None and len(_shape(w)) >= spatial else [1] * spatial
            dil = _ints(_param(node, "dilation"), spatial, 1)
        stride = _ints(_param(node, "stride"), spatial, 1)
        pads = _ints(_param(node, "pad_amount"), 2 * spatial, 0)
        if op.startswith("Pool") and all(space[1 + s] == 1 and kernel[s] >= xs[1 + s] for s in range(spatial)):
            return _global_pool_pattern(node, xs, spatial)
        window = [AxisMap("same", 0, xs[0])]
        for s in range(spatial):
            eff = (kernel[s] - 1) * dil[s] + 1
            kind_ = "scatter" if op in _SCATTER_OPS else "window"
            window.append(AxisMap(kind_, 1 + s, xs[1 + s], kernel=eff, stride=stride[s], pad=pads[2 * s]))
        per_channel = op.startswith("Pool")
        window.append(AxisMap("same", rank - 1, xs[-1]) if per_channel and xs[-1] == space[-1]
                      else AxisMap("full", extent=xs[-1]))
        tileable = [True] * (rank - 1) + [per_channel]
        rule = "transposed-window" if op in _SCATTER_OPS else "window"
        inputs = [Slice(0, tuple(window), xs)]
        # weights and biases are static (streamed by the op); an activation weight is read whole
        inputs += [Slice(i, tuple(AxisMap("full", extent=e) for e in _shape(s)), _shape(s))
                   for i, s in enumerate(ins) if i > 0 and s is not None]
        return Pattern(rule, space, tuple(tileable), inputs, out_maps(lambda i, sh: _broadcast(sh, space)))

    if op == "MatMul" and len(ins) >= 2 and ins[1] is not None and rank >= 2:
        # iteration space [..., M, N, K]: tiles split rows, columns and the reduction depth
        # (partial sums); the vendor's backend finalizes activation x activation MatMuls whose
        # second operand alone, or whose rows of K alone, exceed the budget
        a, b = _shape(ins[0]), _shape(ins[1])
        t0, t1 = bool(_param(node, "transpose_in0", False)), bool(_param(node, "transpose_in1", False))
        kdim = a[-2] if t0 else a[-1]
        mm_space = tuple(space) + (kdim,)
        m_ax, n_ax, k_ax = rank - 2, rank - 1, rank

        def mm(shape, first: bool, transposed: bool):
            if len(shape) < 2:
                return None
            lead = _broadcast(shape[:-2], space[:-2]) if len(shape) > 2 else ()
            k_map = AxisMap("same", k_ax, kdim)
            other = AxisMap("same", m_ax if first else n_ax, space[m_ax if first else n_ax])
            # in0 [.., M, K] (transposed [.., K, M]); in1 [.., K, N] (transposed [.., N, K])
            last2 = ((k_map, other) if transposed else (other, k_map)) if first else \
                ((other, k_map) if transposed else (k_map, other))
            return tuple(lead) + last2
        inputs = [Slice(0, mm(a, True, t0), a), Slice(1, mm(b, False, t1), b)]
        inputs += [Slice(i, _broadcast(_shape(s), space), _shape(s)) for i, s in enumerate(ins)
                   if i > 1 and s is not None]
        p = Pattern("matmul", mm_space, (True,) * (rank + 1), inputs,
                    out_maps(lambda i, sh: _broadcast(sh, space)))
        p.splits_depth = True
        p.reduced = (False,) * rank + (True,)
        return p

    if op == "FullyConnected":
        # iteration space [rows..., N, K]: the weights are streamed whole for every tile (static,
        # not in VTCM); a split input depth K adds partial sums
        xs = _shape(x)
        kdim = xs[-1] if xs else 1
        fc_space = tuple(space) + (kdim,)
        if len(xs) == rank:
            xmap = tuple(AxisMap("same", j, e) for j, e in enumerate(xs[:-1])) + (AxisMap("same", rank, kdim),)
        else:
            xmap = None     # flattened rows: streamed in proportion to the tile
        inputs = [Slice(0, xmap, xs)]
        inputs += [Slice(i, tuple(AxisMap("full", extent=e) for e in _shape(s)), _shape(s))
                   for i, s in enumerate(ins) if i > 0 and s is not None]
        p = Pattern("fully-connected", fc_space, (True,) * (rank + 1), inputs,
                    out_maps(lambda i, sh: _broadcast(sh, space)))
        p.splits_depth = True
        p.reduced = (False,) * rank + (True,)
        return p

    if kind == "reduce" or op in ("Lstm",):
        return _reduce_pattern(node, op, space, rank, out_maps)

    if op == "Concat":
        axis = int(_param(node, "axis", 0)) % max(rank, 1)
        inputs, offset = [], 0
        for i, s in enumerate(ins):
            if s is None:
                continue
            sh = _shape(s)
            if len(sh) != rank:
                return _streamed(node, space, [True] * rank, "stream")
            maps = tuple(AxisMap("part", j, e, offset=offset) if j == axis else AxisMap("same", j, e)
                         for j, e in enumerate(sh))
            inputs.append(Slice(i, maps, sh))
            offset += sh[axis]
        return Pattern("concat", space, (True,) * rank, inputs, out_maps(lambda i, sh: _identity(sh)))

    if op == "Split":
        xs = _shape(x)
        axis = int(_param(node, "axis", 0)) % max(len(xs), 1)
        outputs, offset = [], 0
        for i, s in enumerate(outs):
            sh = _shape(s)
            if len(sh) != len(xs):
                return _streamed(node, xs, [True] * len(xs), "stream")
            maps = tuple(AxisMap("part", j, e, offset=offset) if j == axis else AxisMap("same", j, e)
                         for j, e in enumerate(sh))
            outputs.append(Slice(i, maps, sh))
            offset += sh[axis]
        return Pattern("split", xs, (True,) * len(xs), [Slice(0, _identity(xs), xs)], outputs)

    if op == "Transpose":
        xs = _shape(x)
        perm = _ints(_param(node, "perm"), len(xs), 0)
        if sorted(perm) != list(range(len(xs))) or len(xs) != rank:
            return _streamed(node, space, [True] * rank, "stream")
        by_axis: list[AxisMap | None] = [None] * len(xs)
        for o, j in enumerate(perm):
            by_axis[j] = AxisMap("same", o, xs[j])
        # (perm is a permutation, checked above: every axis got its map)
        return Pattern("transpose", space, (True,) * rank, [Slice(0, cast(tuple[AxisMap, ...], tuple(by_axis)), xs)],
                       out_maps(lambda i, sh: _identity(sh)))

    if op in _RESIZE_OPS:
        xs = _shape(x)
        if len(xs) != rank:
            return _streamed(node, space, [True] * rank, "stream")
        maps = tuple(AxisMap("same", j, e) if e == space[j] else AxisMap("scale", j, e, out=space[j])
                     for j, e in enumerate(xs))
        return Pattern("resize", space, (True,) * rank, [Slice(0, maps, xs)],
                       out_maps(lambda i, sh: _identity(sh)))

    if kind == "elementwise" or kind == "depthwise":
        inputs = [Slice(i, _broadcast(_shape(s), space), _shape(s)) for i, s in enumerate(ins) if s is not None]
        return Pattern("elementwise", space, (True,) * rank, inputs, out_maps(lambda i, sh: _broadcast(sh, space)))

    # data movement, views and anything else: a DMA stream over the output's elements
    return _streamed(node, space, [True] * rank, "stream")


def _global_pool_pattern(node, xs, spatial: int) -> Pattern:
    """A pool whose one window covers the whole image (global average / max pooling): a
    reduction over the spatial axes, whose tiles update running sums or maxima -- the vendor's
    backend finalizes a uint16 global average pool whose input alone exceeds the VTCM budget
    (PP-OCRv4's detector: [1, 160, 160, 96])."""
    reduced = tuple(0 < j <= spatial for j in range(len(xs)))
    outs = [Slice(i, tuple(AxisMap("one", j, 1) if reduced[j] else AxisMap("same", j, e)
                           for j, e in enumerate(_shape(o))) if len(_shape(o)) == len(xs) else None, _shape(o))
            for i, o in enumerate(node.output_specs) if o is not None]
    p = Pattern("reduce", tuple(xs), (True,) * len(xs), [Slice(0, _identity(xs), xs)], outs)
    p.reduced = reduced
    p.why = f"{node.op_type} over the whole {list(xs[1:1 + spatial])} image"
    return p


def _reduce_pattern(node, op, space, rank, out_maps) -> Pattern:
    ins = node.input_specs
    xs = _shape(ins[0])
    r = len(xs)
    if op == "Lstm":
        # tiles over the batch: every tensor whose first axis is the batch follows it
        batch = xs[0] if xs else 1

        def lstm(sh):
            return tuple((AxisMap("same", 0, e) if j == 0 and e == batch and rank and space[0] == batch
                          else AxisMap("full", extent=e)) for j, e in enumerate(sh))
        inputs = [Slice(i, lstm(_shape(s)), _shape(s)) for i, s in enumerate(ins) if s is not None]
        return Pattern("recurrent", space, tuple([True] + [False] * (rank - 1)) if rank else (), inputs,
                       out_maps(lambda i, sh: lstm(sh)))
    if op in _ROW_AXIS_OPS:
        axes = _axes(_param(node, "axes", None), r, []) if op == "L2Norm" else []
        if not axes:
            default = 0 if op == "L2Norm" and _param(node, "axis") is not None else r - 1
            axes = [int(_param(node, "axis", default)) % r] if r else []
    elif op in _AXES_OPS:
        axes = _axes(_param(node, "axes", None), r, [r - 1])
    elif op == "GroupNorm":
        axes = list(range(1, r))                 # per (batch, group): everything but the batch
    elif op == "InstanceNorm":
        axes = list(range(1, r - 1))             # per (batch, channel): the spatial axes
    elif op in ("TopK", "Lrn"):
        axes = [r - 1]
    elif op in ("Argmax", "Argmin"):
        axes = [int(_param(node, "axis", r - 1)) % r] if r else []
    else:   # Reduce*: ``axes`` (all axes when absent)
        axes = _axes(_param(node, "axes", None), r, list(range(r)))
    # The iteration space is the input: a reduced axis other than the depth may be split too --
    # each tile updates the running result (partial sums, maxima, a running total; the norms and
    # Softmax read their tiles twice: statistics, then the normalized values).  The vendor's
    # backend finalizes InstanceNorm, ReduceSum, Argmax and CumulativeSum over spatial axes
    # whose tensors alone exceed the budget.
    space_in = xs
    identity = _identity(xs)
    kept = len(space) == r               # keep_dims, or an output shaped like the input
    same_shape = tuple(space) == tuple(xs)

    def output_maps(i, sh):
        if len(sh) == r and tuple(sh) == tuple(xs):
            return _identity(sh)
        if len(sh) == r:                  # reduced axes kept with extent 1 (or k for TopK)
            return tuple(AxisMap("same", j, e) if e == xs[j] else
                         (AxisMap("one", j, 1) if e == 1 else AxisMap("full", extent=e))
                         for j, e in enumerate(sh))
        rest = [j for j in range(r) if j not in axes]
        if len(rest) == len(sh) and all(xs[j] == e for j, e in zip(rest, sh)):
            return tuple(AxisMap("same", j, e) for j, e in zip(rest, sh))
        return None                        # any other shape: streamed
    inputs = [Slice(0, identity, xs)]
    inputs += [Slice(i, _broadcast(_shape(s), xs) if kept else tuple(AxisMap("full", extent=e) for e in _shape(s)),
                     _shape(s)) for i, s in enumerate(ins) if i > 0 and s is not None]
    outputs = [Slice(i, output_maps(i, _shape(o_)), _shape(o_)) for i, o_ in enumerate(node.output_specs)
               if o_ is not None]
    pattern = Pattern("reduce", space_in, (True,) * r, inputs, outputs)
    pattern.reduced = tuple(j in axes for j in range(r))
    pattern.passes = 2 if (same_shape and op not in ("CumulativeSum",)) else 1
    pattern.why = f"{op} reduces over axes {axes} of its {list(xs)} input" if axes else ""
    return pattern


# ------------------------------------------------------------------------------ the catalog
@dataclass(frozen=True)
class Tensor:
    """A tensor of a tiled op that lives in VTCM (activations): its slices are filled / spilled."""
    slice: Slice
    elem_bytes: float        # VTCM bytes per element while the op works (float32 held as float16;
                             # 8-bit data of "widen" ops at 16 bits)
    total_bytes: int         # bytes of the whole tensor as stored (what DMA moves)
    block: int | None = None  # the tensor id whose block / DDR copy it is (prepare's root)
    stored_elem_bytes: float = 0.0   # bytes per element as stored (0: elem_bytes)

    @property
    def dma_elem_bytes(self) -> float:
        return self.stored_elem_bytes or self.elem_bytes


@dataclass(frozen=True)
class Option:
    """One way to tile an op."""
    axis: int                    # space axis split into chunks; tileable axes before it: one index per tile
    extent: int                  # chunk length along ``axis``
    tiles: int
    buffers: int                 # 2: double-buffered (fill of tile i+1 overlaps tile i), 1: serial
    in_bytes: int                # VTCM of one tile's input slices (2 KiB croutons, largest tile)
    out_bytes: int
    scratch: int
    fill_bytes: int              # DMA bytes of all tiles' input slices
    spill_bytes: int             # DMA bytes of all tiles' output slices

    @property
    def working_set(self) -> int:
        return self.buffers * (self.in_bytes + self.out_bytes) + self.scratch

    def key(self) -> tuple:
        # fewest tiles, then double-buffered, then the fewest bytes moved, then the outermost axis
        return (self.tiles, -self.buffers, self.fill_bytes + self.spill_bytes, self.axis, self.extent)


class TileCatalog:
    """Every tiling of one op and the one kept for a budget (``best``).

    Tiles are double-buffered: the tiling's working set is two tiles' input and output slices
    plus the op's scratch, so tile i+1 fills (and tile i-1 spills) while tile i computes.  Of
    the double-buffered tilings that fit, the one with the fewest tiles is kept (then the fewest
    bytes moved, then the outermost split).  When not even the finest grid (every tileable axis
    split to single elements) fits double-buffered, the finest grid runs single-buffered: one
    tile at a time.  The finest grid has the most tiles of all, so the tile count never rises
    with the budget."""

    def __init__(self, pattern: Pattern, inputs: list[Tensor], outputs: list[Tensor], scratch):
        """``scratch(share)``: the VTCM scratch of a tile holding ``share`` of the iteration
        space (the op's own scratch and the buffer its DDR tensors stream through)."""
        self.pattern, self.inputs, self.outputs, self.scratch = pattern, inputs, outputs, scratch
        space, tileable = pattern.space, pattern.tileable
        axes = [j for j, t in enumerate(tileable) if t and space[j] > 1]
        # The finest grid is always among the options when there are any (its tile count is
        # space[axis] > 1 on every tileable axis): a graph's VTCM floor needs only it, so the
        # other options are listed on first use (``best``): most ops fit their budget whole.
        # per tensor (by id): how its maps group by space axis (tensor_tile_bytes' first step,
        # made once per tensor instead of once per option)
        self._layouts: dict[int, tuple[int, tuple[tuple[int, tuple, tuple[AxisMap, ...]], ...]]] = {}
        self.finest: Option | None = self._option(axes[-1], 1, 1) if axes and (inputs or outputs) else None
        self._options: list[Option] | None = None

    @property
    def options(self) -> list[Option]:
        """The double-buffered tilings, one per tile count (the least working set), in order of
        working set."""
        if self._options is None:
            self._list_options()
        assert self._options is not None
        return self._options

    def _list_options(self) -> None:
        space, tileable = self.pattern.space, self.pattern.tileable
        options: list[Option] = []
        if self.inputs or self.outputs:
            for axis in range(len(space)):
                if tileable[axis] and space[axis] > 1:
                    candidates = [self._option(axis, -(-space[axis] // count), 2)
                                  for count in _counts(space[axis])]
                    options += [o for o in candidates if o is not None]
        # one double-buffered option per tile count: the one with the least working set
        best: dict[int, Option] = {}
        for o in options:
            if o.tiles not in best or (o.working_set, o.key()) < (best[o.tiles].working_set, best[o.tiles].key()):
                best[o.tiles] = o
        ordered = sorted(best.values(), key=lambda o: (o.working_set, o.key()))
        # the best key among the options up to each working set: best(budget) is a lookup
        self._ws = [o.working_set for o in ordered]
        self._prefix: list[Option] = []
        for o in ordered:
            self._prefix.append(o if not self._prefix or o.key() < self._prefix[-1].key() else self._prefix[-1])
        self._options = ordered

    def _option(self, axis: int, chunk: int, buffers: int) -> Option | None:
        space, tileable = self.pattern.space, self.pattern.tileable
        lead = [j for j in range(axis) if tileable[j]]
        tiles = math.prod(space[j] for j in lead) * -(-space[axis] // chunk)
        if tiles <= 1:
            return None
        n_starts = len(range(0, space[axis], chunk))

        def measure(tensors: list[Tensor]) -> tuple[int, int]:
            vtcm = moved = 0
            for t in tensors:
                biggest, total = self._tile_bytes(t, axis, chunk, n_starts)
                vtcm += _round_up(biggest, TILE_ALIGN)
                moved += total
            return vtcm, moved
        in_b, fill = measure(self.inputs)
        out_b, spill = measure(self.outputs)
        fill *= self.passes(axis)
        box = math.prod(1 if (j < axis and tileable[j]) else (chunk if j == axis else e) for j, e in enumerate(space))
        share = box / (math.prod(space) or 1)
        return Option(axis, chunk, tiles, buffers, in_b, out_b, self.scratch(share), fill, spill)

    def _tile_bytes(self, t: Tensor, axis: int, chunk: int, n_starts: int) -> tuple[int, int]:
        """tensor_tile_bytes(t, space, tileable, axis, chunk, starts) with ``n_starts`` =
        len(starts): the same values from the same operations in the same order, the maps'
        grouping made once per tensor and the per-axis extents cached by plain keys."""
        space, tileable = self.pattern.space, self.pattern.tileable
        if t.slice.maps is None:
            return tensor_tile_bytes(t, space, tileable, axis, chunk, range(n_starts))
        layout = self._layouts.get(id(t))
        if layout is None:
            constant = 1
            by_axis: dict[int, list[AxisMap]] = {}
            for m in t.slice.maps:
                if m.kind in ("full", "one") or m.axis < 0:
                    constant *= m.needed(0, 0)
                else:
                    by_axis.setdefault(m.axis, []).append(m)
            layout = self._layouts[id(t)] = (constant, tuple(
                (o, tuple(_map_key(m) for m in maps), tuple(maps)) for o, maps in by_axis.items()))
        constant, groups = layout
        biggest = total = 1.0
        lead_axes = set()
        for o, key, maps in groups:
            e = space[o]
            if o == axis:
                big, tot = _extents_keyed(key, e, chunk)
            elif o < axis and tileable[o]:
                big, tot = _extents_keyed(key, e, 1)
            else:
                big = tot = math.prod(m.needed(0, e) for m in maps)
            biggest *= big
            total *= tot
            lead_axes.add(o)
        # tiles along lead axes no map follows repeat the same slice
        for o in [j for j in range(axis) if tileable[j]] + [axis]:
            if o not in lead_axes:
                total *= n_starts if o == axis else space[o]
        biggest_b = math.ceil(biggest * constant * t.elem_bytes)
        total_b = math.ceil(total * constant * t.dma_elem_bytes)
        return biggest_b, total_b

    def passes(self, axis: int) -> int:
        """How often the tiles read their inputs when split along ``axis`` (and one index of
        the tileable axes before it): twice for a norm or Softmax whose reduced axis is split
        (statistics first, then the normalized values), else once."""
        p = self.pattern
        split = [j for j in range(axis) if p.tileable[j]] + [axis]
        return p.passes if p.reduced and any(p.reduced[j] for j in split) else 1

    def best(self, budget: int) -> Option | None:
        """The tiling kept at ``budget`` (None: not even the finest grid fits)."""
        if self._options is None:
            self._list_options()
        k = bisect.bisect_right(self._ws, budget)
        if k:
            return self._prefix[k - 1]
        return self.finest if self.finest is not None and self.finest.working_set <= budget else None

    def smallest(self) -> Option | None:
        """The tiling with the least working set: the finest grid, single-buffered."""
        return self.finest


def _counts(extent: int) -> list[int]:
    """Tile counts along an axis of ``extent`` that balanced chunks reach: ceil(extent / chunk)
    for every chunk length (at most 2 sqrt(extent) distinct values)."""
    return sorted({-(-extent // chunk) for chunk in range(1, extent + 1)})


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def tensor_tile_bytes(t: Tensor, space, tileable, axis: int, chunk: int, starts) -> tuple[int, int]:
    """(VTCM bytes of the largest tile's slice, DMA bytes of all tiles' slices) of tensor ``t``
    when the space is split along ``axis`` in chunks of ``chunk`` (tileable axes before it one
    index each)."""
    sl = t.slice
    if sl.maps is None:
        # a contiguous stream: tiles are contiguous ranges of the space in row-major order
        n = math.prod(space) or 1
        box = math.prod(1 if (j < axis and tileable[j]) else (chunk if j == axis else e)
                        for j, e in enumerate(space))
        footprint = t.total_bytes * t.elem_bytes / t.dma_elem_bytes
        return min(math.ceil(footprint), math.ceil(footprint * box / n)), t.total_bytes
    lead = [j for j in range(axis) if tileable[j]]
    biggest = total = 1.0
    constant = 1
    by_axis: dict[int, list[AxisMap]] = {}
    for m in sl.maps:
        if m.kind in ("full", "one") or m.axis < 0:
            constant *= m.needed(0, 0)
        else:
            by_axis.setdefault(m.axis, []).append(m)
    for o, maps in by_axis.items():
        e = space[o]
        if o == axis:
            big, tot = _extents(tuple(maps), e, chunk)
        elif o in lead:
            big, tot = _extents(tuple(maps), e, 1)
        else:
            big = tot = math.prod(m.needed(0, e) for m in maps)
        biggest *= big
        total *= tot
    # tiles along lead axes no map follows repeat the same slice
    for o in lead + [axis]:
        if o not in by_axis:
            total *= len(starts) if o == axis else space[o]
    biggest_b = math.ceil(biggest * constant * t.elem_bytes)
    total_b = math.ceil(total * constant * t.dma_elem_bytes)
    return biggest_b, total_b


def _map_key(m: AxisMap) -> tuple:
    return (m.kind, m.axis, m.extent, m.kernel, m.stride, m.pad, m.offset, m.out)


@functools.lru_cache(maxsize=65536)
def _extents_keyed(key: tuple, e: int, chunk: int) -> tuple[int, int]:
    """_extents of the maps whose fields are ``key`` (a tuple of ints and strings hashes in C;
    the frozen AxisMaps' generated hash was a tenth of the tiling catalog's time)."""
    return _extents(tuple(AxisMap(*fields) for fields in key), e, chunk)


@functools.lru_cache(maxsize=65536)
def _extents(maps: tuple[AxisMap, ...], e: int, chunk: int) -> tuple[int, int]:
    """(largest, summed) elements the ``maps`` of one space axis of extent ``e`` need over its
    chunks of ``chunk``."""
    values = [math.prod(m.needed(a, min(a + chunk, e)) for m in maps) for a in range(0, e, chunk)]
    return max(values), sum(values)


# ------------------------------------------------------------------------------ the tiles
@dataclass(frozen=True)
class Tile:
    """One tile: its box of the iteration space and the bytes of each slice it moves."""
    index: int
    box: tuple[tuple[int, int], ...]     # per space axis [start, end)
    fills: tuple[int, ...]               # bytes per input tensor slice (catalog order; repeated per
                                         # pass when a norm's reduced axis is split)
    spills: tuple[int, ...]              # bytes per output tensor slice
    share: float                         # fraction of the op's iteration space

    @property
    def shape(self) -> list[int]:
        return [b - a for a, b in self.box]


def tiles_of(catalog: TileCatalog, option: Option) -> list[Tile]:
    """The tiles of ``option`` in runlist order (row-major over the tile grid)."""
    space, tileable = catalog.pattern.space, catalog.pattern.tileable
    axis, chunk = option.axis, option.extent
    grids = []
    for j, e in enumerate(space):
        if j < axis and tileable[j]:
            grids.append([(i, i + 1) for i in range(e)])
        elif j == axis:
            grids.append([(a, min(a + chunk, e)) for a in range(0, e, chunk)])
        else:
            grids.append([(0, e)])
    n = math.prod(space) or 1
    out = []
    passes = catalog.passes(axis)
    # row-major product of the grids; linear offsets give exact stream bytes (they add up)
    for index, box in enumerate(_product(grids)):
        elems = math.prod(b - a for a, b in box)
        start = _linear(box, space)
        out.append(Tile(index, box,
                        tuple(_slice_bytes(t, box, space, start, elems, n) for t in catalog.inputs) * passes,
                        tuple(_slice_bytes(t, box, space, start, elems, n) for t in catalog.outputs),
                        elems / n))
    return out


def _product(grids):
    if not grids:
        yield ()
        return
    first, rest = grids[0], grids[1:]
    for r in first:
        for tail in _product(rest):
            yield (r,) + tail


def _linear(box, space) -> int:
    off = 0
    for (a, _), e in zip(box, space):
        off = off * e + a
    return off


def _slice_bytes(t: Tensor, box, space, start: int, elems: int, n: int) -> int:
    if t.slice.maps is None:
        # floor differences of the running total: the tiles' bytes add up to the tensor's
        return (t.total_bytes * (start + elems)) // n - (t.total_bytes * start) // n
    count = 1
    for m in t.slice.maps:
        if m.kind in ("full", "one") or m.axis < 0:
            count *= m.needed(0, 0)
        else:
            a, b = box[m.axis]
            count *= m.needed(a, b)
    return math.ceil(count * t.dma_elem_bytes)
