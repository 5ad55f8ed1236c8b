"""LoRA weight sharing (QNN HTP backend documentation, "QNN HTP Context Config Options",
QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED; qnnemu/core/binary/lora.py,
qnnemu/htp/lora.py, docs/lora.md) through the C ABI (qnnemu.client and tests/abi.py):

* the binary stores the updatable weights of all graphs once, as a shared blob sized by the
  largest graph's updatable set (header/metadata, qnnemu-context-binary-utility);
* after contextCreateFromBinary every graph needs a contextApplyBinarySection before it
  executes (QNNEMU-graphExecute-lora-not-applied; the vendor's x86 library blocks the same way);
  apply adapter A -> A's outputs, B -> B's; a graph whose weights are not resident (another graph's
  section applied since, or graph switching loads it again) gets its cached section re-applied;
* an older binary loaded with the config does not share (QNNEMU-binary-lora-not-shared);
* the vendor's answers to the same calls are pinned (``test_vendor_answers``).
"""
from __future__ import annotations

import json
import logging
import subprocess
import sys

import abi
import numpy as np
import pytest
from abi import NULL, vp
from helpers.context_env import OK, Env
from vendor import our_library, vendor_env, vendor_library

from qnnemu.abi import fast_execute
from qnnemu.client import Backend, QnnCallError, htp_context_config
from qnnemu.client.cabi import ffi as client_ffi
from qnnemu.core import binary
from qnnemu.core.binary import lora
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import lora as htp_lora
from qnnemu.htp.device_model import DeviceModel
from qnnemu.system_client import SystemLibrary
from qnnemu.tools import context_binary_generator as generator, context_binary_utility as utility

pytestmark = pytest.mark.skipif(our_library() is None, reason="libQnnHtpEmu.so not built")

RULE = "QNNEMU-graphExecute-lora-not-applied"
WARN_RULE = "QNNEMU-binary-lora-not-shared"
SIZES = {"small": 16, "large": 64}          # W is k x k float32: 1 KiB and 16 KiB
RNG = np.random.default_rng(1616)
W_A = {n: RNG.standard_normal((k, k)).astype(np.float32) for n, k in SIZES.items()}
W_B = {n: RNG.standard_normal((k, k)).astype(np.float32) for n, k in SIZES.items()}
REAPPLIED = "re-applied the cached binary section of graph"


def lora_config(on: bool = True):
    return htp_context_config("LORA_WEIGHT_SHARING_ENABLED", loraWeightSharingEnabled=on)


def build(be: Backend, configs=(), plain_graph: bool = False):
    """A context with graphs small/large: y = x @ W (W UPDATEABLE_STATIC, adapter A's values);
    ``plain_graph`` adds graph 'plain' with a STATIC weight only."""
    ctx = be.context(list(configs))
    graphs = {}
    for name, k in SIZES.items():
        g = ctx.graph(name)
        x = g.input("x", (1, k))
        g.node("MatMul", [x, g.static("w", W_A[name], updatable=True)], [("y", (1, k), np.float32)], app_read=True)
        g.finalize()
        graphs[name] = g
    if plain_graph:
        g = ctx.graph("plain")
        x = g.input("x", (1, 4))
        g.node("MatMul", [x, g.static("w", np.eye(4, dtype=np.float32))], [("y", (1, 4), np.float32)], app_read=True)
        g.finalize()
        graphs["plain"] = g
    return ctx, graphs


def adapters(ctx, graphs) -> dict[str, dict[str, bytes]]:
    """Sections of adapters A and B for each LoRA graph (B made by tensorUpdateGraphTensors)."""
    out: dict[str, dict[str, bytes]] = {"A": {}, "B": {}}
    for name in SIZES:
        out["A"][name] = ctx.binary_section(graphs[name])
        graphs[name].update_tensors({"w": W_B[name]})
        out["B"][name] = ctx.binary_section(graphs[name])
        graphs[name].update_tensors({"w": W_A[name]})
    return out


@pytest.fixture(scope="module")
def made():
    """(LoRA binary, the same context's binary without the config, the adapters' sections)."""
    with Backend(log_level=None) as be:
        ctx, graphs = build(be, [lora_config()])
        sections = adapters(ctx, graphs)
        blob = ctx.get_binary()
        plain_ctx, _ = build(be)
        plain = plain_ctx.get_binary()
    return blob, plain, sections


def which(name: str, y: np.ndarray, x: np.ndarray) -> str:
    for label, w in (("A", W_A[name]), ("B", W_B[name])):
        if np.allclose(y, x @ w, rtol=1e-4, atol=1e-4):
            return label
    return "neither"


