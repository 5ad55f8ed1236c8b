"""LoRA adapters through ONNX Runtime's QNN EP on qnnemu (issue 4 item 3): binary sections of
UPDATABLE tensors applied with contextApplyBinarySection(..., QNN_CONTEXT_SECTION_UPDATABLE, ...).

What this ONNX Runtime build does (onnxruntime 1.31 + the onnxruntime-qnn EP plugin): the run
config entry ``qnn.lora_config`` (a run option, not a session or provider option) names a text
file whose first line is ``<graph name>;<adapter file>``. On every run that carries the entry,
the EP's OnRunStart reads the adapter file, finds the graph with graphRetrieve in its contexts
and calls contextApplyBinarySection(context, graph, QNN_CONTEXT_SECTION_UPDATABLE, &buffer,
profile, NULL); a failing apply (or an unknown graph) fails the run, a config file that cannot
be opened is only logged. The applied values stay in the context: later runs without the entry
keep them, until another section is applied.

The flow tested: a context binary whose graph ``lora`` computes y = x @ W + b with W and b
UPDATEABLE_STATIC (built with qnnemu.client), the UPDATABLE sections of three weight sets (base,
adapter A, adapter B) made with contextGetBinarySection after tensorUpdateGraphTensors, an
EPContext model wrapping the binary (qnnemu.onnxruntime.ep_context_model), then an ORT session
switching adapters by run option. Outputs are bit-identical to the direct-API runs of the same
weights and match numpy; a spy on the Python core (the backend library runs this interpreter)
checks that each run with the entry applies exactly one UPDATABLE section to graph ``lora``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import qnnemu

ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
onnx = pytest.importorskip("onnx", reason="onnx (test extra) is not installed")

import qnnemu.onnxruntime as qort  # noqa: E402
from qnnemu.client import Backend  # noqa: E402
from qnnemu.core import sections  # noqa: E402
from qnnemu.headers import Q  # noqa: E402

if not Path(qnnemu.backend_library_path()).exists():
    pytest.skip("libQnnHtpEmu.so is not built", allow_module_level=True)

GRAPH = "lora"
RNG = np.random.default_rng(2024)
X = RNG.standard_normal((2, 4)).astype(np.float32)
WEIGHTS = {name: (RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32))
           for name in ("base", "A", "B")}


@dataclass
class Adapters:
    binary: bytes                   # the context binary (base weights)
    sections: dict[str, Path]       # weight set -> its UPDATABLE section file
    direct: dict[str, np.ndarray]   # weight set -> y of the direct-API graph


def _build_lora_graph(ctx, w: np.ndarray, b: np.ndarray):
    g = ctx.graph(GRAPH)
    x = g.input("x", X.shape)
    weight = g.static("W", w, updatable=True)
    bias = g.static("b", b, updatable=True)
    h = g.node("MatMul", [x, weight], [("h", (2, 3), np.float32)])
    g.node("ElementWiseAdd", [h, bias], [("y", (2, 3), np.float32)], app_read=True)
    g.finalize()
    return g


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> Adapters:
    out = tmp_path_factory.mktemp("lora")
    files, direct = {}, {}
    with Backend() as be:
        ctx = be.context()
        g = _build_lora_graph(ctx, *WEIGHTS["base"])
        binary = ctx.get_binary()
        for name, (w, b) in WEIGHTS.items():
            if name != "base":
                g.update_tensors({"W": w, "b": b})
            files[name] = out / f"{GRAPH}_{name}.section.bin"
            files[name].write_bytes(ctx.binary_section(g))
            direct[name] = g.execute({"x": X})["y"]
    for name, (w, b) in WEIGHTS.items():
        np.testing.assert_allclose(direct[name], X @ w + b, rtol=1e-5, atol=1e-5,
                                   err_msg=f"direct API, weights {name}: y = x @ W + b")
    assert len({f.read_bytes() for f in files.values()}) == 3, "the three sections differ"
    return Adapters(binary, files, direct)


class _ApplySpy:
    """Records the core's section applies made by the backend (graph name, section type, tensors)."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple[str | None, int, int]] = []
        real = sections.apply_section

        def spy(context, graph, sec, func):
            count = real(context, graph, sec, func)
            self.calls.append((None if graph is None else graph.name, sec.section, count))
            return count
        monkeypatch.setattr(sections, "apply_section", spy)


