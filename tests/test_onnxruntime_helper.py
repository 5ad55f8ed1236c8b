"""qnnemu.onnxruntime: ONNX Runtime's QNN EP on libQnnHtpEmu.so in one call, including the HTP
shared-memory allocator (``enable_htp_shared_memory_allocator=1``: rpcmem from our
libcdsprpc.so, registered with memRegister, read and written in place by the backend).
Numbers are checked against ORT's CPU EP (1e-5).
"""
from __future__ import annotations

import ctypes
import gc
from pathlib import Path

import numpy as np
import pytest

import qnnemu
import qnnemu.onnxruntime as qort

ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
onnx = pytest.importorskip("onnx", reason="onnx (test extra) is not installed")

from onnx import TensorProto, helper  # noqa: E402

from qnnemu.core import mem  # noqa: E402
from qnnemu.core.handles import HANDLES  # noqa: E402
from qnnemu.headers import Q  # noqa: E402

if not Path(qnnemu.backend_library_path()).exists():
    pytest.skip("libQnnHtpEmu.so is not built", allow_module_level=True)

SHM = {"enable_htp_shared_memory_allocator": "1"}


def small_cnn() -> onnx.ModelProto:
    """y = Relu(Conv(x, W) + b) + z: two inputs, one output, all float32."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal(4).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Add", ["r", "z"], ["y"])]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
         helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("ort") / "small_cnn.onnx"
    onnx.save(small_cnn(), str(path))
    return str(path)


def feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
            "z": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}


def check_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    err = float(np.max(np.abs(got - want)))
    assert err <= 1e-5 * max(1.0, float(np.max(np.abs(want)))), f"{what}: max abs difference {err:.3g} vs CPU EP"


def cpu_reference(model_path: str, f: dict) -> np.ndarray:
    return ort.InferenceSession(model_path, providers=["CPUExecutionProvider"]).run(None, f)[0]


def test_provider_options():
    opts = qort.provider_options()
    assert opts["backend_path"] == qnnemu.backend_library_path() and Path(opts["backend_path"]).exists()
    assert opts["offload_graph_io_quantization"] == "0", "graph I/O (de)quantization stays on the backend"
    opts = qort.provider_options(enable_htp_shared_memory_allocator=True, htp_performance_mode="burst",
                                 backend_path=Path("/x/libQnnHtp.so"), vtcm_mb=8)
    assert opts["enable_htp_shared_memory_allocator"] == "1" and opts["htp_performance_mode"] == "burst"
    assert opts["backend_path"] == "/x/libQnnHtp.so" and opts["vtcm_mb"] == "8", "overrides win, as strings"
    with pytest.raises(TypeError):
        qort.provider_options(bad=[1])


def test_session_with_shared_memory_allocator_matches_cpu(model_path):
    sess = qort.session(model_path, provider_options=SHM)
    assert sess.get_providers()[0] == "QNNExecutionProvider", sess.get_providers()
    opts = sess.get_provider_options().get("QNNExecutionProvider", {})
    assert not opts or opts.get("backend_path") == qnnemu.backend_library_path(), opts
    for seed in (0, 1):
        f = feeds(seed)
        check_close(sess.run(None, f)[0], cpu_reference(model_path, f), f"sess.run seed {seed}")
    # The EP found our libcdsprpc.so by its bare name (the helper preloaded it).
    assert hasattr(ctypes.CDLL("libcdsprpc.so"), "qnnemu_rpcmem_live")


def test_run_shared_goes_through_mem_register(model_path, monkeypatch):
    """Inputs and outputs in rpcmem via IOBinding: the EP registers them (QNN_MEM_TYPE_CUSTOM,
    QNN_HTP_MEM_SHARED_BUFFER) and executes with MEMHANDLE tensors; no copies in the backend."""
    registered: list[mem.MemDesc] = []
    real = mem.register

    def counting(context, descs):
        registered.extend(descs)
        return real(context, descs)

    monkeypatch.setattr(mem, "register", counting)
    sess = qort.session(model_path, provider_options=SHM)
    for seed in (2, 3):
        f = feeds(seed)
        check_close(qort.run_shared(sess, f)[0], cpu_reference(model_path, f), f"run_shared seed {seed}")
    kinds = {(d.mem_type, d.custom_type) for d in registered}
    assert kinds == {(Q.QNN_MEM_TYPE_CUSTOM, Q.QNN_HTP_MEM_SHARED_BUFFER)}, kinds
    assert len(registered) >= 3, f"both inputs and the output were registered: {len(registered)}"
    del sess
    gc.collect()
    assert not HANDLES.live(mem.MemRegistration), "the EP deregistered everything when the session went"


def test_cpu_fallback_is_disabled_by_default(tmp_path):
    """A node the QNN EP cannot take fails the session instead of running on the CPU EP."""
    graph = helper.make_graph([helper.make_node("Unique", ["x"], ["y"])], "u",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(Exception, match=r"(?i)fallback|CPU|assigned|support"):
        qort.session(model)
    sess = qort.session(model.SerializeToString(), disable_cpu_fallback=False)
    got = sess.run(None, {"x": np.float32([3, 1, 3, 2, 1, 5])})[0]
    assert got.tolist() == [1, 2, 3, 5], "with the fallback allowed, the CPU EP runs it (sorted Unique)"


# ------------------------------------------------------------------------ ep_context_model
def _two_graph_binary() -> tuple[bytes, dict[str, np.ndarray]]:
    """A context with graphs "scale" (y1 = x * 2) and "shift" (y2 = x + c, uint8 codes in/out);
    returns the binary and each output for X_EP computed through the client."""
    from qnnemu.client import Backend
    u8 = Q.QNN_DATATYPE_UFIXED_POINT_8
    with Backend() as be:
        ctx = be.context()
        g1 = ctx.graph("scale")
        x = g1.input("x", (1, 4))
        g1.node("ElementWiseMultiply", [x, g1.static("two", np.full((1, 4), 2, np.float32))],
                [("y1", (1, 4), np.float32)], app_read=True)
        g2 = ctx.graph("shift")
        q = g2.input("q", (1, 4), u8, quant=(0.1, -128))
        g2.node("ElementWiseAdd", [q, g2.static("c", np.full((1, 4), 138, np.uint8), dtype=u8, quant=(0.1, -128))],
                [("y2", (1, 4), u8, (0.1, -128))], app_read=True)
        g1.finalize()
        g2.finalize()
        want = {"y1": g1.execute({"x": X_EP})["y1"], "y2": g2.execute({"q": Q_EP})["y2"]}
        return ctx.get_binary(), want


X_EP = np.float32([[1, -2, 3.5, 0]])
Q_EP = np.uint8([[128, 130, 100, 200]])


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("embed", [True, False])
def test_ep_context_model_wraps_every_graph_of_a_binary(tmp_path, embed):
    blob, want = _two_graph_binary()
    path = tmp_path / "two_ctx.onnx"
    model = qort.ep_context_model(blob, path=path, embed=embed)
    nodes = list(model.graph.node)
    assert [(n.name, n.op_type, n.domain) for n in nodes] == \
        [("scale", "EPContext", "com.microsoft"), ("shift", "EPContext", "com.microsoft")], \
        "one EPContext node per graph, named after it, in binary order"
    main, other = _attrs(nodes[0]), _attrs(nodes[1])
    assert main["main_context"] == 1 and other["main_context"] == 0 and "ep_cache_context" not in other, \
        "the first node holds the binary, the second shares it"
    assert main["partition_name"] == b"scale" and main["source"] == b"QNNExecutionProvider"
    if embed:
        assert main["embed_mode"] == 1 and main["ep_cache_context"] == blob, "the binary is embedded"
    else:
        assert main["embed_mode"] == 0 and main["ep_cache_context"] == b"two_ctx_qnn.bin", main["ep_cache_context"]
        assert (tmp_path / "two_ctx_qnn.bin").read_bytes() == blob, "the binary is written next to the model"
    assert path.is_file(), "the model is saved to path"
    sess = qort.session(path)
    assert [(i.name, i.type, i.shape) for i in sess.get_inputs()] == \
        [("x", "tensor(float)", [1, 4]), ("q", "tensor(uint8)", [1, 4])], "inputs from the System library's info"
    y1, y2 = sess.run(["y1", "y2"], {"x": X_EP, "q": Q_EP})
    assert np.array_equal(y1, want["y1"]) and np.array_equal(y2, want["y2"]), \
        "both graphs run through ORT exactly as through the client"


def test_ep_context_model_selects_graphs_and_checks_arguments(tmp_path):
    blob, want = _two_graph_binary()
    model = qort.ep_context_model(blob, "shift")
    assert [n.name for n in model.graph.node] == ["shift"], "a single graph by name"
    assert _attrs(model.graph.node[0])["main_context"] == 1, "the only node is the main context"
    y2 = qort.session(model).run(None, {"q": Q_EP})[0]
    assert np.array_equal(y2, want["y2"]), "the selected graph runs"
    with pytest.raises(ValueError, match=r"\['nope'\] are not in the binary"):
        qort.ep_context_model(blob, ["scale", "nope"])
    with pytest.raises(ValueError, match="repeat"):
        qort.ep_context_model(blob, ["scale", "scale"])
    with pytest.raises(ValueError, match="give path"):
        qort.ep_context_model(blob, embed=False)


def test_failed_run_raises_the_eps_error(tmp_path):
    """A run the EP fails (here: a LoRA config naming an unknown graph) raises the EP's error,
    not the Python session's CPU-EP retry error, and the session stays usable."""
    blob, want = _two_graph_binary()
    sess = qort.session(qort.ep_context_model(blob, "scale"))
    ro = qort.lora_run_options("nope", tmp_path / "none.bin", tmp_path / "c.lora_config")
    assert (tmp_path / "c.lora_config").read_text() == f"nope;{tmp_path / 'none.bin'}\n", \
        "the EP's one-line '<graph>;<section file>' config"
    (tmp_path / "none.bin").write_bytes(b"\0" * 64)
    with pytest.raises(Exception, match="Failed to retrieve graph: nope"):
        sess.run(None, {"x": X_EP}, ro)
    assert np.array_equal(sess.run(None, {"x": X_EP})[0], want["y1"]), "the session still runs"
