"""Native KV cache tensors (QNN HTP backend documentation, "LLM native KVcache", "HMX_WEIGHT_LAYOUT
explanation").

A graph input/output tensor created with ``dataFormat = QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT``
holds a KV cache in the HMX weight layout instead of the flat (row-major) one, so the HTP does
not have to transform the cache on every execute.  The tensor's ``dimensions`` stay the logical
(flat) shape ``[..., DIN, DOUT]``; only the order of the bytes in the buffer changes.  Leading
dimensions (heads, batch) are kept: each ``[DIN, DOUT]`` matrix (one head) is transformed on its
own.

The transformation, for one head ``[DIN, DOUT]`` and a tile size ``T`` (``KV_TILE_SIZES``)::

    [DIN, DOUT] -> DOUT/T * [DIN, T]
                -> DOUT/T * [DIN/32, T/32, 8:DIN, 32:T, 4:DIN]
                -> [DOUT/T, DIN*T/1024, 1024]

i.e. flat element ``(din, dout)`` goes to tile ``dout // T``; inside the tile, ``din`` splits into
``(din // 32, din % 32 // 4, din % 4)`` and ``t = dout % T`` into ``(t // 32, t % 32)``, ordered
``[din//32, t//32, din%32//4, t%32, din%4]``: 1024-element HMX blocks of 32 x 32, four ``din``
values innermost.

Which matrix is which (the documentation's ``[DIN, DOUT]`` is the HMX "weight" operand of the
attention MatMul): the K cache is ``[head_dim, context]`` (Q @ K^T contracts head_dim) and is tiled
along the context by ``K_TILE_SIZE = 256``; the V cache is ``[context, head_dim]`` (attn @ V
contracts the context) and is tiled along head_dim by ``V_TILE_SIZE = 64``.  The emulator tells K
from V by the axis the cache is updated along: the documentation requires the ScatterElements update
pattern, whose ``axis`` is the context axis (the last axis: K; the second to last: V).

The documented constraints, with the rule that enforces each (rules at tensor creation in
qnnemu/core/tensor.py, at finalize in ``check_graph``):

- KV cache tensors only: graph inputs/outputs (APP_* types) -- ``QNNEMU-tensor-native-kv-type``;
- uint8 (``QNN_DATATYPE_UFIXED_POINT_8``) -- ``QNNEMU-tensor-native-kv-dtype``;
- symmetrically quantized: for uint8 that is zero point 128, QNN offset -128 --
  ``QNNEMU-tensor-native-kv-quant``; rank >= 2 -- ``QNNEMU-tensor-native-kv-rank``;
- "The operator for concatenating new and old KV in attention must be ScatterElement instead of
  Concat": a native input must be the data input of a ScatterElements, a native output its
  output or its updates -- ``QNNEMU-graphFinalize-native-kv-pattern``; updated along one of the
  last two axes -- ``QNNEMU-graphFinalize-native-kv-axis``;
- context lengths a multiple of 256, head_dim a multiple of 64 (and the layout needs DIN a
  multiple of 32, DOUT of the tile) -- ``QNNEMU-graphFinalize-native-kv-shape``.  A native output
  holding only the new tokens (ScatterElements updates, ARN) needs its token count to fit the
  layout: a multiple of 32 (V) / of the 256 tile (K);
- "KVcache must be either fully in native format or not at all" (inputs) --
  ``QNNEMU-graphFinalize-native-kv-partial``;
- "Cannot support v68 targets or lower" -- ``QNNEMU-graphFinalize-native-kv-arch``.

- "For ARN where N is not multiple of 32 ... scatter_index <= (context length - roundup(ARN,32))":
  the position a native input's ScatterElements writes its N new tokens at (the smallest index
  along the context axis) -- static indices at finalize, ``QNNEMU-graphFinalize-native-kv-scatter-index``;
  indices fed at execute (a graph input) when they arrive, ``QNNEMU-graphExecute-native-kv-scatter-index``
  (``ScatterIndexBound``, installed by the plan as the indices' input conversion);
- "The maximum context length that can be supported is limited by the fixed VTCM size. For
  example, 2M VTCM won't support 16K context length or above" --
  ``QNNEMU-graphFinalize-native-kv-vtcm``.  The emulator's model (``vtcm_bytes_for_head``): the
  HMX attention of one head keeps that head's K and V caches in VTCM, 2 x head_dim x context
  bytes (uint8), which must be less than the VTCM the graph runs with.  With the smallest
  documented head_dim (64) 16K context needs exactly 2 MiB, so 2 MiB of VTCM holds contexts below
  16K, as the documentation's example says; a larger head_dim lowers the bound.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..headers import Q
from ..location import Location
from ..rules import fail
from ..spec.tensor import APP_INPUT_TYPES, APP_OUTPUT_TYPES, is_static
from .settings import graph_settings

NATIVE_FORMAT = Q.QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT
# The documentation: "KV_TILE_SIZE is fixed in this SDK version. K_TILE_SIZE=256, V_TILE_SIZE=64".
K_TILE_SIZE = 256
V_TILE_SIZE = 64
KV_TILE_SIZES = {"key": K_TILE_SIZE, "value": V_TILE_SIZE}
# One HMX block: [8:DIN, 32:T, 4:DIN] = 1024 elements (bytes, the cache being uint8).
BLOCK_DIN_OUTER = 8
BLOCK_T = 32
BLOCK_DIN_INNER = 4
DIN_GROUP = BLOCK_DIN_OUTER * BLOCK_DIN_INNER   # 32 DIN values per block
BLOCK_ELEMENTS = BLOCK_DIN_OUTER * BLOCK_T * BLOCK_DIN_INNER   # 1024
# Documented constraints on the cache itself.
CONTEXT_MULTIPLE = 256
HEAD_DIM_MULTIPLE = 64
UPDATE_TOKEN_MULTIPLE = 32      # "ARN where N is multiple of 32" may use a native KV output
MAX_UNSUPPORTED_ARCH = 68       # "Cannot support v68 targets or lower"
SYMMETRIC_UINT8_OFFSET = -128   # zero point 128 in QNN's scale * (code + offset)
KV_TENSORS_PER_HEAD = 2          # K and V of one head resident in VTCM together (the VTCM bound)


def round_up(n: int, multiple: int) -> int:
    return -(-int(n) // multiple) * multiple


def scatter_index_limit(context: int, new_tokens: int) -> int | None:
    """The largest scatter position the documentation allows for ``new_tokens`` (ARN) written into
    a native cache of ``context`` positions, or None when N is a multiple of 32 (no bound)."""
    if new_tokens % UPDATE_TOKEN_MULTIPLE == 0:
        return None
    return context - round_up(new_tokens, UPDATE_TOKEN_MULTIPLE)


def vtcm_bytes_for_head(head_dim: int, context: int) -> int:
    """VTCM one head's native K and V caches take (uint8: a byte per element)."""
    return KV_TENSORS_PER_HEAD * int(head_dim) * int(context)