def _run(sess, run_options=None) -> np.ndarray:
    return sess.run(None, {"x": X}, run_options)[0]


def _lora(tmp_path: Path, section: Path, graph: str = GRAPH):
    return qort.lora_run_options(graph, section, tmp_path / f"{section.stem}.lora_config")


def _assert_weights(y: np.ndarray, adapters: Adapters, name: str, what: str) -> None:
    assert np.array_equal(y, adapters.direct[name]), \
        f"{what}: ORT output equals the direct-API run with weights {name} bit for bit " \
        f"(max diff {np.max(np.abs(y - adapters.direct[name]))})"
    w, b = WEIGHTS[name]
    np.testing.assert_allclose(y, X @ w + b, rtol=1e-5, atol=1e-5, err_msg=f"{what}: numpy x @ W + b ({name})")


@pytest.mark.parametrize("embed", [True, False])
def test_lora_adapters_switch_by_run_option(adapters, tmp_path, monkeypatch, embed):
    model = qort.ep_context_model(adapters.binary, GRAPH, tmp_path / "lora_ctx.onnx", embed=embed)
    assert [n.op_type for n in model.graph.node] == ["EPContext"], "one EPContext node"
    sess = qort.session(tmp_path / "lora_ctx.onnx")
    spy = _ApplySpy(monkeypatch)

    _assert_weights(_run(sess), adapters, "base", "no qnn.lora_config")
    assert spy.calls == [], "a run without the entry applies nothing"
    _assert_weights(_run(sess, _lora(tmp_path, adapters.sections["A"])), adapters, "A", "adapter A")
    _assert_weights(_run(sess), adapters, "A", "a later run without the entry keeps adapter A")
    _assert_weights(_run(sess, _lora(tmp_path, adapters.sections["B"])), adapters, "B", "adapter B")
    _assert_weights(_run(sess, _lora(tmp_path, adapters.sections["base"])), adapters, "base",
                    "the base section restores the base weights")
    assert spy.calls == [(GRAPH, Q.QNN_CONTEXT_SECTION_UPDATABLE, 2)] * 3, \
        f"each run with the entry applies one UPDATABLE section (W, b) to graph '{GRAPH}': {spy.calls}"


def test_sessions_keep_their_own_adapter(adapters, tmp_path):
    """Each session loads the binary into its own context: an adapter applied in one session
    does not reach another."""
    path = tmp_path / "lora_ctx.onnx"
    qort.ep_context_model(adapters.binary, GRAPH, path)
    first, second = qort.session(path), qort.session(path)
    _assert_weights(_run(first, _lora(tmp_path, adapters.sections["A"])), adapters, "A", "session 1, adapter A")
    _assert_weights(_run(second), adapters, "base", "session 2 still has the base weights")
    _assert_weights(_run(second, _lora(tmp_path, adapters.sections["B"])), adapters, "B", "session 2, adapter B")
    _assert_weights(_run(first), adapters, "A", "session 1 keeps adapter A")