class Loaded:
    """A context loaded from ``blob`` with qnnemu.client; ``run(name)`` says which adapter's
    weights graph ``name`` computed with."""

    def __init__(self, be: Backend, blob: bytes, configs=()):
        self.ctx = be.context_from_binary(blob, list(configs))
        info = SystemLibrary().binary_info(blob)
        self.graphs = {g["name"]: self.ctx.retrieve_graph(g["name"], g["inputs"], g["outputs"])
                       for g in info["graphs"]}

    def run(self, name: str) -> str:
        x = np.linspace(-1, 1, SIZES[name], dtype=np.float32).reshape(1, -1)
        return which(name, self.graphs[name].execute({"x": x})["y"], x)

    def apply(self, section: bytes, name: str | None, kind: str = "updatable") -> None:
        self.ctx.apply_binary_section(section, self.graphs[name] if name else None, kind)


def refused(fn) -> QnnCallError:
    with pytest.raises(QnnCallError) as info:
        fn()
    return info.value


# ====================================================================== the binary
def test_shared_blob_sized_by_the_largest_graph(made, tmp_path, capsys):
    blob, plain, _ = made
    shared, separate = binary.inspect(blob), binary.inspect(plain)
    small = SIZES["small"] ** 2 * 4
    assert separate.header.data_size - shared.header.data_size == small, \
        f"the data section drops the smaller graph's updatable weights ({small} bytes): " \
        f"{separate.header.data_size} -> {shared.header.data_size}"
    record = lora.describe(blob)
    assert record is not None and lora.describe(plain) is None, "only the LoRA binary carries the shared-blob record"
    assert record["sharedBlobSize"] == SIZES["large"] ** 2 * 4 and record["sourceGraph"] == "large", \
        f"one shared blob sized by the largest updatable set (large, 16 KiB): {record}"
    assert record["graphUpdatableBytes"] == {"small": small, "large": SIZES["large"] ** 2 * 4}, \
        f"each graph's updatable bytes are recorded: {record}"
    start = record["sharedBlobOffset"] - shared.header.data_offset
    for g in shared.graphs:
        (w,) = [t for t in g.tensors if t.name == "w"]
        assert shared.blobs[w.blob].offset == start, f"graph {g.name}'s W starts the shared blob (stored once)"
    # qnnemu-context-binary-utility shows it
    path, out = tmp_path / "lora.bin", tmp_path / "lora.json"
    path.write_bytes(blob)
    assert utility.main(["--context_binary", str(path), "--json_file", str(out)]) == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report.get("loraWeightSharing") == record, f"the utility reports the shared blob: {report.keys()}"


# ====================================================================== apply, execute
def test_apply_before_execute_then_adapters_switch(made, caplog):
    blob, _, sections = made
    caplog.set_level(logging.INFO, logger="qnnemu.client")
    with Backend(log_level="info") as be:
        loaded = Loaded(be, blob)
        for name in SIZES:
            err = refused(lambda name=name: loaded.run(name))
            assert err.code == Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT and RULE in str(err), \
                f"graph {name} executed before any section was applied: refused with {RULE}: {err}"
        loaded.apply(sections["A"]["small"], "small")
        assert loaded.run("small") == "A", "section A applied to small: small computes adapter A"
        assert refused(lambda: loaded.run("large")).code == Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, \
            "a section applied to small does not unblock large"
        loaded.apply(sections["B"]["large"], "large")
        assert loaded.run("large") == "B", "section B applied to large: large computes adapter B"
        caplog.clear()
        assert loaded.run("small") == "A", "small still computes its own last adapter (A) after large's apply"
        assert loaded.run("small") == "A", "and again"
        reapplied = [r.getMessage() for r in caplog.records if REAPPLIED in r.getMessage()]
        assert len(reapplied) == 1 and "'small'" in reapplied[0] and "held graph 'large'" in reapplied[0], \
            f"small's cached section is re-applied once (the shared memory held large's weights): {reapplied}"
        took = htp_lora.reapply_us(SIZES["small"] ** 2 * 4, DeviceModel().arch)
        assert took > 0 and f"{took:.2f} us modelled" in reapplied[0], \
            f"the re-apply's DMA copy of small's 1 KiB is modelled ({took:.2f} us): {reapplied[0]}"
        loaded.apply(sections["B"]["small"], "small")
        assert loaded.run("small") == "B", "section B applied to small: adapter B"
        assert loaded.run("large") == "B", "large's cached section (B) is restored"
        # Alternating executes: each restores its graph's section, also once the C fast path
        # (which skips the Python entry) has registered a graph.
        core = HANDLES.lookup(int(client_ffi.cast("uintptr_t", loaded.ctx.handle)))
        before = core.lora.reapplies
        runs = [(n, loaded.run(n)) for n in ("small", "small", "large", "large", "small", "large")]
        assert runs == [("small", "B"), ("small", "B"), ("large", "B"), ("large", "B"), ("small", "B"),
                        ("large", "B")], f"every execute computes its graph's last adapter: {runs}"
        assert core.lora.reapplies - before == 4, \
            f"one re-apply per change of graph (4), none for a repeated graph: {core.lora.reapplies - before}"
        assert fast_execute.registered() <= 1, "at most the resident graph is on the C fast path"


