"""Light stand-ins for qnnemu.core.graph.Graph / Node with the attributes the HTP cost model
(qnnemu/htp/cost.py) and the prepare pipeline (qnnemu/htp/prepare.py) read (QNN HTP backend
documentation, "Scheduling and Allocation"), for tests/test_htp_cost.py and
tests/test_htp_prepare.py (random graphs for hypothesis)."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from qnnemu.core.device import model_for
from qnnemu.headers import Q
from qnnemu.htp.soc import SOCS
from qnnemu.ops.base import QuantSpec, TensorSpec

F32, F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16
U8, U16 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_16
S8 = Q.QNN_DATATYPE_SFIXED_POINT_8
NATIVE, STATIC = Q.QNN_TENSOR_TYPE_NATIVE, Q.QNN_TENSOR_TYPE_STATIC
APP_WRITE, APP_READ = Q.QNN_TENSOR_TYPE_APP_WRITE, Q.QNN_TENSOR_TYPE_APP_READ


# ------------------------------------------------------------------------- stand-in graphs
@dataclass
class FakeTensor:
    id: int
    name: str
    type: int
    dtype: int
    dims: tuple
    quant: QuantSpec | None = None
    data: np.ndarray | None = None
    producer: str | None = None
    consumers: list = field(default_factory=list)

    def spec(self) -> TensorSpec:
        return TensorSpec(self.dims, self.dtype, self.quant, self.data, self.name)


@dataclass
class FakeNode:
    name: str
    op_type: str
    inputs: list
    outputs: list
    input_specs: list
    output_specs: list
    params: dict = field(default_factory=dict)


class FakeGraph:
    """What prepare_graph and op_cost read of a qnnemu.core.graph.Graph."""

    def __init__(self, name="fake", configs=None):
        self.name = name
        self.configs = configs or {}
        # prepared for SM8550 (qnnemu.htp.settings.device_model reads the context's device)
        self.context = SimpleNamespace(device=SimpleNamespace(model=SM8550), configs={})
        self.tensors: dict[int, FakeTensor] = {}
        self.nodes: list[FakeNode] = []

    def tensor(self, tid):
        return self.tensors.get(tid)

    def add_tensor(self, name, dims, dtype=U8, type_=NATIVE, data=None, quant=None) -> FakeTensor:
        t = FakeTensor(len(self.tensors) + 1, name, type_, dtype, tuple(dims), quant, data)
        if type_ == STATIC and data is None:
            t.data = np.zeros(dims, np.uint8)
        self.tensors[t.id] = t
        return t

    def add_node(self, op_type, name, inputs, outputs, **params) -> FakeNode:
        n = FakeNode(name, op_type, [t.id for t in inputs], [t.id for t in outputs],
                     [t.spec() for t in inputs], [t.spec() for t in outputs], params)
        for t in inputs:
            t.consumers.append(name)
        for t in outputs:
            t.producer = name
        self.nodes.append(n)
        return n

    def set_vtcm(self, nbytes: int) -> None:
        """The VTCM budget as a VTCM_SIZE_IN_BYTES request (qnnemu/htp/settings.py's record)."""
        self.configs["htp_vtcm"] = {"option": "VTCM_SIZE_IN_BYTES", "bytes": int(nbytes)}


def fake_node(op_type, in_shapes, out_shape, dtype=U8, weight=None, weight_dtype=None, **params):
    """One node of ``op_type`` in its own graph: inputs of ``in_shapes`` (NATIVE), an optional
    static ``weight`` shape as the second input, one NATIVE output."""
    g = FakeGraph()
    ins = [g.add_tensor(f"in{i}", s, dtype) for i, s in enumerate(in_shapes)]
    if weight is not None:
        ins.insert(1, g.add_tensor("w", weight, weight_dtype or dtype, STATIC))
    out = g.add_tensor("out", out_shape, dtype)
    node = g.add_node(op_type, "n", ins, [out], **params)
    return node, g



# Every test names its SoC: SM8550 (v73, 8 MiB VTCM, 4 HVX threads), not the default device.
SM8550 = model_for(SOCS[Q.QNN_SOC_MODEL_SM8550], soc_configured=True)
