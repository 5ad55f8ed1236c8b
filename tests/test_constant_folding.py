"""Constant folding at graphFinalize (qnnemu/core/constfold.py): a Convert / Transpose of static
weights -- how ONNX Runtime's QNN EP hands 16-bit weights to Conv2d and FullyConnected -- is
computed once; its consumer then sees static weights (the prepared integer pipeline, the C
engine with no Python fallback), and the outputs are the bytes the unfolded graph computes."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, NATIVE, STATIC, GraphBuilder, new_context, run

from qnnemu.core.constfold import ConstantFolded
from qnnemu.core.handles import HANDLES
from qnnemu.core.plan import ClipInt16Weights
from qnnemu.headers import Q

U16, S16 = Q.QNN_DATATYPE_UFIXED_POINT_16, Q.QNN_DATATYPE_SFIXED_POINT_16
UPDATEABLE_STATIC = Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC
XQ, WQ_U, WQ_S, YQ = (1 / 4000, -32768), (1 / 32768, -32768), (1 / 32768, 0), (1 / 256, -32768)


def fc_graph(name: str, w_codes_u16: np.ndarray, through_convert: bool, w_type=STATIC, convert_out=NATIVE):
    """x[2, 16] (u16) . w^T: w as int16 codes, either static (the codes converted here) or a
    static uint16 tensor through a Convert node (as the EP emits)."""
    b = GraphBuilder(new_context(), name)
    x = b.tensor("x", (2, 16), U16, type_=APP_WRITE, quant=XQ)
    if through_convert:
        wu = b.tensor("w_u16", w_codes_u16.shape, U16, type_=w_type, data=w_codes_u16, quant=WQ_U)
        w = b.tensor("w", w_codes_u16.shape, S16, type_=convert_out, quant=WQ_S)
        b.node("Convert", "w_convert", [wu], [w])
    else:
        codes = (w_codes_u16.astype(np.int32) - 32768).astype(np.int16)
        w = b.tensor("w", w_codes_u16.shape, S16, type_=STATIC, data=codes, quant=WQ_S)
    y = b.tensor("y", (2, 8), U16, type_=APP_READ, quant=YQ)
    b.node("FullyConnected", "fc", [x, w], [y])
    b.graph.finalize()
    return b


def feeds():
    return {"x": np.random.default_rng(3).integers(0, 65536, (2, 16)).astype(np.uint16)}


@pytest.fixture
def weights():
    w = np.random.default_rng(7).integers(0, 65536, (8, 16)).astype(np.uint16)
    w[0, :4] = [0xFFFF, 0xFFF0, 0xFF80, 0xFFC0]   # int16 codes above 0x7F7F after the Convert
    return w


def test_convert_of_static_weights_is_computed_at_finalize(weights):
    folded = fc_graph("folded", weights, through_convert=True)
    direct = fc_graph("direct", weights, through_convert=False)
    try:
        steps = {s.node.name: s for s in folded.graph.plan.steps}
        assert isinstance(steps["w_convert"].impl, ConstantFolded), "the Convert of static weights was folded"
        assert steps["w_convert"].reads == [] and steps["w_convert"].writes == [], "a folded step reads/writes nothing"
        fc = steps["fc"]
        assert not any(isinstance(c, ClipInt16Weights) for c in fc.in_conv), \
            "FullyConnected reads static weights (no per-execute int16 clip)"
        assert folded.graph.plan.engine is not None and folded.graph.plan.engine.fallbacks == [], \
            "every step of the folded graph runs in C"
        assert any("computed at finalize" in n for n in folded.graph.plan.notes), "the plan notes name the fold"
        a, b = run(folded.graph, feeds()), run(direct.graph, feeds())
        assert a["y"].tobytes() == b["y"].tobytes(), "folded outputs equal the pre-converted weights' outputs"
    finally:
        HANDLES.release(folded.handle)
        HANDLES.release(direct.handle)


@pytest.mark.parametrize("case", ["updateable-static weights", "Convert output read by the app"])
def test_not_folded(weights, case, monkeypatch):
    """Updateable statics can change after finalize, an APP_READ output must be produced at
    execute: neither is folded; outputs still equal the direct graph's."""
    kw = {"w_type": UPDATEABLE_STATIC} if case.startswith("updateable") else {"convert_out": APP_READ}
    b = fc_graph("kept", weights, through_convert=True, **kw)
    direct = fc_graph("direct2", weights, through_convert=False)
    try:
        step = next(s for s in b.graph.plan.steps if s.node.name == "w_convert")
        assert not isinstance(step.impl, ConstantFolded), f"{case}: the Convert stays a step"
        assert run(b.graph, feeds())["y"].tobytes() == run(direct.graph, feeds())["y"].tobytes(), \
            f"{case}: outputs equal the pre-converted weights' outputs"
    finally:
        HANDLES.release(b.handle)
        HANDLES.release(direct.handle)
