"""QnnTensor.h creation entries: tensorCreateGraphTensor, tensorCreateContextTensor (the tensor
rules: qnnemu/core/tensor.py).  tensorUpdateGraphTensors / ContextTensors are section_api.py.
"""
from __future__ import annotations

from ..core.context import Context
from ..core.graph import Graph
from ..headers import Q
from .library import entry, get as _get
from .marshal import read_tensor, require


def _write_back_id(tensor, tid: int) -> None:
    if int(tensor.version) == 1:
        tensor.v1.id = tid
    else:
        tensor.v2.id = tid


@entry
def tensorCreateGraphTensor(graph, tensor):
    g = _get(graph, Graph, Q.QNN_TENSOR_ERROR_INVALID_HANDLE, "graph")
    require(tensor, Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, "tensorCreateGraphTensor", "tensor")
    t = g.create_tensor(read_tensor(tensor, "borrow"))   # the data: copied once, aligned
    _write_back_id(tensor, t.id)


@entry
def tensorCreateContextTensor(context, tensor):
    ctx = _get(context, Context, Q.QNN_TENSOR_ERROR_INVALID_HANDLE, "context")
    require(tensor, Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, "tensorCreateContextTensor", "tensor")
    t = ctx.create_tensor(read_tensor(tensor, "borrow"))
    _write_back_id(tensor, t.id)