def test_tensor_update_does_not_unblock():
    """As on the vendor (test_vendor_answers): only contextApplyBinarySection fills the LoRA memory."""
    with Backend(log_level=None) as be:
        _, graphs = build(be, [lora_config()])
        graphs["small"].update_tensors({"w": W_B["small"]})
        x = np.ones((1, SIZES["small"]), np.float32)
        assert refused(lambda: graphs["small"].execute({"x": x})).code == Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, \
            "tensorUpdateGraphTensors does not unblock a LoRA-sharing graph"


def test_whole_context_section_unblocks_every_graph(made, caplog):
    blob, _, sections = made
    caplog.set_level(logging.INFO, logger="qnnemu.client")
    with Backend(log_level="info") as be:
        with Backend(log_level=None) as maker:
            ctx, graphs = build(maker, [lora_config()])
            for name in SIZES:
                graphs[name].update_tensors({"w": W_B[name]})
            whole = ctx.binary_section(None)
        loaded = Loaded(be, blob)
        loaded.apply(whole, None)
        caplog.clear()
        assert {n: loaded.run(n) for n in SIZES} == {"small": "B", "large": "B"}, \
            "a whole-context section (graph NULL) unblocks every graph with its adapter"
        reapplied = [r.getMessage() for r in caplog.records if REAPPLIED in r.getMessage()]
        assert len(reapplied) == 2 and f"'small' ({SIZES['small'] ** 2 * 4} bytes" in reapplied[0] \
            and f"'large' ({SIZES['large'] ** 2 * 4} bytes" in reapplied[1], \
            f"each graph restores its own part of the whole-context section: {reapplied}"


def test_quant_params_section_fills_no_lora_memory(made):
    blob, _, sections = made
    with Backend(log_level=None) as be:
        loaded = Loaded(be, blob)
        quant_only = loaded.ctx.binary_section(loaded.graphs["small"], "quant_params")
        loaded.apply(quant_only, "small", "quant_params")
        assert refused(lambda: loaded.run("small")).code == Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, \
            "a QUANT_PARAMS section carries no weights: the graph stays blocked"
        loaded.apply(sections["A"]["small"], "small")
        assert loaded.run("small") == "A", "an UPDATABLE section then unblocks it"


def test_online_context_is_blocked_as_on_the_vendor():
    """contextCreate with the config: every graph (with updatable weights or not) waits for a
    section, as the vendor's library does (test_vendor_answers)."""
    with Backend(log_level=None) as be:
        ctx, graphs = build(be, [lora_config()], plain_graph=True)
        x = np.ones((1, 4), np.float32)
        assert refused(lambda: graphs["plain"].execute({"x": x})).code == Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, \
            "a graph without updatable weights is blocked too"
        ctx.apply_binary_section(ctx.binary_section(graphs["plain"]), graphs["plain"])
        np.testing.assert_allclose(graphs["plain"].execute({"x": x})["y"], x,
                                   err_msg="unblocked by its (empty) section")
        _, off = build(be, [lora_config(False)])
        xs = np.ones((1, SIZES["small"]), np.float32)
        np.testing.assert_allclose(off["small"].execute({"x": xs})["y"], xs @ W_A["small"], rtol=1e-4, atol=1e-4,
                                   err_msg="loraWeightSharingEnabled = false: no section needed")


# ====================================================================== graph switching
def switching_configs() -> list:
    out = []
    for option, member in ((Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY, "isPersistentBinary"),
                           (Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT, "memoryLimitHint")):
        c = client_ffi.new("QnnContext_Config_t *")
        c.option = option
        setattr(c, member, 1)
        out.append(c)
    return out


