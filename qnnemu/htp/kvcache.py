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

Not enforced: the scatter index bound for ARN not a multiple of 32 (it depends on the values
fed at execute) and the VTCM-bound maximum context length.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..headers import Q
from ..location import Location
from ..rules import fail
from ..spec.tensor import APP_INPUT_TYPES, APP_OUTPUT_TYPES

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
        found[t.id] = NativeKv(t.id, t.name, kind, is_input, tuple(t.dims))
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


__all__ = ["K_TILE_SIZE", "V_TILE_SIZE", "KV_TILE_SIZES", "NATIVE_FORMAT", "NativeKv", "check_graph",
           "flat_to_native", "native_to_flat", "native_shape", "flat_shape", "native_index", "tile_size"]