@dataclass(frozen=True)
class ScatterIndexBound:
    """The scatter-index bound of a native KV input whose ScatterElements indices are fed at
    execute: called on the fed indices (the plan's input conversion of that tensor), it returns
    them unchanged or refuses the execute."""

    tensor_id: int
    name: str           # the indices tensor
    cache: str          # the native cache input
    axis: int
    context: int
    new_tokens: int
    limit: int

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        arr = np.asarray(indices)
        if arr.size:
            rank = arr.ndim
            axis = self.axis if rank > self.axis else rank - 1
            start = np.min(arr, axis=axis) if rank else arr
            worst = int(np.max(start))
            if worst > self.limit:
                fail(Location("graphExecute").path(f"inputs['{self.name}']"),
                     "QNNEMU-graphExecute-native-kv-scatter-index",
                     f"scatter index {worst} into native KV cache '{self.cache}' is above {self.limit} = "
                     f"context length {self.context} - roundup(ARN={self.new_tokens}, {UPDATE_TOKEN_MULTIPLE}): "
                     f"with N not a multiple of {UPDATE_TOKEN_MULTIPLE} the documentation requires "
                     f"scatter_index <= context length - roundup(ARN, 32)", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
        return indices


def tile_size(kind: str) -> int:
    """The tile size of a ``"key"`` or ``"value"`` cache."""
    if kind not in KV_TILE_SIZES:
        raise ValueError(f"kind must be one of {sorted(KV_TILE_SIZES)}, got {kind!r}")
    return KV_TILE_SIZES[kind]


def native_shape(flat_shape, kind: str) -> tuple[int, ...]:
    """``[..., DIN, DOUT]`` -> ``[..., DOUT/T, DIN*T/1024, 1024]``; ValueError when the flat
    shape does not fit the layout (DIN a multiple of 32, DOUT of the tile)."""
    t = tile_size(kind)
    shape = tuple(int(n) for n in flat_shape)
    if len(shape) < 2:
        raise ValueError(f"a KV cache has rank >= 2 ([..., DIN, DOUT]), got shape {list(shape)}")
    din, dout = shape[-2:]
    if din % DIN_GROUP or dout % t:
        raise ValueError(f"{kind} cache [..., DIN, DOUT] = {list(shape)}: DIN must be a multiple of "
                         f"{DIN_GROUP} and DOUT of the {kind} tile size {t}")
    return shape[:-2] + (dout // t, din * t // BLOCK_ELEMENTS, BLOCK_ELEMENTS)


def flat_shape(native_shape_: tuple[int, ...], kind: str) -> tuple[int, ...]:
    """The inverse of ``native_shape``."""
    t = tile_size(kind)
    shape = tuple(int(n) for n in native_shape_)
    if len(shape) < 3 or shape[-1] != BLOCK_ELEMENTS or (shape[-2] * BLOCK_ELEMENTS) % t:
        raise ValueError(f"native {kind} cache shape must be [..., DOUT/{t}, DIN*{t}/1024, 1024], "
                         f"got {list(shape)}")
    return shape[:-3] + (shape[-2] * BLOCK_ELEMENTS // t, shape[-3] * t)


def _split_axes(lead: tuple[int, ...], din: int, dout: int, t: int) -> tuple[int, ...]:
    # flat [..., DIN, DOUT] as [..., DIN/32, 8, 4, DOUT/T, T/32, 32]
    return lead + (din // DIN_GROUP, BLOCK_DIN_OUTER, BLOCK_DIN_INNER, dout // t, t // BLOCK_T, BLOCK_T)


def flat_to_native(flat: np.ndarray, kind: str) -> np.ndarray:
    """A flat KV cache ``[..., DIN, DOUT]`` in the HMX weight layout, shaped
    ``[..., DOUT/T, DIN*T/1024, 1024]`` (a new C-contiguous array; ``.tobytes()`` is what a
    native tensor's buffer holds)."""
    flat = np.asarray(flat)
    out_shape = native_shape(flat.shape, kind)
    t = tile_size(kind)
    lead = flat.shape[:-2]
    din, dout = flat.shape[-2:]
    x = flat.reshape(_split_axes(lead, din, dout, t))
    k = len(lead)
    # split axes: din_hi, din_mid, din_lo, tile, t_hi, t_lo -> tile, din_hi, t_hi, din_mid, t_lo, din_lo
    order = tuple(range(k)) + tuple(k + a for a in (3, 0, 4, 1, 5, 2))
    return np.ascontiguousarray(x.transpose(order)).reshape(out_shape)


def native_to_flat(native: np.ndarray, kind: str) -> np.ndarray:
    """The inverse of ``flat_to_native``: ``[..., DOUT/T, DIN*T/1024, 1024]`` -> flat
    ``[..., DIN, DOUT]`` (a new C-contiguous array)."""
    native = np.asarray(native)
    shape = flat_shape(native.shape, kind)
    t = tile_size(kind)
    lead = shape[:-2]
    din, dout = shape[-2:]
    k = len(lead)
    # native axes: tile, din_hi, t_hi, din_mid, t_lo, din_lo
    x = native.reshape(lead + (dout // t, din // DIN_GROUP, t // BLOCK_T, BLOCK_DIN_OUTER, BLOCK_T,
                               BLOCK_DIN_INNER))
    order = tuple(range(k)) + tuple(k + a for a in (1, 3, 5, 0, 2, 4))
    return np.ascontiguousarray(x.transpose(order)).reshape(shape)


def native_index(din: int, dout: int, kind: str) -> tuple[int, int, int]:
    """Where flat element ``(din, dout)`` of one head lands in the native ``[DOUT/T, DIN*T/1024,
    1024]`` array (the documentation's formula written out; tests compare it with
    ``flat_to_native``)."""
    t = tile_size(kind)
    tile, col = divmod(dout, t)
    row = (din // DIN_GROUP) * (t // BLOCK_T) + col // BLOCK_T
    inner = ((din % DIN_GROUP // BLOCK_DIN_INNER) * BLOCK_T + col % BLOCK_T) * BLOCK_DIN_INNER + din % BLOCK_DIN_INNER
    return tile, row, inner


# -------------------------------------------------------------------------- graph rules
@dataclass(frozen=True)
class NativeKv:
    """A native KV tensor of a finalized graph: its cache kind and where the plan converts it."""

    tensor_id: int
    name: str
    kind: str            # "key" or "value"
    is_input: bool       # graph input (native -> flat before the ops) or output (flat -> native)
    dims: tuple[int, ...]
    index_bound: ScatterIndexBound | None = None   # fed indices checked at execute (inputs only)

    def to_flat(self, arr: np.ndarray) -> np.ndarray:
        """A fed buffer (shaped like the tensor's logical dims, bytes in native order) -> flat."""
        return native_to_flat(arr.reshape(native_shape(self.dims, self.kind)), self.kind)

    def to_native(self, arr: np.ndarray) -> np.ndarray:
        """A flat result -> native order, shaped like the tensor's logical dims."""
        return flat_to_native(arr, self.kind).reshape(self.dims)


def _tensor(graph, t) -> str:
    """How a refused tensor is named in graphFinalize's native KV messages."""
    return f"graph '{graph.name}': tensor '{t.name}' (id {t.id})"


def _scatter_axis(node, rank: int) -> int:
    return int(node.params.get("axis", 0)) % max(rank, 1)


def _kv_link(graph, t, is_input: bool):
    """(ScatterElements node, role) linking ``t`` to the documented KV update pattern, or None."""
    by_name = {n.name: n for n in graph.nodes}
    if is_input:
        for name in t.consumers:
            node = by_name.get(name)
            if node is not None and node.op_type == "ScatterElements" and node.inputs[0] == t.id:
                return node, "cache"
        return None
    producer = by_name.get(t.producer) if t.producer else None
    if producer is not None and producer.op_type == "ScatterElements":
        return producer, "cache"
    for name in t.consumers:   # an output holding the new tokens, scattered into the cache
        node = by_name.get(name)
        if node is not None and node.op_type == "ScatterElements" and len(node.inputs) > 2 \
                and node.inputs[2] == t.id:
            return node, "update"
    return None


def _scatter_bound(graph, t, node, axis: int, context: int) -> ScatterIndexBound | None:
    """The documented scatter-index bound of native input ``t`` updated by ``node``: static
    indices are checked here, fed ones get a ScatterIndexBound for execute."""
    if len(node.inputs) < 3 or node.inputs[1] is None or node.inputs[2] is None:
        return None
    idx, upd = graph.tensor(node.inputs[1]), graph.tensor(node.inputs[2])
    upd_dims = tuple(int(d) for d in upd.dims)
    if len(upd_dims) <= axis:
        return None
    new_tokens = upd_dims[axis]
    limit = scatter_index_limit(context, new_tokens)
    if limit is None:
        return None
    if is_static(idx):
        if idx.data is None or not np.asarray(idx.data).size:
            return None
        data = np.asarray(idx.data).reshape(tuple(int(d) for d in idx.dims))
        worst = int(np.max(np.min(data, axis=min(axis, data.ndim - 1))))
        if worst > limit:
            fail(Location("graphFinalize"), "QNNEMU-graphFinalize-native-kv-scatter-index",
                 f"{_tensor(graph, t)}: ScatterElements '{node.name}' writes ARN={new_tokens} new tokens at "
                 f"static index {worst}, above {limit} = context length {context} - roundup({new_tokens}, "
                 f"{UPDATE_TOKEN_MULTIPLE}): with N not a multiple of {UPDATE_TOKEN_MULTIPLE} the documentation "
                 f"requires scatter_index <= context length - roundup(ARN, 32)", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        return None
    return ScatterIndexBound(idx.id, idx.name, t.name, axis, context, new_tokens, limit)


def _check_vtcm(graph, t, kind: str, head_dim: int, context: int) -> None:
    settings = graph_settings(graph)   # the VTCM budget the graph runs with
    need = vtcm_bytes_for_head(head_dim, context)
    if need >= settings.vtcm_bytes:
        longest = (settings.vtcm_bytes - 1) // (KV_TENSORS_PER_HEAD * head_dim)
        fail(Location("graphFinalize"), "QNNEMU-graphFinalize-native-kv-vtcm",
             f"{_tensor(graph, t)}: {kind} cache context length {context} (head_dim {head_dim}) is too long "
             f"for the graph's VTCM of {settings.vtcm_bytes} bytes ({settings.vtcm_source}): one head's K and V "
             f"take {need} bytes in the HMX layout (the emulator's model of the documented limit \"2M VTCM "
             f"won't support 16K context length or above\"); at most {longest} positions fit -- ask for "
             f"more VTCM (QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE) or use a shorter context",
             code=Q.QNN_GRAPH_ERROR_FINALIZE_FAILED)


def check_graph(graph, arch: int) -> dict[int, NativeKv]:
    """graphFinalize's native KV rules; returns tensor id -> NativeKv for the plan."""
    native = [t for t in graph.tensors.values() if getattr(t, "data_format", 0) == NATIVE_FORMAT]
    if not native:
        return {}
    found: dict[int, NativeKv] = {}
    for t in native:
        if arch <= MAX_UNSUPPORTED_ARCH:
            fail(Location("graphFinalize"), "QNNEMU-graphFinalize-native-kv-arch",
                 f"{_tensor(graph, t)}: "
                 f"QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT (native KV cache) is not supported on HTP "
                 f"v{arch} (v{MAX_UNSUPPORTED_ARCH} or lower); the device needs v69 or later",
                 code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)
        is_input = t.type in APP_INPUT_TYPES and t.producer is None
        if not is_input and t.type not in APP_OUTPUT_TYPES:   # creation rules keep this unreachable
            fail(Location("graphFinalize"), "QNNEMU-graphFinalize-native-kv-pattern",
                 f"{_tensor(graph, t)}: "
                 "a native KV tensor must be a graph input or output", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        link = _kv_link(graph, t, is_input)
        if link is None:
            where = ("the data input (in[0]) of a ScatterElements" if is_input else
                     "the output of a ScatterElements or its updates input (in[2])")
            fail(Location("graphFinalize"), "QNNEMU-graphFinalize-native-kv-pattern",
                 f"{_tensor(graph, t)}: "
                 f"a native KV {'input' if is_input else 'output'} must be {where}: the documented KV "
                 f"update pattern uses ScatterElements (not Concat); consumers "
                 f"{t.consumers or 'none'}, producer {t.producer or 'none'}", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        node, role = link
        rank = len(t.dims)
        axis = _scatter_axis(node, rank)
        if axis == rank - 1:
            kind = "key"
        elif axis == rank - 2:
            kind = "value"
        else:
            fail(Location("graphFinalize"), "QNNEMU-graphFinalize-native-kv-axis",
                 f"{_tensor(graph, t)}: "
                 f"ScatterElements '{node.name}' updates the cache along axis {axis} of dimensions "
                 f"{list(t.dims)}; a native KV cache is updated along its context axis, the last "
                 f"(K cache [.., head_dim, context]) or second to last (V cache [.., context, head_dim])",
                 code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        din, dout = t.dims[-2:]
        t_size = KV_TILE_SIZES[kind]
        context, head_dim = (dout, din) if kind == "key" else (din, dout)
        context_multiple = CONTEXT_MULTIPLE if role == "cache" else (
            K_TILE_SIZE if kind == "key" else UPDATE_TOKEN_MULTIPLE)
        if context % context_multiple or head_dim % HEAD_DIM_MULTIPLE or din % DIN_GROUP or dout % t_size:
            what = "context length" if role == "cache" else "new-token count (ScatterElements updates)"
            fail(Location("graphFinalize"), "QNNEMU-graphFinalize-native-kv-shape",
                 f"{_tensor(graph, t)}: "
                 f"{kind} cache dimensions {list(t.dims)} ([.., DIN={din}, DOUT={dout}]): the {what} "
                 f"{context} must be a multiple of {context_multiple} and head_dim {head_dim} a multiple "
                 f"of {HEAD_DIM_MULTIPLE} (layout: DIN a multiple of {DIN_GROUP}, DOUT of the {kind} tile "
                 f"{t_size})", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        if role == "cache":
            _check_vtcm(graph, t, kind, head_dim, context)
        bound = _scatter_bound(graph, t, node, axis, context) if is_input else None
        found[t.id] = NativeKv(t.id, t.name, kind, is_input, tuple(t.dims), bound)
    # "either fully in native format or not at all": every cache input updated by a
    # ScatterElements the same way as a native one must be native too.
    flat_caches = []
    for t in graph.tensors.values():
        if t.id in found or t.type not in APP_INPUT_TYPES or t.producer is not None:
            continue
        if t.dtype != Q.QNN_DATATYPE_UFIXED_POINT_8 or len(t.dims) < 2:
            continue
        link = _kv_link(graph, t, True)
        if link is not None and _scatter_axis(link[0], len(t.dims)) >= len(t.dims) - 2:
            flat_caches.append(t)
    if flat_caches and any(kv.is_input for kv in found.values()):
        t = flat_caches[0]
        natives = sorted(kv.name for kv in found.values() if kv.is_input)
        fail(Location("graphFinalize"), "QNNEMU-graphFinalize-native-kv-partial",
             f"{_tensor(graph, t)}: "
             f"KV cache input(s) {[x.name for x in flat_caches]} are flat while {natives} are "
             f"QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT: the KV cache must be fully native or not at all",
             code=Q.QNN_GRAPH_ERROR_FINALIZE_FAILED)
    return found


__all__ = ["ScatterIndexBound", "scatter_index_limit", "vtcm_bytes_for_head",
           "K_TILE_SIZE", "V_TILE_SIZE", "KV_TILE_SIZES", "NATIVE_FORMAT", "NativeKv", "check_graph",
           "flat_to_native", "native_to_flat", "native_shape", "flat_shape", "native_index", "tile_size"]
