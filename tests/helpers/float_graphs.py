"""Two small float ONNX graphs (built with ``onnx.helper``; ONNX Runtime's QNN execution provider,
every node on the QNN backend): a CNN (Conv, Relu, MaxPool, GlobalAveragePool, Flatten, Gemm)
and Add / MatMul / Concat / Softmax on two inputs.  Used by tests/test_saver_replay.py (QNN
Saver recordings replayed) and tests/test_onnxruntime.py (the EP on our backend vs the CPU EP).
Import it only after checking that ``onnx`` is installed."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def _init(rng, name, shape, scale=0.2):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def cnn_model():
    """Conv+Relu+MaxPool+Conv+Relu+GlobalAveragePool+Flatten+Gemm."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inits = [_init(rng, "w1", (8, 3, 3, 3)), _init(rng, "b1", (8,)),
             _init(rng, "w2", (16, 8, 3, 3)), _init(rng, "b2", (16,)),
             _init(rng, "wf", (10, 16)), _init(rng, "bf", (10,))]
    return helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)


def add_concat_softmax_model():
    """Two inputs: Add, Concat with a projected branch (MatMul), Softmax."""
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("MatMul", ["a", "wm"], ["m"]),
        helper.make_node("Concat", ["s", "m"], ["c"], axis=-1),
        helper.make_node("Softmax", ["c"], ["y"], axis=-1),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 8]) for n in ("a", "b")]
    return helper.make_graph(
        nodes, "add_concat_softmax", inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 14])],
        [_init(rng, "wm", (8, 6))])


# name -> builder of the onnx GraphProto (the caller makes the model at its opset)
SMALL_FLOAT_GRAPHS = {"cnn": cnn_model, "add_concat_softmax": add_concat_softmax_model}
