"""LoRA weight sharing in qnnemu context binaries (QNN HTP backend documentation, "QNN HTP Context
Config Options", QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED: "This feature extract
out updatable weights across all graphs and put the max sized one to be shared and stored in a
single context binary as a separate weight blob").  docs/lora.md.

Layout (``serialize`` of a context with ``loraWeightSharingEnabled = true``, via ``SharedLayout``):

* each graph's own ``QNN_TENSOR_TYPE_UPDATEABLE_STATIC`` tensors (its *updatable set*) are laid
  out from offset 0, in id order, each at a multiple of 64 bytes;
* the data section ends with ONE shared region as large as the largest updatable set, holding
  the current values of that graph's set (the first such graph on a tie, ``source``);
* every updatable tensor of every graph is a blob record pointing *into* that region (records of
  different graphs overlap: the bytes are stored once), so the loader reads each tensor as any
  other -- a graph that is not the source gets whatever bytes its slots overlap until
  contextApplyBinarySection fills its LoRA memory, which it must before executing
  (qnnemu/htp/lora.py);
* the metadata key ``lora_weight_sharing`` records ``{"offset", "size", "source", "graphs":
  {graph: bytes of its updatable set}}`` (offsets relative to the data section).

Context tensors are not part of a graph's LoRA memory and are stored as usual.  A context
without the config writes no record; a binary without the record is an "old serialized binary"
that "will still work without the lora weight sharing feature": loaded with the config it does
not share (warning rule QNNEMU-binary-lora-not-shared).
"""
from __future__ import annotations

import dataclasses
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import rules
from ...headers import Q
from ...htp import lora as htp_lora
from .format import ALIGN, Header, _align

RECORD_KEY = "lora_weight_sharing"


def _shared_tensor(t) -> bool:
    return t.type == Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC and t.data is not None


@dataclass
class SharedLayout:
    """Where each graph's updatable tensors sit in the shared region."""
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)   # graph -> tensor id -> offset
    sizes: dict[str, int] = field(default_factory=dict)                # graph -> bytes of its set
    source: str | None = None
    size: int = 0

    def covers(self, graph, tensor) -> bool:
        return tensor.id in self.offsets.get(graph.name, {})

    def stored_form(self, graph, tensor):
        """The tensor serialize describes: a shared one without data (its blob record is added by
        ``append_shared``), any other as it is."""
        return dataclasses.replace(tensor, data=None) if self.covers(graph, tensor) else tensor


def layout(context, graphs) -> SharedLayout | None:
    """The shared layout of ``graphs`` when ``context`` has LORA_WEIGHT_SHARING_ENABLED, else None."""
    if not htp_lora.enabled(getattr(context, "configs", None) or {}):
        return None
    out = SharedLayout()
    for g in graphs:
        rel, offsets = 0, {}
        for t in sorted((t for t in g.tensors.values() if _shared_tensor(t)), key=lambda t: t.id):
            offsets[t.id] = rel
            rel = _align(rel + t.nbytes)
        out.offsets[g.name] = offsets
        out.sizes[g.name] = rel
        if rel > out.size:   # the largest set (the first on a tie)
            out.source, out.size = g.name, rel
    return out


