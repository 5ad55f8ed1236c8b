"""ONNX LSTM models (opset 14; QnnOpDef.h Lstm through ONNX Runtime's QNN execution provider): the
variants forward, reverse, bidirectional, initial states and peepholes, each with Y / Y_h / Y_c
outputs, its weights as initializers, and feeds.  Used by tests/test_onnxruntime_lstm.py in
process and by its vendor subprocess.  Import it only after checking that ``onnx`` is installed."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

T, B, I, H = 3, 2, 4, 5
VARIANTS = {
    "forward": {}, "reverse": {"direction": "reverse"}, "bidirectional": {"direction": "bidirectional"},
    "initial-states": {"init": True}, "peepholes": {"peep": True},
    "bidirectional-states-peepholes": {"direction": "bidirectional", "init": True, "peep": True},
}


def lstm_model(direction: str = "forward", init: bool = False, peep: bool = False, seed: int = 0):
    """An ONNX LSTM (opset 14) with Y, Y_h and Y_c outputs, its weights as initializers, and feeds."""
    rng = np.random.default_rng(seed)
    d = 2 if direction == "bidirectional" else 1
    inits = [numpy_helper.from_array((rng.standard_normal((d, 4 * H, I)) * 0.3).astype(np.float32), "W"),
             numpy_helper.from_array((rng.standard_normal((d, 4 * H, H)) * 0.3).astype(np.float32), "R"),
             numpy_helper.from_array((rng.standard_normal((d, 8 * H)) * 0.1).astype(np.float32), "B")]
    names = ["x", "W", "R", "B", "", "h0" if init else "", "c0" if init else ""]
    if peep:
        inits.append(numpy_helper.from_array((rng.standard_normal((d, 3 * H)) * 0.1).astype(np.float32), "P"))
        names.append("P")
    while names[-1] == "":
        names.pop()
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, B, I])]
    feeds = {"x": rng.standard_normal((T, B, I)).astype(np.float32)}
    if init:
        for n in ("h0", "c0"):
            graph_inputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, [d, B, H]))
            feeds[n] = rng.standard_normal((d, B, H)).astype(np.float32)
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, d, B, H]),
               helper.make_tensor_value_info("yh", TensorProto.FLOAT, [d, B, H]),
               helper.make_tensor_value_info("yc", TensorProto.FLOAT, [d, B, H])]
    node = helper.make_node("LSTM", names, ["y", "yh", "yc"], hidden_size=H, direction=direction)
    model = helper.make_model(helper.make_graph([node], "lstm", graph_inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model, feeds
