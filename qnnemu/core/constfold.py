"""Constant folding at graphFinalize (QNN HTP backend documentation: the HTP prepares a graph
once, offline or at QnnGraph_finalize; a node whose inputs are all constant computes the same
values at every execute).

ONNX Runtime's QNN EP feeds 16-bit weights to Conv2d / FullyConnected through a Convert (the
unsigned codes to the symmetric signed ones HTP's A16W16 convolutions take), sometimes after a
Transpose; left in the plan, those nodes re-convert the weights at every execute and the
convolution sees dynamic weights (no prepared integer pipeline).  Here such nodes run once, at
finalize, through the very step the plan would have run (same converters, so the folded
values are the bytes an execute would have computed), and their outputs become static tensors
of the graph's plan view.  The nodes stay in the plan as steps without reads or writes
(``ConstantFolded``): the per-node profile still lists them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..headers import Q
from ..spec.tensor import UPDATEABLE_TYPES, is_static

# Data-movement and conversion ops only: folding them costs at most one copy of the weights.
# StridedSlice: ONNX Runtime's QNN EP slices an ONNX LSTM's W / R / B into the Lstm's per-gate
# weights with StridedSlice nodes (18 per Silero VAD cell).
FOLDABLE_OPS = frozenset({"Convert", "Transpose", "Reshape", "Cast", "Quantize", "Dequantize", "ExpandDims",
                          "Squeeze", "StridedSlice"})


class ConstantFolded:
    """The step of a node folded at finalize: its outputs are static values of the plan."""

    def run(self):
        return ()


class FoldedView:
    """``graph`` as the plan's steps see it: the folded nodes' outputs as static tensors."""

    def __init__(self, graph, tensors: dict[int, Any]):
        self._graph, self._tensors = graph, tensors

    def tensor(self, tid):
        t = self._tensors.get(tid)
        return t if t is not None else self._graph.tensor(tid)

    def __getattr__(self, name):
        return getattr(self._graph, name)


def _foldable(graph, node, tensor) -> bool:
    if node.op_type not in FOLDABLE_OPS or not node.inputs or not node.outputs:
        return False
    ins = [tensor(i) for i in node.inputs if i is not None]
    if not ins or any(not is_static(t) or t.data is None or t.type in UPDATEABLE_TYPES for t in ins):
        return False
    outs = [graph.tensor(i) for i in node.outputs]
    return all(t.type == Q.QNN_TENSOR_TYPE_NATIVE for t in outs)


def fold_constants(graph, compile_step: Callable) -> tuple[Any, dict[int, tuple[int, ...]]]:
    """The plan's view of ``graph`` and the folded nodes (node index -> output tensor ids).

    ``compile_step(view, node)`` builds a node's plan step; a foldable node's step is run here
    on its static inputs, in graph order (a fold may feed the next)."""
    tensors: dict[int, Any] = {}
    view = FoldedView(graph, tensors)
    folded: dict[int, tuple[int, ...]] = {}
    for k, node in enumerate(graph.nodes):
        if not _foldable(graph, node, view.tensor):
            continue
        slots: dict[Any, int] = {}
        statics: dict[int, np.ndarray] = {}

        def slot_of(key, slots=slots):
            return slots.setdefault(key, len(slots))

        step = compile_step(view, node, slot_of, statics)
        args: list[Any] = []
        for slot, conv in zip(step.reads, step.in_conv, strict=True):
            if slot < 0:
                args.append(None)
                continue
            v = statics[slot]
            args.append(conv(v) if conv is not None else v)
        results = step.impl.run(*args)
        values = [conv(v) if conv is not None else v for conv, v in zip(step.out_conv, results, strict=False)]
        if len(values) != len(node.outputs):
            continue
        for tid, value in zip(node.outputs, values, strict=True):
            t = graph.tensor(tid)
            value = np.ascontiguousarray(np.asarray(value).reshape(t.dims))
            tensors[tid] = dataclasses.replace(t, type=Q.QNN_TENSOR_TYPE_STATIC, data=value)
        folded[k] = tuple(node.outputs)
    return view, folded


__all__ = ["FOLDABLE_OPS", "ConstantFolded", "FoldedView", "fold_constants"]
