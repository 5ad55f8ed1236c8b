"""ONNX Runtime EPContext models on qnnemu (issue 4 item 5).

With ``ep.context_enable=1`` the QNN EP compiles the model on our backend, takes the context
binary (contextGetBinarySize/contextGetBinary) and writes an EPContext model that embeds it
(``ep.context_embed_mode=1``) or points to a ``*_qnn.bin`` file next to it (mode 0). Loading that
model must not prepare anything again: the EP reads the binary's graphs through our
libQnnSystem.so (systemContextGetBinaryInfo), creates the context with contextCreateFromBinary
and gets each partition with graphRetrieve. Outputs must be bit-identical to the session that
made the binary.

The checks on "no contextCreate, one contextCreateFromBinary" spy on the Python core, which the
backend library calls in this same process (the library embeds this interpreter).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import qnnemu

ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
onnx = pytest.importorskip("onnx", reason="onnx (test extra) is not installed")

from onnx import TensorProto, helper  # noqa: E402
from vendor import vendor_library  # noqa: E402

import qnnemu.onnxruntime as qort  # noqa: E402
from qnnemu.core import (  # noqa: E402
    backend as core_backend,
    binary,
)

if not Path(qnnemu.backend_library_path()).exists():
    pytest.skip("libQnnHtpEmu.so is not built", allow_module_level=True)


def _model(path: Path, middle_op: str | None = None, seed: int = 0) -> Path:
    """x[1,8] -> MatMul -> (middle_op, run by the CPU EP: splits the model in two partitions)
    -> MatMul -> Relu -> y[1,4]."""
    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    w1 = helper.make_tensor("W1", TensorProto.FLOAT, [8, 8], rng.standard_normal(64).astype(np.float32))
    w2 = helper.make_tensor("W2", TensorProto.FLOAT, [8, 4], rng.standard_normal(32).astype(np.float32))
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["m1"])]
    mid = "m1"
    if middle_op:
        nodes.append(helper.make_node(middle_op, ["m1"], ["c"]))
        mid = "c"
    nodes += [helper.make_node("MatMul", [mid, "W2"], ["m2"]), helper.make_node("Relu", ["m2"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w1, w2]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _dump_options(ctx_path: Path, embed_mode: int, share: bool = False):
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_embed_mode", str(embed_mode))
    so.add_session_config_entry("ep.context_file_path", str(ctx_path))
    if share:
        so.add_session_config_entry("ep.share_ep_contexts", "1")
    return so


class _Spy:
    """Counts core calls made by the backend: contexts created from scratch vs from a binary."""

    def __init__(self, monkeypatch):
        self.created = 0
        self.loaded = 0
        create, deserialize = core_backend.Backend.create_context, binary.deserialize

        def counting_create(be, *a, **kw):
            self.created += 1
            return create(be, *a, **kw)

        def counting_deserialize(*a, **kw):
            self.loaded += 1
            return deserialize(*a, **kw)
        monkeypatch.setattr(core_backend.Backend, "create_context", counting_create)
        monkeypatch.setattr(binary, "deserialize", counting_deserialize)


def _ep_context_nodes(path: Path) -> list:
    return [n for n in onnx.load(str(path)).graph.node if n.op_type == "EPContext"]


def _attr(node, name):
    return next(helper.get_attribute_value(a) for a in node.attribute if a.name == name)


def _binary_bytes(ctx_model: Path, node) -> bytes:
    data = _attr(node, "ep_cache_context")
    if _attr(node, "embed_mode") == 1:
        return data
    return (ctx_model.parent / data.decode()).read_bytes()


@pytest.mark.parametrize("embed_mode", [0, 1])
@pytest.mark.parametrize("partitions", [1, 2])
def test_ep_context_model_reloads_with_identical_outputs(tmp_path, monkeypatch, embed_mode, partitions):
    src = _model(tmp_path / "m.onnx", "Softsign" if partitions == 2 else None)
    ctx_model = tmp_path / "m_ctx.onnx"
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    first = qort.session(src, session_options=_dump_options(ctx_model, embed_mode),
                         disable_cpu_fallback=partitions == 1)
    want = first.run(None, {"x": x})[0]
    del first

    nodes = _ep_context_nodes(ctx_model)
    assert len(nodes) == partitions, f"EPContext nodes in the dumped model: {len(nodes)}, expected {partitions}"
    mains = [n for n in nodes if _attr(n, "main_context") == 1]
    assert len(mains) == 1, "exactly one EPContext node carries the (shared) context binary"
    blob = _binary_bytes(ctx_model, mains[0])
    info = binary.inspect(blob)
    assert blob[:8] == binary.MAGIC, "the EPContext node holds a qnnemu context binary"
    assert len(info.graphs) == partitions, \
        f"all {partitions} partitions are graphs of one context: binary has {info.graph_names}"
    if embed_mode == 0:
        assert isinstance(_attr(mains[0], "ep_cache_context"), bytes) and \
            (tmp_path / _attr(mains[0], "ep_cache_context").decode()).is_file(), "mode 0 writes the .bin file"

    spy = _Spy(monkeypatch)
    second = qort.session(ctx_model, disable_cpu_fallback=partitions == 1)
    got = second.run(None, {"x": x})[0]
    assert spy.created == 0, f"loading an EPContext model prepared nothing (contextCreate calls: {spy.created})"
    assert spy.loaded == 1, f"one contextCreateFromBinary for the shared context (got {spy.loaded})"
    assert np.array_equal(got, want), \
        "outputs of the EPContext model equal the original session's bit for bit " \
        f"(max diff {np.max(np.abs(got - want))})"
    maps = Path("/proc/self/maps").read_text()
    assert os.path.join(qnnemu.library_dir(), "libQnnSystem.so") in maps, \
        "the EP read the binary through our libQnnSystem.so"


def test_share_ep_contexts_puts_two_models_in_one_context(tmp_path, monkeypatch):
    """ep.share_ep_contexts=1: the second session's graphs join the first session's context, and
    the last dumped model's binary holds both models' graphs; both models reload from it."""
    a, b = _model(tmp_path / "a.onnx", seed=1), _model(tmp_path / "b.onnx", seed=2)
    a_ctx, b_ctx = tmp_path / "a_ctx.onnx", tmp_path / "b_ctx.onnx"
    x = np.random.default_rng(3).standard_normal((1, 8)).astype(np.float32)
    sa = qort.session(a, session_options=_dump_options(a_ctx, 0, share=True))
    so_b = _dump_options(b_ctx, 0, share=True)
    so_b.add_session_config_entry("ep.stop_share_ep_contexts", "1")
    sb = qort.session(b, session_options=so_b)
    want = {"a": sa.run(None, {"x": x})[0], "b": sb.run(None, {"x": x})[0]}
    del sa, sb

    bins = sorted(p.name for p in tmp_path.glob("*.bin"))
    assert len(bins) == 1, f"one shared context binary is written: {bins}"
    info = binary.inspect((tmp_path / bins[0]).read_bytes())
    assert len(info.graphs) == 2, f"the shared binary holds both models' graphs: {info.graph_names}"

    spy = _Spy(monkeypatch)
    sessions = []  # alive together: the EP frees the shared context with the session that loaded it
    for name, path in (("a", a_ctx), ("b", b_ctx)):
        so = ort.SessionOptions()
        so.add_session_config_entry("ep.share_ep_contexts", "1")
        sessions.append(qort.session(path, session_options=so))
        got = sessions[-1].run(None, {"x": x})[0]
        assert np.array_equal(got, want[name]), f"model {name} from the shared EPContext binary: identical outputs"
    assert spy.created == 0, "reloading shared EPContext models prepared nothing"


def test_vendor_backend_ep_context_round_trip(tmp_path):
    """The same flow on the vendor's libQnnHtp.so (reference behaviour of the EP and backend)."""
    lib = vendor_library()
    if lib is None:
        pytest.skip("the vendor's libQnnHtp.so (onnxruntime-qnn) is not installed")
    src = _model(tmp_path / "m.onnx")
    ctx_model = tmp_path / "m_ctx.onnx"
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    opts = {"backend_path": str(lib)}
    want = qort.session(src, session_options=_dump_options(ctx_model, 1), provider_options=opts).run(None, {"x": x})[0]
    got = qort.session(ctx_model, provider_options=opts).run(None, {"x": x})[0]
    assert np.array_equal(got, want), "vendor: EPContext model outputs identical"
    assert _binary_bytes(ctx_model, _ep_context_nodes(ctx_model)[0])[:8] != binary.MAGIC, \
        "the vendor's binary is its own format, not qnnemu's"
