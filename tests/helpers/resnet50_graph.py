"""A ResNet-50-shaped quantized graph (uint8 activations and weights, SM8550) built through
qnnemu.client (QnnGraph.h: graphCreate / tensorCreateGraphTensor / graphAddNode), for the cost
model's batch and RPC tests (QNN HTP backend documentation, "Benefits of batch inference and
multi-threaded inference": the ResNet-50 example).  The topology is ResNet-50's (bottleneck blocks
3-4-6-3, 224x224 input, 1000 classes); the weights are random (only shapes and bytes matter to the
cost model)."""
from __future__ import annotations

import numpy as np

from qnnemu.headers import Q

U8 = Q.QNN_DATATYPE_UFIXED_POINT_8
S32 = Q.QNN_DATATYPE_SFIXED_POINT_32
ACT_Q = (0.05, 0)
W_Q = (0.01, -128)


class _Builder:
    def __init__(self, graph, seed: int = 0):
        self.g = graph
        self.rng = np.random.default_rng(seed)
        self.n = 0

    def name(self, hint: str) -> str:
        self.n += 1
        return f"{hint}_{self.n}"

    def conv(self, x, shape, cout: int, k: int, stride: int = 1, relu: bool = True):
        n, h, w, cin = shape
        pad = k // 2
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        name = self.name("conv")
        wt = self.g.static(f"{name}_w", self.rng.integers(0, 256, (k, k, cin, cout), dtype=np.uint8), U8, quant=W_Q)
        b = self.g.static(f"{name}_b", np.zeros(cout, np.int32), S32, quant=(ACT_Q[0] * W_Q[0], 0))
        out = (n, oh, ow, cout)
        y = self.g.node("Conv2d", [x, wt, b], [(f"{name}_y", out, U8, ACT_Q)], name=name, params={
            "stride": np.array([stride, stride], np.uint32),
            "pad_amount": np.array([[pad, pad], [pad, pad]], np.uint32)})
        if relu:
            y = self.g.node("Relu", [y], [(f"{name}_r", out, U8, ACT_Q)], name=f"{name}_relu")
        return y, out

    def bottleneck(self, x, shape, mid: int, cout: int, stride: int):
        y, s = self.conv(x, shape, mid, 1)
        y, s = self.conv(y, s, mid, 3, stride)
        y, s = self.conv(y, s, cout, 1, relu=False)
        if stride != 1 or shape[-1] != cout:
            x, _ = self.conv(x, shape, cout, 1, stride, relu=False)
        name = self.name("add")
        y = self.g.node("ElementWiseAdd", [y, x], [(f"{name}_y", s, U8, ACT_Q)], name=name)
        y = self.g.node("Relu", [y], [(f"{name}_r", s, U8, ACT_Q)], name=f"{name}_relu")
        return y, s


def build_resnet50(context, name: str = "resnet50", hw: int = 224, configs=()):
    """Adds ResNet-50 (NHWC, batch 1) to ``context`` (a qnnemu.client Context) and finalizes it;
    returns the qnnemu.client Graph."""
    g = context.graph(name, configs=configs)
    b = _Builder(g)
    x = g.input("x", (1, hw, hw, 3), U8, quant=ACT_Q)
    y, s = b.conv(x, (1, hw, hw, 3), 64, 7, 2)
    oh = (s[1] + 2 - 3) // 2 + 1
    y = g.node("PoolMax2d", [y], [("pool1", (1, oh, oh, 64), U8, ACT_Q)], name="pool1", params={
        "filter_size": np.array([3, 3], np.uint32), "stride": np.array([2, 2], np.uint32),
        "pad_amount": np.array([[1, 1], [1, 1]], np.uint32)})
    s = (1, oh, oh, 64)
    for mid, cout, blocks, stride in ((64, 256, 3, 1), (128, 512, 4, 2), (256, 1024, 6, 2), (512, 2048, 3, 2)):
        for i in range(blocks):
            y, s = b.bottleneck(y, s, mid, cout, stride if i == 0 else 1)
    y = g.node("PoolAvg2d", [y], [("gap", (1, 1, 1, 2048), U8, ACT_Q)], name="gap", params={
        "filter_size": np.array([s[1], s[2]], np.uint32), "stride": np.array([1, 1], np.uint32)})
    y = g.node("Reshape", [y], [("flat", (1, 2048), U8, ACT_Q)], name="flat")
    fw = g.static("fc_w", b.rng.integers(0, 256, (1000, 2048), dtype=np.uint8), U8, quant=W_Q)
    fb = g.static("fc_b", np.zeros(1000, np.int32), S32, quant=(ACT_Q[0] * W_Q[0], 0))
    g.node("FullyConnected", [y, fw, fb], [("logits", (1, 1000), U8, (0.1, 0))], name="fc", app_read=True)
    g.finalize()
    return g