def test_bad_adapter_fails_the_run_and_keeps_the_weights(adapters, tmp_path):
    path = tmp_path / "lora_ctx.onnx"
    qort.ep_context_model(adapters.binary, GRAPH, path)
    sess = qort.session(path)
    _assert_weights(_run(sess, _lora(tmp_path, adapters.sections["A"])), adapters, "A", "adapter A")

    corrupted = bytearray(adapters.sections["B"].read_bytes())
    corrupted[-1] ^= 0x40   # in W/b data: the CRC-32 no longer matches
    bad = tmp_path / "corrupted.section.bin"
    bad.write_bytes(bytes(corrupted))
    with pytest.raises(Exception, match="Failed to apply binary section"):
        _run(sess, _lora(tmp_path, bad))
    _assert_weights(_run(sess), adapters, "A", "a refused section leaves adapter A in place")

    with pytest.raises(Exception, match="Failed to retrieve graph: nope"):
        _run(sess, _lora(tmp_path, adapters.sections["B"], graph="nope"))
    _assert_weights(_run(sess), adapters, "A", "an unknown graph name changes nothing")


def test_unreadable_lora_config_is_only_logged_by_the_ep(adapters, tmp_path):
    """ORT's ParseLoraConfig logs "Unable to load Lora Config" and returns OK when the config
    file cannot be opened: the run goes on with the current weights."""
    path = tmp_path / "lora_ctx.onnx"
    qort.ep_context_model(adapters.binary, GRAPH, path)
    sess = qort.session(path)
    ro = ort.RunOptions()
    ro.add_run_config_entry(qort.LORA_CONFIG_RUN_OPTION, str(tmp_path / "missing.lora_config"))
    _assert_weights(_run(sess, ro), adapters, "base", "missing config file: base weights, run succeeds")


def test_quantized_adapter_updates_weights_and_their_quantization(tmp_path):
    """uint8 graph I/O and uint8 UPDATEABLE_STATIC weights: the section carries the new codes and
    the new scale/offset; ORT exchanges the uint8 codes as they are."""
    u8 = Q.QNN_DATATYPE_UFIXED_POINT_8
    rng = np.random.default_rng(7)
    xq = rng.integers(0, 256, (2, 4), dtype=np.uint8)
    codes = {"base": rng.integers(0, 256, (4, 3), dtype=np.uint8), "A": rng.integers(0, 256, (4, 3), dtype=np.uint8)}
    quant = {"base": (0.02, -128), "A": (0.03, -120)}
    direct, section = {}, tmp_path / "qlora_A.section.bin"
    with Backend() as be:
        ctx = be.context()
        g = ctx.graph("qlora")
        x = g.input("x", (2, 4), u8, quant=(0.05, -128))
        w = g.static("W", codes["base"], dtype=u8, quant=quant["base"], updatable=True)
        g.node("MatMul", [x, w], [("y", (2, 3), u8, (0.1, -128))], app_read=True)
        g.finalize()
        binary = ctx.get_binary()
        direct["base"] = g.execute({"x": xq})["y"]
        g.update_tensors({"W": codes["A"]}, quant={"W": quant["A"]})
        section.write_bytes(ctx.binary_section(g))
        direct["A"] = g.execute({"x": xq})["y"]
    for name in direct:   # real = scale * (code + offset); y requantized to scale 0.1, offset -128
        s, o = quant[name]
        real = (0.05 * (xq.astype(np.float64) - 128)) @ (s * (codes[name].astype(np.float64) + o))
        want = np.clip(np.round(real / 0.1) + 128, 0, 255)
        assert np.max(np.abs(direct[name].astype(np.int32) - want)) <= 1, f"direct API, {name}: quantized x @ W"
    assert not np.array_equal(direct["base"], direct["A"]), "the adapter changes the output"

    path = tmp_path / "qlora_ctx.onnx"
    qort.ep_context_model(binary, None, path)
    sess = qort.session(path)
    assert sess.get_inputs()[0].type == "tensor(uint8)", "a UFIXED_POINT_8 graph input is a uint8 model input"
    assert np.array_equal(sess.run(None, {"x": xq})[0], direct["base"]), "ORT, base weights: as the direct API"
    ro = qort.lora_run_options("qlora", section, tmp_path / "q.lora_config")
    assert np.array_equal(sess.run(None, {"x": xq}, ro)[0], direct["A"]), \
        "ORT, adapter A (codes and quantization): as the direct API"