def test_graph_switching_reapplies_the_cached_section(made, caplog):
    """"for graph switching scenarios, the HTP backend will always re-apply the cached binary
    section blob prior to execution": traditional switching holds one graph at a time."""
    blob, _, sections = made
    caplog.set_level(logging.INFO, logger="qnnemu.client")
    with Backend(log_level="info") as be:
        configs = switching_configs()
        loaded = Loaded(be, blob, configs)
        core = HANDLES.lookup(int(client_ffi.cast("uintptr_t", loaded.ctx.handle)))
        assert core.switching is not None and core.switching.loaded == ["small"], "setup: low-memory mode, small loaded"
        assert core.binary_graph_bytes == {"small": 0, "large": 0}, \
            f"the shared LoRA blob stays resident with the context: no graph owns its bytes {core.binary_graph_bytes}"
        loaded.apply(sections["A"]["small"], "small")
        loaded.apply(sections["B"]["large"], "large")
        caplog.clear()
        sequence = [(n, loaded.run(n)) for n in ("large", "small", "large", "large")]
        assert sequence == [("large", "B"), ("small", "A"), ("large", "B"), ("large", "B")], \
            f"each switched-in graph computes the adapter last applied to it: {sequence}"
        reapplied = [r.getMessage() for r in caplog.records if REAPPLIED in r.getMessage()]
        assert len(reapplied) == 3 and all("graph switching loads it" in m for m in reapplied), \
            f"one re-apply per switch (three switches), none for the repeated execute: {reapplied}"
        assert core.lora.reapplies == 3, f"the context counts the re-applies: {core.lora.reapplies}"


# ====================================================================== generator
def test_generator_config_file_writes_the_shared_blob(tmp_path, capsys):
    graphs = []
    for name, k in SIZES.items():
        np.save(tmp_path / f"{name}.npy", W_A[name])
        graphs.append({"name": name, "tensors": [
            {"name": "x", "type": "APP_WRITE", "dtype": "FLOAT_32", "dims": [1, k]},
            {"name": "w", "type": "UPDATEABLE_STATIC", "dtype": "FLOAT_32", "dims": [k, k], "data": f"{name}.npy"},
            {"name": "y", "type": "APP_READ", "dtype": "FLOAT_32", "dims": [1, k]}],
            "nodes": [{"type": "MatMul", "inputs": ["x", "w"], "outputs": ["y"]}]})
    (tmp_path / "model.json").write_text(json.dumps({"version": 1, "graphs": graphs}))
    (tmp_path / "htp.json").write_text(json.dumps({"context": {"lora_weight_sharing": True}}))
    (tmp_path / "config.json").write_text(json.dumps({"backend_extensions": {
        "shared_library_path": "libQnnHtpNetRunExtensions.so", "config_file_path": "htp.json"}}))
    out = tmp_path / "out"
    status = generator.main([str(a) for a in ("--model", tmp_path / "model.json", "--output_dir", out, "--binary_file",
                                              "lora", "--config_file", tmp_path / "config.json", "--output_sections")])
    assert status == 0, f"the generator succeeds: {capsys.readouterr().err}"
    blob = (out / "lora.bin").read_bytes()
    flag = tmp_path / "flag"
    status = generator.main([str(a) for a in ("--model", tmp_path / "model.json", "--output_dir", flag,
                                              "--binary_file", "lora", "--lora_weight_sharing")])
    assert status == 0, f"the generator succeeds with --lora_weight_sharing: {capsys.readouterr().err}"
    assert (flag / "lora.bin").read_bytes() == blob, "--lora_weight_sharing writes the config file's binary"
    assert generator.main([str(a) for a in ("--model", tmp_path / "m.onnx", "--lora_weight_sharing")]) == 1 and \
        "needs a JSON graph description" in capsys.readouterr().err, "--lora_weight_sharing refuses an ONNX model"
    record = lora.describe(blob)
    assert record is not None and record["sharedBlobSize"] == SIZES["large"] ** 2 * 4, \
        f"lora_weight_sharing in the config file makes a shared-blob binary: {record}"
    with Backend(log_level=None) as be:
        loaded = Loaded(be, blob)
        assert refused(lambda: loaded.run("small")).code == Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, \
            "the generated binary's graphs wait for their sections"
        for name in SIZES:
            loaded.apply((out / f"lora.{name}.section.bin").read_bytes(), name)
            assert loaded.run(name) == "A", f"the generator's section of graph {name} unblocks it"


