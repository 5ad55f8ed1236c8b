"""The public benchmark set of issue 13: real architectures with random (seeded) weights at fixed
shapes, exported to ONNX (opset 17, static shapes, batch 1) in float and as QDQ models made with
ONNX Runtime's QNN quantization tooling (``onnxruntime.quantization`` with the QNN execution
provider helpers ``qnn_preprocess_model`` / ``get_qnn_qdq_config`` / ``quantize``: the QDQ layout
ONNX Runtime's QNN EP, the vendor's HTP backend and qnnemu take).

    /tmp/bench-venv/bin/python benchmarks/model_set.py                 # every model, every variant
    /tmp/bench-venv/bin/python benchmarks/model_set.py --models resnet18,bert --variants float,u8
    /tmp/bench-venv/bin/python benchmarks/model_set.py --list

Needs torch, torchvision and transformers (benchmarks/requirements-models.txt, installed in a
venv of its own: see docs/benchmarks.md); the test suite never does. Output:
``<cache>/<model>.<variant>.onnx`` with ``<cache>`` = ``~/.cache/qnnemu/bench-models`` unless
``--cache DIR``; a file already there is kept (``--force`` rebuilds). Variants:

- ``float``: the float32 export;
- ``u8``: QDQ, uint8 activations, uint8 weights (per-tensor);
- ``u16``: QDQ, uint16 activations, uint8 weights (the a16w8 layout HTP runs; 16-bit weights
  are not what QNN's quantizer makes by default for Conv/MatMul on HTP).

Calibration: ``CALIBRATION_SAMPLES`` random inputs from a fixed seed (standard normal for float
inputs, uniform token ids for the BERT encoder), MinMax.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

DEFAULT_CACHE = Path(os.environ.get("QNNEMU_BENCH_CACHE", "~/.cache/qnnemu/bench-models")).expanduser()
VARIANTS = ("float", "u8", "u16")
OPSET = 17
SEED = 0
CALIBRATION_SAMPLES = 4

# name -> (builder returning (torch module, {input name: example tensor}), output names)
SPECS: dict[str, str] = {
    "resnet18": "torchvision ResNet-18, 1x3x224x224",
    "resnet50": "torchvision ResNet-50, 1x3x224x224",
    "mobilenet_v2": "torchvision MobileNetV2, 1x3x224x224",
    "mobilenet_v3_small": "torchvision MobileNetV3-small, 1x3x224x224",
    "efficientnet_b0": "torchvision EfficientNet-B0, 1x3x224x224",
    "squeezenet1_1": "torchvision SqueezeNet 1.1, 1x3x224x224",
    "shufflenet_v2": "torchvision ShuffleNetV2 x1.0, 1x3x224x224",
    "bert": "transformers BertModel encoder, 4 layers, hidden 256, 4 heads, ffn 1024, 1x128x256 embeddings in",
    "bert_tanh": "the same encoder with the tanh approximation of GELU (decomposed: Mul/Pow/Tanh), "
                 "whose float32 version HTP v68 can run (float32 Gelu has no v68 implementation)",
    "vit": "torchvision VisionTransformer, 1x3x96x96, patch 16, 4 layers, hidden 192, 3 heads",
    "lstm": "2-layer LSTM (hidden 128) + GRU (hidden 128) + linear, 1x32x64",
    "unet": "UNet-style segmenter, 3 levels (16/32/64 ch), 1x3x128x128 -> 1x2x128x128",
}

# Real third-party models with their trained weights, taken from the PyPI wheels that ship them
# (issue 13: "real third-party models (OCR detection, recognition, classification; voice
# activity)"); no torch needed.  name -> (pip requirement, member of the wheel, fixed input
# shapes, what it is).  Fetched into the cache, never committed.
THIRD_PARTY: dict[str, tuple[str, str, dict[str, list[int]], str]] = {
    "ppocr_det": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                  {"x": [1, 3, 640, 640]}, "PP-OCRv4 text detection (DBNet head; RapidOCR's export), 1x3x640x640"),
    "ppocr_rec": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                  {"x": [1, 3, 48, 320]}, "PP-OCRv4 text recognition (SVTR-LCNet, CTC), 1x3x48x320"),
    "ppocr_cls": ("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                  {"x": [1, 3, 48, 192]}, "PP-OCR mobile v2.0 text-direction classifier, 1x3x48x192"),
    "silero_vad": ("silero-vad==6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx", {},
                   "Silero VAD (16 kHz; 576-sample chunk and its 2x1x128 state; the package's static-shape export)"),
}
SPECS.update({name: spec[3] for name, spec in THIRD_PARTY.items()})


def _import_torchvision():
    """torchvision, also when its C++ ops cannot load: PyPI's Linux torchvision wheels link the
    CUDA build of torch, and beside the CPU build of torch (/opt/wheels, or PyTorch's CPU index)
    their ``_C.so`` does not load, so registering the ops' fake kernels at import fails with
    "operator torchvision::nms does not exist". The model definitions used here need none of
    those ops (nms, roi_align, deform_conv are detection ops), so the registrations are skipped."""
    import importlib
    import types
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
        for mod in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[mod]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        return importlib.import_module("torchvision")


def _torchvision(name: str, **kw):
    def build():
        import torch
        _import_torchvision()
        import torchvision.models as tvm
        model = getattr(tvm, name)(weights=None, **kw)
        return model, {"x": torch.randn(1, 3, 224, 224)}
    return build


def _bert(hidden_act: str = "gelu"):
    import torch
    _import_torchvision()  # transformers imports torchvision when it is installed
    from transformers import BertConfig, BertModel

    class Encoder(torch.nn.Module):
        """Token embeddings -> last hidden state (positions, token types, LayerNorm, 4 layers;
        no attention mask: every position attends). The word-embedding lookup stays outside,
        as on-device deployments do: a float32 Gather of rank 3 cannot be created by HTP v68,
        the EP's default device on x86 (the vendor's graphFinalize fails on the token-id model;
        qnnemu refuses it the same way)."""

        def __init__(self):
            super().__init__()
            cfg = BertConfig(vocab_size=1024, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                             intermediate_size=1024, max_position_embeddings=128, attn_implementation="eager",
                             hidden_act=hidden_act)
            self.bert = BertModel(cfg, add_pooling_layer=False)

        def forward(self, embeddings):
            return self.bert(inputs_embeds=embeddings).last_hidden_state

    return Encoder(), {"embeddings": torch.randn(1, 128, 256)}


def _vit():
    import torch
    _import_torchvision()
    from torchvision.models.vision_transformer import VisionTransformer
    model = VisionTransformer(image_size=96, patch_size=16, num_layers=4, num_heads=3, hidden_dim=192,
                              mlp_dim=768, num_classes=100)
    return model, {"x": torch.randn(1, 3, 96, 96)}


def _lstm():
    import torch

    class Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(64, 128, num_layers=2, batch_first=True)
            self.gru = torch.nn.GRU(128, 128, batch_first=True)
            self.head = torch.nn.Linear(128, 10)

        def forward(self, x):
            h, _ = self.lstm(x)
            h, _ = self.gru(h)
            return self.head(h)

    return Seq(), {"x": torch.randn(1, 32, 64)}


def _unet():
    import torch
    from torch import nn

    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.d1, self.d2, self.mid = block(3, 16), block(16, 32), block(32, 64)
            self.pool = nn.MaxPool2d(2)
            self.u2, self.c2 = nn.ConvTranspose2d(64, 32, 2, stride=2), block(64, 32)
            self.u1, self.c1 = nn.ConvTranspose2d(32, 16, 2, stride=2), block(32, 16)
            self.out = nn.Conv2d(16, 2, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(self.pool(a))
            m = self.mid(self.pool(b))
            y = self.c2(torch.cat([self.u2(m), b], 1))
            y = self.c1(torch.cat([self.u1(y), a], 1))
            return self.out(y)

    return UNet(), {"x": torch.randn(1, 3, 128, 128)}


BUILDERS: dict[str, Callable] = {
    "resnet18": _torchvision("resnet18"),
    "resnet50": _torchvision("resnet50"),
    "mobilenet_v2": _torchvision("mobilenet_v2"),
    "mobilenet_v3_small": _torchvision("mobilenet_v3_small"),
    "efficientnet_b0": _torchvision("efficientnet_b0"),
    "squeezenet1_1": _torchvision("squeezenet1_1"),
    "shufflenet_v2": _torchvision("shufflenet_v2_x1_0"),
    "bert": _bert,
    "bert_tanh": lambda: _bert("gelu_pytorch_tanh"),
    "vit": _vit,
    "lstm": _lstm,
    "unet": _unet,
}


def model_path(cache: Path, name: str, variant: str) -> Path:
    return Path(cache) / f"{name}.{variant}.onnx"


def fetch_third_party(name: str, path: Path) -> None:
    """The model ``name`` of THIRD_PARTY out of its wheel (``pip download --no-deps``), its
    inputs fixed to the listed shapes (and the shapes inferred again), saved as ``path``."""
    import subprocess
    import zipfile

    import onnx
    requirement, member, shapes, _ = THIRD_PARTY[name]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "-q", "-d", tmp, requirement], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as z:
            m = onnx.load_from_string(z.read(member))
    for inp in m.graph.input:
        for d, v in zip(inp.type.tensor_type.shape.dim, shapes.get(inp.name, []), strict=False):
            d.Clear()
            d.dim_value = v
    # (the recognizer's character list; ONNX Runtime's qnn_preprocess_model fails on metadata)
    del m.metadata_props[:]
    for out in m.graph.output:  # inferred again from the fixed inputs
        for d in out.type.tensor_type.shape.dim:
            d.Clear()
    onnx.save(onnx.shape_inference.infer_shapes(m), str(path))
    # With the shapes fixed, the shape arithmetic (Shape -> Gather -> Concat feeding Resize and
    # Reshape) folds to constants: ONNX Runtime's basic optimizations, as onnxsim would (the
    # QDQ quantizer otherwise breaks the detector's shape subgraphs).
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(path)
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def export_float(name: str, path: Path) -> None:
    """torch.onnx.export of the model in eval mode with seeded random weights, static shapes
    (a THIRD_PARTY model: fetched with its own weights)."""
    if name in THIRD_PARTY:
        fetch_third_party(name, path)
        return
    import torch
    torch.manual_seed(SEED)
    model, example = BUILDERS[name]()
    model.eval()
    tmp = path.with_suffix(".tmp.onnx")
    with torch.no_grad():
        torch.onnx.export(model, tuple(example.values()), str(tmp), input_names=list(example),
                          output_names=["y"], opset_version=OPSET, dynamo=False, do_constant_folding=True)
    import onnx
    m = onnx.load(str(tmp))  # one self-contained file (no external data next to it)
    _own_initializers(m)
    onnx.save(m, str(path))
    tmp.unlink()


def _own_initializers(m) -> None:
    """Replaces ``Identity(initializer)`` nodes by a copy of the initializer under the Identity's
    output name. The TorchScript exporter deduplicates equal constants (the all-zero biases of
    the BatchNorm-folded convolutions of a randomly initialised network) and feeds the copies
    through Identity nodes; the QDQ quantizer then sees a bias that is not an initializer and
    leaves it unquantized, which no trained model shows."""
    import onnx
    inits = {t.name: t for t in m.graph.initializer}
    outputs = {o.name for o in m.graph.output}
    keep = []
    for node in m.graph.node:
        if node.op_type == "Identity" and node.input[0] in inits and node.output[0] not in outputs:
            copy = onnx.TensorProto()
            copy.CopyFrom(inits[node.input[0]])
            copy.name = node.output[0]
            m.graph.initializer.append(copy)
        else:
            keep.append(node)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    used = {i for n in m.graph.node for i in n.input}
    unused = [t for t in m.graph.initializer if t.name not in used]
    for t in unused:
        m.graph.initializer.remove(t)


def random_feeds(model_file: Path, seed: int = SEED) -> dict[str, np.ndarray]:
    """One input set for ``model_file``: token ids (int64 inputs) uniform in [0, 1024), floats
    standard normal. Used for calibration and by the benchmark."""
    import onnx
    from onnx import TensorProto
    rng = np.random.default_rng(seed)
    m = onnx.load(str(model_file), load_external_data=False)
    init = {i.name for i in m.graph.initializer}
    feeds = {}
    for inp in m.graph.input:
        if inp.name in init:
            continue
        t = inp.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type == TensorProto.INT64:
            feeds[inp.name] = rng.integers(0, 1024, size=shape, dtype=np.int64)
        elif t.elem_type == TensorProto.INT32:
            feeds[inp.name] = rng.integers(0, 1024, size=shape, dtype=np.int32)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


class _RandomReader:
    """A CalibrationDataReader of CALIBRATION_SAMPLES seeded random input sets."""

    def __init__(self, model_file: Path):
        self._sets = iter([random_feeds(model_file, SEED + k) for k in range(CALIBRATION_SAMPLES)])

    def get_next(self):
        return next(self._sets, None)


def quantize_qdq(float_path: Path, path: Path, variant: str) -> None:
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import (
        get_qnn_qdq_config,
        qnn_preprocess_model,
    )
    activation = {"u8": QuantType.QUInt8, "u16": QuantType.QUInt16}[variant]
    with tempfile.TemporaryDirectory() as tmp:
        pre = Path(tmp) / "pre.onnx"
        src = pre if qnn_preprocess_model(str(float_path), str(pre)) else float_path
        config = get_qnn_qdq_config(str(src), _RandomReader(src), activation_type=activation,
                                    weight_type=QuantType.QUInt8)
        quantize(str(src), str(path), config)


def build(cache: Path, name: str, variant: str, force: bool = False) -> tuple[Path, str]:
    """Builds ``name`` / ``variant`` into ``cache`` (the float export first if a QDQ variant
    needs it); returns the path and what was done ("kept" or "built in N s")."""
    path = model_path(cache, name, variant)
    if path.exists() and not force:
        return path, "kept"
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    float_path = model_path(cache, name, "float")
    if variant == "float" or not float_path.exists():
        export_float(name, float_path)
    if variant != "float":
        quantize_qdq(float_path, path, variant)
    return path, f"built in {time.perf_counter() - t0:.1f} s"


def parse_list(value: str, known, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()] if value != "all" else list(known)
    unknown = [v for v in items if v not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return items


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="all", help="comma-separated names (default: all)")
    ap.add_argument("--variants", default="all", help="float,u8,u16 (default: all)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--force", action="store_true", help="rebuild files already in the cache")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    args = ap.parse_args(argv)
    if args.list:
        for name, what in SPECS.items():
            print(f"{name:20} {what}")
        return 0
    failed = 0
    for name in parse_list(args.models, SPECS, "model"):
        for variant in parse_list(args.variants, VARIANTS, "variant"):
            try:
                path, what = build(args.cache, name, variant, args.force)
                print(f"{name}.{variant}: {path} ({what})", flush=True)
            except Exception as e:  # noqa: BLE001 - one model's failure does not stop the set
                failed += 1
                print(f"{name}.{variant}: FAILED: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