def append_shared(shared: SharedLayout | None, meta: dict, data: bytearray, graphs,
                  section_align: int | None = None) -> bytearray:
    """``data`` with the shared region appended, ``meta`` with the blob records of the shared
    tensors and the ``lora_weight_sharing`` record (nothing changes without a layout).  With
    ``section_align`` (format version 3's data sections) the region starts on that boundary
    and is listed in ``meta["sections"]`` as the data section "lora"."""
    if shared is None:
        return data
    base = _align(len(data), section_align) if section_align else _align(len(data))
    if section_align and "sections" in meta:
        meta["sections"].append({"name": "lora", "offset": base, "size": shared.size})
    region = bytearray(shared.size)
    by_name = {g.name: g for g in graphs}
    if shared.source is not None:
        g = by_name[shared.source]
        for tid, off in shared.offsets[shared.source].items():
            raw = np.ascontiguousarray(g.tensors[tid].data).tobytes()
            region[off:off + len(raw)] = raw
    blobs = meta["blobs"]
    for gj in meta["graphs"]:
        offsets = shared.offsets.get(gj["name"], {})
        for tj in gj["tensors"]:
            at = offsets.get(tj["id"])
            if at is None:
                continue
            size = by_name[gj["name"]].tensors[tj["id"]].nbytes
            tj["blob"] = len(blobs)
            blobs.append({"offset": base + at, "size": size, "crc32": zlib.crc32(region[at:at + size])})
    meta[RECORD_KEY] = {"offset": base, "size": shared.size, "source": shared.source,
                        "graphs": dict(shared.sizes)}
    out = bytearray(base + shared.size)
    out[:len(data)] = data
    out[base:] = region
    return out


# ------------------------------------------------------------------------------ reading
def record(view, h: Header) -> dict | None:
    """The ``lora_weight_sharing`` record of a checked binary (its header ``h``), or None.  The
    metadata was checked already; a record of the wrong shape counts as none."""
    try:
        meta = json.loads(bytes(view[h.metadata_offset:h.metadata_offset + h.metadata_size]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    rec = meta.get(RECORD_KEY) if isinstance(meta, dict) else None
    if not isinstance(rec, dict):
        return None
    offset, size, graphs = rec.get("offset"), rec.get("size"), rec.get("graphs")
    if not (isinstance(offset, int) and isinstance(size, int) and min(offset, size) >= 0
            and offset + size <= h.data_size and isinstance(graphs, dict)
            and all(isinstance(n, str) and isinstance(b, int) for n, b in graphs.items())):
        return None
    return rec


def attach(ctx, view, h: Header, info, load_configs: dict | None, func: str) -> None:
    """The loader's hook: tells the new context whether its binary shares LoRA memory
    (``ctx.lora_binary``: the record, or False) and corrects the graphs' own bytes (the shared
    region stays resident with the context, like weights shared by several graphs)."""
    rec = record(view, h) if htp_lora.enabled(info.context_configs) else None
    if rec is None:
        ctx.lora_binary = False
        if htp_lora.enabled(load_configs or {}):
            rules.warn("QNNEMU-binary-lora-not-shared", func, "config[].customConfig.loraWeightSharingEnabled",
                       "true, but the binary was prepared without QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_"
                       "ENABLED: it is loaded without LoRA weight sharing (its graphs keep their own updatable "
                       "weights and execute without contextApplyBinarySection); prepare it again with the config "
                       "to share them", logger=getattr(ctx, "log", None))
        return
    ctx.lora_binary = rec
    sizes = getattr(ctx, "binary_graph_bytes", None)
    if sizes:
        start, end = int(rec.get("offset", 0)), int(rec.get("offset", 0)) + int(rec["size"])
        shared: dict[str, int] = {}
        for g in info.graphs:
            for t in g.tensors:
                if t.blob is not None and start <= info.blobs[t.blob].offset < end:
                    shared[g.name] = shared.get(g.name, 0) + -(-info.blobs[t.blob].size // ALIGN) * ALIGN
        ctx.binary_graph_bytes = {n: max(0, b - shared.get(n, 0)) for n, b in sizes.items()}


def describe(blob: Any) -> dict | None:
    """The record of a qnnemu context binary (for qnnemu-context-binary-utility), or None: no
    qnnemu binary, or one prepared without LoRA weight sharing."""
    from ...errors import QnnError
    from .format import _as_view, parse_header
    try:
        view = _as_view(blob, "contextValidateBinary")
        h = parse_header(view, "contextValidateBinary")
    except QnnError:
        return None
    rec = record(view, h)
    if rec is None:
        return None
    return {"sharedBlobOffset": int(h.data_offset) + int(rec.get("offset", 0)), "sharedBlobSize": int(rec["size"]),
            "sourceGraph": rec.get("source"), "graphUpdatableBytes": dict(rec["graphs"])}
