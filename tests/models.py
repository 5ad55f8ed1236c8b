"""ONNX models for the ONNX Runtime tests and benchmarks, built with ``onnx.helper``.

Float models (deterministic: every builder seeds its own generator, weights are He-scaled so
activations stay O(1) through the network):

- ``plain_cnn``: Conv/Relu/MaxPool/Conv/Relu/GlobalAveragePool/Flatten/Gemm/Softmax, with
  two outputs (the logits, which also feed the Softmax, and the probabilities);
- ``residual_cnn``: a ResNet stem and basic blocks (identity and strided 1x1-projection
  shortcuts) joined by Add;
- ``mobilenet_v2``: inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1 project, Add),
  Clip(0, 6) = Relu6 and HardSwish activations;
- ``unet_resize``: an encoder/decoder with Resize (nearest, asymmetric/floor and linear,
  half_pixel) upsampling, skip Concats and a per-pixel Softmax head (axis 1);
- ``transformer_gelu`` (opset 20 ``Gelu``), ``transformer_gelu_erf`` (the Erf decomposition),
  ``transformer_silu`` (x * Sigmoid(x)): two encoder layers with multi-head attention (MatMul,
  Add, Reshape, Transpose, Mul-scaled Softmax), LayerNormalization and an MLP;
- ``resnet18``: the real ResNet-18 topology at 1x3x224x224 with BatchNormalization nodes
  present (the benchmark model; heavy, tests mark it ``slow``).

``SMALL_MODELS`` / ``BIG_MODELS`` name the builders. QDQ versions come from
``onnxruntime.quantization.quantize_static`` (QuantFormat.QDQ) with a calibration reader of
random inputs: :func:`quantize` with one of ``QDQ_CONFIGS``.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10  # ONNX Runtime 1.2x/1.3x reads it; allows every opset used here (<= 21)


class Builder:
    """Accumulates nodes and initializers; names every node and tensor uniquely."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count: dict[str, int] = {}

    def _name(self, hint: str) -> str:
        n = self._count.get(hint, 0)
        self._count[hint] = n + 1
        return f"{hint}_{n}"

    # -- tensors ---------------------------------------------------------------------------
    def const(self, hint: str, value) -> str:
        name = self._name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, hint: str, shape, std: float) -> str:
        return self.const(hint, (self.rng.standard_normal(shape) * std).astype(np.float32))

    # -- nodes -----------------------------------------------------------------------------
    def node(self, op: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs):
        name = self._name(op.lower())
        outs = [f"{name}_out{i}" if n_out > 1 else f"{name}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, domain=domain or None, **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
             bias: bool = True, gain: float = 2.0) -> str:
        fan_in = cin // group * k * k
        w = self.weight("w", (cout, cin // group, k, k), math.sqrt(gain / fan_in))
        ins = [x, w]
        if bias:
            ins.append(self.weight("b", (cout,), 0.05))
        p = k // 2
        return self.node("Conv", ins, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[p, p, p, p], group=group)

    def bn(self, x: str, c: int, gamma: tuple[float, float] = (0.5, 1.0)) -> str:
        r = self.rng
        scale = self.const("bn_scale", r.uniform(*gamma, c).astype(np.float32))
        shift = self.const("bn_bias", (r.standard_normal(c) * 0.05).astype(np.float32))
        mean = self.const("bn_mean", (r.standard_normal(c) * 0.05).astype(np.float32))
        var = self.const("bn_var", r.uniform(0.8, 1.2, c).astype(np.float32))
        return self.node("BatchNormalization", [x, scale, shift, mean, var], epsilon=1e-5)

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def relu6(self, x: str) -> str:
        lo = self.const("clip_min", np.array(0.0, np.float32))
        hi = self.const("clip_max", np.array(6.0, np.float32))
        return self.node("Clip", [x, lo, hi])

    def linear(self, x: str, din: int, dout: int, gain: float = 1.0) -> str:
        """MatMul + Add (how exporters write nn.Linear on rank-3 inputs)."""
        w = self.weight("w", (din, dout), math.sqrt(gain / din))
        b = self.weight("b", (dout,), 0.02)
        return self.node("Add", [self.node("MatMul", [x, w]), b])

    def gemm(self, x: str, din: int, dout: int) -> str:
        w = self.weight("w", (dout, din), math.sqrt(1.0 / din))
        b = self.weight("b", (dout,), 0.02)
        return self.node("Gemm", [x, w, b], transB=1)

    # -- model -----------------------------------------------------------------------------
    def model(self, name: str, inputs: dict[str, tuple[int, ...]], outputs: list[str],
              opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
            self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="qnnemu-tests")
        m.ir_version = IR_VERSION
        # Static output shapes, from ONNX shape inference (the QNN EP needs them).
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        shapes = {v.name: v for v in inferred.graph.output}
        for o in m.graph.output:
            o.CopyFrom(shapes[o.name])
        onnx.checker.check_model(m, full_check=True)
        return m


# ---------------------------------------------------------------------------------------
# CNNs
# ---------------------------------------------------------------------------------------

def plain_cnn() -> onnx.ModelProto:
    """Conv/Relu/MaxPool x2, Conv/Relu, GlobalAveragePool, Flatten, Gemm, Softmax; 1x3x32x32;
    outputs logits and probabilities."""
    b = Builder(101)
    h = b.relu(b.conv("x", 3, 16, 3))
    h = b.node("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    h = b.relu(b.conv(h, 16, 32, 3))
    h = b.node("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    h = b.relu(b.conv(h, 32, 32, 3))
    h = b.node("Flatten", [b.node("GlobalAveragePool", [h])])
    logits = b.gemm(h, 32, 10)
    probs = b.node("Softmax", [logits], axis=-1)
    # Two outputs, one of which also feeds a node (a graph output read inside the graph).
    return b.model("plain_cnn", {"x": (1, 3, 32, 32)}, [logits, probs])


def _basic_block(b: Builder, x: str, cin: int, cout: int, stride: int, batchnorm: bool) -> str:
    """ResNet basic block: conv3x3-(bn)-relu-conv3x3-(bn) + shortcut, relu."""
    h = b.conv(x, cin, cout, 3, stride, bias=not batchnorm)
    h = b.relu(b.bn(h, cout) if batchnorm else h)
    # The residual branch's last conv is scaled down (like zero-init-residual, not zero) so the
    # activations do not grow block after block.
    h = b.conv(h, cout, cout, 3, 1, bias=not batchnorm, gain=0.5)
    if batchnorm:
        h = b.bn(h, cout, gamma=(0.2, 0.5))
    if stride != 1 or cin != cout:
        x = b.conv(x, cin, cout, 1, stride, bias=not batchnorm, gain=1.0)
        if batchnorm:
            x = b.bn(x, cout)
    return b.relu(b.node("Add", [h, x]))


def residual_cnn() -> onnx.ModelProto:
    """ResNet stem + 3 basic blocks (identity, strided projection, identity) + GAP + Gemm."""
    b = Builder(102)
    h = b.relu(b.conv("x", 3, 16, 3))
    h = _basic_block(b, h, 16, 16, 1, batchnorm=False)
    h = _basic_block(b, h, 16, 32, 2, batchnorm=False)
    h = _basic_block(b, h, 32, 32, 1, batchnorm=False)
    h = b.node("Flatten", [b.node("GlobalAveragePool", [h])])
    return b.model("residual_cnn", {"x": (1, 3, 32, 32)}, [b.gemm(h, 32, 10)])


def _inverted_residual(b: Builder, x: str, cin: int, cout: int, stride: int, expand: int,
                       act: Callable[[str], str]) -> str:
    c = cin * expand
    h = act(b.conv(x, cin, c, 1))                          # 1x1 expand
    h = act(b.conv(h, c, c, 3, stride, group=c))           # 3x3 depthwise
    h = b.conv(h, c, cout, 1, gain=1.0)                    # 1x1 linear projection
    if stride == 1 and cin == cout:
        h = b.node("Add", [h, x])
    return h


def mobilenet_v2() -> onnx.ModelProto:
    """MobileNetV2-style: stem, inverted residual blocks with Relu6 (Clip 0..6) and HardSwish."""
    b = Builder(103)

    def hswish(t: str) -> str:
        return b.node("HardSwish", [t])

    h = b.relu6(b.conv("x", 3, 16, 3, 2))
    h = _inverted_residual(b, h, 16, 16, 1, 4, b.relu6)
    h = _inverted_residual(b, h, 16, 24, 2, 4, b.relu6)
    h = _inverted_residual(b, h, 24, 24, 1, 4, hswish)
    h = _inverted_residual(b, h, 24, 32, 2, 4, hswish)
    h = hswish(b.conv(h, 32, 64, 1))
    h = b.node("Flatten", [b.node("GlobalAveragePool", [h])])
    return b.model("mobilenet_v2", {"x": (1, 3, 32, 32)}, [b.gemm(h, 64, 10)], opset=17)


def unet_resize() -> onnx.ModelProto:
    """Encoder (conv, maxpool), decoder with Resize nearest and linear x2 upsampling, skip
    Concats, per-pixel Softmax over the channel axis."""
    b = Builder(104)
    e1 = b.relu(b.conv("x", 3, 8, 3))                                   # 8x32x32
    e2 = b.relu(b.conv(b.node("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]), 8, 16, 3))  # 16x16x16
    bott = b.relu(b.conv(b.node("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2]), 16, 16, 3))  # 16x8x8
    scales = b.const("scales", np.array([1, 1, 2, 2], np.float32))
    up1 = b.node("Resize", [bott, "", scales], mode="nearest",
                 coordinate_transformation_mode="asymmetric", nearest_mode="floor")  # 16x16x16
    d1 = b.relu(b.conv(b.node("Concat", [up1, e2], axis=1), 32, 8, 3))  # 8x16x16
    sizes = b.const("sizes", np.array([1, 8, 32, 32], np.int64))
    up2 = b.node("Resize", [d1, "", "", sizes], mode="linear",
                 coordinate_transformation_mode="half_pixel")           # 8x32x32
    d2 = b.relu(b.conv(b.node("Concat", [up2, e1], axis=1), 16, 8, 3))  # 8x32x32
    y = b.node("Softmax", [b.conv(d2, 8, 4, 1, gain=1.0)], axis=1)
    return b.model("unet_resize", {"x": (1, 3, 32, 32)}, [y])


# ---------------------------------------------------------------------------------------
# Transformer encoder
# ---------------------------------------------------------------------------------------

SEQ, DIM, HEADS, FFN = 16, 32, 4, 64


def _layernorm(b: Builder, x: str, d: int) -> str:
    g = b.const("ln_scale", (1.0 + 0.1 * b.rng.standard_normal(d)).astype(np.float32))
    beta = b.const("ln_bias", (0.05 * b.rng.standard_normal(d)).astype(np.float32))
    return b.node("LayerNormalization", [x, g, beta], axis=-1, epsilon=1e-5)


def _attention(b: Builder, x: str) -> str:
    dh = DIM // HEADS
    heads = b.const("shape_heads", np.array([1, SEQ, HEADS, dh], np.int64))
    merged = b.const("shape_merged", np.array([1, SEQ, DIM], np.int64))

    def split(t: str, perm: list[int]) -> str:
        return b.node("Transpose", [b.node("Reshape", [t, heads])], perm=perm)

    q = split(b.linear(x, DIM, DIM), [0, 2, 1, 3])       # 1,H,S,dh
    k = split(b.linear(x, DIM, DIM), [0, 2, 3, 1])       # 1,H,dh,S
    v = split(b.linear(x, DIM, DIM), [0, 2, 1, 3])       # 1,H,S,dh
    s = b.node("MatMul", [q, k])                          # 1,H,S,S
    # Scaled with Mul: the vendor's x86 HTP cannot prepare this attention's MatMuls when the
    # scores are scaled with Div ("could not create op", QNN_COMMON_ERROR_MEM_ALLOC).
    s = b.node("Mul", [s, b.const("inv_sqrt_dh", np.array(1 / math.sqrt(dh), np.float32))])
    p = b.node("Softmax", [s], axis=-1)
    o = b.node("Transpose", [b.node("MatMul", [p, v])], perm=[0, 2, 1, 3])  # 1,S,H,dh
    return b.linear(b.node("Reshape", [o, merged]), DIM, DIM)


def _activation(b: Builder, x: str, kind: str) -> str:
    if kind == "gelu":
        return b.node("Gelu", [x])
    if kind == "gelu_erf":  # 0.5 * x * (1 + erf(x / sqrt(2))), as exported by PyTorch < 2
        e = b.node("Erf", [b.node("Div", [x, b.const("sqrt2", np.array(math.sqrt(2), np.float32))])])
        h = b.node("Mul", [x, b.node("Add", [e, b.const("one", np.array(1.0, np.float32))])])
        return b.node("Mul", [h, b.const("half", np.array(0.5, np.float32))])
    if kind == "silu":
        return b.node("Mul", [x, b.node("Sigmoid", [x])])
    raise ValueError(kind)


def _encoder_layer(b: Builder, x: str, act: str) -> str:
    h = _layernorm(b, b.node("Add", [x, _attention(b, x)]), DIM)
    f = b.linear(_activation(b, b.linear(h, DIM, FFN, gain=2.0), act), FFN, DIM)
    return _layernorm(b, b.node("Add", [h, f]), DIM)


def _transformer(act: str, seed: int, opset: int) -> onnx.ModelProto:
    b = Builder(seed)
    h = _encoder_layer(b, "x", act)
    h = _encoder_layer(b, h, act)
    return b.model(f"transformer_{act}", {"x": (1, SEQ, DIM)}, [h], opset=opset)


def transformer_gelu() -> onnx.ModelProto:
    """Two encoder layers, opset 20 Gelu."""
    return _transformer("gelu", 105, 20)


def transformer_gelu_erf() -> onnx.ModelProto:
    """Two encoder layers, Gelu written as Div/Erf/Add/Mul/Mul."""
    return _transformer("gelu_erf", 106, 17)


def transformer_silu() -> onnx.ModelProto:
    """Two encoder layers, SiLU (x * Sigmoid(x))."""
    return _transformer("silu", 107, 17)


# ---------------------------------------------------------------------------------------
# ResNet-18
# ---------------------------------------------------------------------------------------

def resnet18(batchnorm: bool = True) -> onnx.ModelProto:
    """ResNet-18 (torchvision topology) at 1x3x224x224: 7x7/2 stem, BN, Relu, 3x3/2 MaxPool,
    4 stages of 2 basic blocks (64, 128, 256, 512 channels; strided 1x1 projections), GAP,
    Gemm to 1000 classes. Random He-scaled weights; BatchNormalization nodes present unless
    ``batchnorm=False`` (then the convs carry biases instead)."""
    b = Builder(118)
    h = b.conv("x", 3, 64, 7, 2, bias=not batchnorm)
    h = b.relu(b.bn(h, 64) if batchnorm else h)
    h = b.node("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            h = _basic_block(b, h, cin, cout, stride, batchnorm)
            cin = cout
    h = b.node("Flatten", [b.node("GlobalAveragePool", [h])])
    return b.model("resnet18", {"x": (1, 3, 224, 224)}, [b.gemm(h, 512, 1000)])


SMALL_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "plain_cnn": plain_cnn,
    "residual_cnn": residual_cnn,
    "mobilenet_v2": mobilenet_v2,
    "unet_resize": unet_resize,
    "transformer_gelu": transformer_gelu,
    "transformer_gelu_erf": transformer_gelu_erf,
    "transformer_silu": transformer_silu,
}
BIG_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet18": resnet18,
}
MODELS = {**SMALL_MODELS, **BIG_MODELS}


# ---------------------------------------------------------------------------------------
# Inputs and QDQ quantization
# ---------------------------------------------------------------------------------------

def input_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    inits = {i.name for i in model.graph.initializer}
    return {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
            for i in model.graph.input if i.name not in inits}


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal float32 inputs (the distribution the models were scaled for)."""
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in input_shapes(model).items()}


@dataclass(frozen=True)
class QdqConfig:
    activation_type: str   # onnxruntime.quantization.QuantType member name
    weight_type: str
    per_channel: bool


QDQ_CONFIGS: dict[str, QdqConfig] = {
    "a8w8": QdqConfig("QUInt8", "QUInt8", False),
    "a8w8s_pc": QdqConfig("QUInt8", "QInt8", True),
    "a16w8": QdqConfig("QUInt16", "QUInt8", False),
    "a16w8s_pc": QdqConfig("QUInt16", "QInt8", True),
}


def quantize(model: onnx.ModelProto, out_path: str | Path, config: QdqConfig,
             calib_samples: int = 8, seed: int = 1234, qnn_overrides: bool = True) -> Path:
    """Writes the QDQ version of ``model`` to ``out_path`` and returns that path.

    ``onnxruntime.quantization.quantize_static`` with QuantFormat.QDQ, MinMax calibration on
    ``calib_samples`` standard-normal inputs, asymmetric activations. With ``qnn_overrides``
    (default) the extra options (tensor overrides, op types) are those ORT's
    ``get_qnn_qdq_config`` computes for the QNN EP: per-tensor MatMul/LayerNorm weights when
    ``per_channel`` is set (QNN has no per-channel MatMul/LayerNorm weights; the vendor rejects
    them with error 3110), 8-bit weights next to 16-bit activations, the fixed 16-bit Sigmoid
    output encoding, com.microsoft Q/DQ for 16-bit types below opset 21; and LayerNorm scales
    unsigned when the weights are signed."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class RandomReader(CalibrationDataReader):
        def __init__(self):
            self._it = iter([random_feeds(model, seed + i) for i in range(calib_samples)])

        def get_next(self):
            return next(self._it, None)

    act, wt = QuantType[config.activation_type], QuantType[config.weight_type]
    kwargs = {"extra_options": {"ActivationSymmetric": False}}
    if qnn_overrides:
        from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config
        qnn = get_qnn_qdq_config(model, RandomReader(), activation_type=act, weight_type=wt,
                                 per_channel=config.per_channel)
        kwargs = {"extra_options": qnn.extra_options,
                  "op_types_to_quantize": qnn.op_types_to_quantize}
        if wt in (QuantType.QInt8, QuantType.QInt16):
            # HTP's quantized LayerNorm takes unsigned gamma only (the vendor answers 3110 to
            # SFIXED_POINT_8): keep LayerNorm scales unsigned next to signed conv weights.
            overrides = qnn.extra_options.setdefault("TensorQuantOverrides", {})
            unsigned = QuantType.QUInt8 if wt == QuantType.QInt8 else QuantType.QUInt16
            for n in model.graph.node:
                if n.op_type == "LayerNormalization":
                    overrides[n.input[1]] = [{"quant_type": unsigned, "symmetric": False}]
    out_path = Path(out_path)
    float_path = out_path.with_name(out_path.stem + ".float.onnx")
    onnx.save(model, float_path)
    quantize_static(str(float_path), str(out_path), RandomReader(), quant_format=QuantFormat.QDQ,
                    activation_type=act, weight_type=wt, per_channel=config.per_channel, **kwargs)
    return out_path


def output_scales(qdq_model: onnx.ModelProto) -> dict[str, float]:
    """For each graph output produced by a DequantizeLinear: its (per-tensor) scale, the size
    of one LSB of that output."""
    inits = {i.name: numpy_helper.to_array(i) for i in qdq_model.graph.initializer}
    producers = {o: n for n in qdq_model.graph.node for o in n.output}
    scales = {}
    for out in qdq_model.graph.output:
        n = producers.get(out.name)
        if n is not None and n.op_type == "DequantizeLinear" and n.input[1] in inits:
            scales[out.name] = float(np.max(inits[n.input[1]]))
    return scales