# ====================================================================== rules
@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def _raw_run(env: Env, g: int, k: int) -> int:
    inp = abi.tensor("x", (1, k))
    out = abi.tensor("y", (1, k), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    abi.set_buffer(inp, np.ones((1, k), np.float32))
    abi.set_buffer(out, np.zeros((1, k), np.float32))
    return abi.call("graphExecute", vp(g), abi.tensor_array([inp], env.keep), 1,
                    abi.tensor_array([out], env.keep), 1, NULL, NULL)


def test_rule_execute_before_apply(env, made):
    blob, _, _ = made
    code, ctx = env.load(blob)
    assert code == OK, f"setup: contextCreateFromBinary returned {code}"
    g = env.retrieve(ctx, "small")
    env.rec.clear()
    env.rec.assert_rule(_raw_run(env, g, SIZES["small"]), Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT,
                        "QNNEMU-graphExecute-lora-not-applied", "graphExecute", "graphHandle")
    env.free_context(ctx)


def test_old_binary_loaded_with_the_config_does_not_share(env, made):
    _, plain, _ = made
    configs = env.context_configs({"custom": {"option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED,
                                              "loraWeightSharingEnabled": True}})
    code, ctx = env.load(plain, configs=configs)
    assert code == OK, f"an old binary loads with the config (as on the vendor): {code}"
    assert any(f"[{WARN_RULE}]" in m for m in env.rec.messages()), \
        f"it says the binary does not share LoRA memory ({WARN_RULE}; its negative case: tests/test_warning_rules.py)"
    g = env.retrieve(ctx, "small")
    assert _raw_run(env, g, SIZES["small"]) == OK, "an old binary works without LoRA weight sharing: no section needed"
    env.free_context(ctx)


# ====================================================================== the vendor
_PROBE = """
import json, sys
import numpy as np
from qnnemu.abi import fast_execute
from qnnemu.client import Backend, QnnCallError, htp_context_config
lib = None if sys.argv[1] == "ours" else sys.argv[1]
LORA = [htp_context_config("LORA_WEIGHT_SHARING_ENABLED", loraWeightSharingEnabled=True)]
out = {}
def code(fn):
    try:
        fn()
        return 0
    except QnnCallError as e:
        return int(e.code)
def graph(ctx, name, updatable):
    g = ctx.graph(name)
    x = g.input("x", (1, 4))
    g.node("MatMul", [x, g.static("w", np.eye(4, dtype=np.float32), updatable=updatable)],
           [("y", (1, 4), np.float32)], app_read=True)
    g.finalize()
    return g
x = {"x": np.ones((1, 4), np.float32)}
be = Backend(lib, log_level=None)
ctx = None
def create():
    global ctx
    ctx = be.context(LORA)
out["contextCreate LORA true"] = code(create)
upd, plain = graph(ctx, "upd", True), graph(ctx, "plain", False)
out["execute, updatable weights"] = code(lambda: upd.execute(x))
out["execute, no updatable weights"] = code(lambda: plain.execute(x))
out["tensorUpdateGraphTensors"] = code(lambda: upd.update_tensors({"w": np.eye(4, dtype=np.float32) * 2}))
out["execute after tensorUpdate"] = code(lambda: upd.execute(x))
off = be.context([htp_context_config("LORA_WEIGHT_SHARING_ENABLED", loraWeightSharingEnabled=False)])
out["execute, LORA false"] = code(lambda: graph(off, "upd", True).execute(x))
p = be.context()
graph(p, "plain", False)
blob = p.get_binary()
out["old binary + LORA true at load"] = code(lambda: Backend(lib, log_level=None).context_from_binary(blob, LORA))
print(json.dumps(out))
"""
# input -> (vendor code, qnnemu code)
EXPECTED = {
    "contextCreate LORA true": (0, 0),
    "execute, updatable weights": (Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT),
    "execute, no updatable weights": (Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT),
    "tensorUpdateGraphTensors": (0, 0),
    "execute after tensorUpdate": (Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT),
    "execute, LORA false": (0, 0),
    "old binary + LORA true at load": (0, 0),
}


@pytest.mark.parametrize("side", ["vendor", "ours"])
def test_vendor_answers(side):
    if side == "vendor" and vendor_library() is None:
        pytest.skip("onnxruntime_qnn (the vendor's libQnnHtp.so) is not installed")
    arg = str(vendor_library()) if side == "vendor" else "ours"
    proc = subprocess.run([sys.executable, "-c", _PROBE, arg], env=vendor_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{side} probe failed: {proc.stderr[-2000:]}"
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    want = {k: v[0 if side == "vendor" else 1] for k, v in EXPECTED.items()}
    assert got == want, f"{side}: the answers pinned in EXPECTED (input -> code): got {got}"
