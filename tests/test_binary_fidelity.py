"""Context binary fidelity (issue 16 items 8 and 4; docs/context-binary.md "Sequencing and data
paging", "Constant padding", "Data sections"): QNN HTP backend documentation, "QNN Context Binary
size" (the binary stores the sequence of operations and the data paging; constants padded to the
HTP's internal format) and "QnnContext_createFromBinaryWithCallback API" (the main data section
4 KB-aligned relative to the file start; one provider call per data section, shared and
non-shared weights separately; distinct fds).

Format version 3 records each graph's prepared plan; the loader installs it instead of preparing
the graph again, and ``qnnemu-context-binary-utility`` prints its sequence and paging.
"""
from __future__ import annotations

import json
import struct

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.binary_builders import load, loaded_graph, run, split, with_meta
from helpers.context_env import CALLBACKS, Env
from helpers.fake_graph import SM8550

from qnnemu.core import binary
from qnnemu.core.backend import Backend
from qnnemu.core.context import Context
from qnnemu.core.device import Device
from qnnemu.core.graph import OpConfigDesc
from qnnemu.core.handles import HANDLES
from qnnemu.core.log import NULL_LOGGER
from qnnemu.core.tensor import RawQuant, TensorDesc
from qnnemu.headers import Q
from qnnemu.htp import prepare
from qnnemu.tools import context_binary_utility

OK = Q.QNN_SUCCESS
F32 = Q.QNN_DATATYPE_FLOAT_32
NATIVE, STATIC = Q.QNN_TENSOR_TYPE_NATIVE, Q.QNN_TENSOR_TYPE_STATIC
APP_WRITE, APP_READ = Q.QNN_TENSOR_TYPE_APP_WRITE, Q.QNN_TENSOR_TYPE_APP_READ



# ------------------------------------------------------------------------------ a graph that pages
class Builder:
    def __init__(self, name="paged", vtcm: int | None = 1 << 20):
        self.ctx = Context(Backend(), Device(SM8550, NULL_LOGGER), None, None)
        self.graph = HANDLES.lookup(self.ctx.create_graph(name))
        if vtcm is not None:   # the VTCM budget (the record qnnemu/htp/settings.py reads)
            self.graph.configs["htp_vtcm"] = {"option": "VTCM_SIZE_IN_BYTES", "bytes": int(vtcm)}
        self.rng = np.random.default_rng(7)

    def tensor(self, name, dims, type_=NATIVE, data=None):
        raw = None if data is None else np.ascontiguousarray(data).tobytes()
        return self.graph.create_tensor(TensorDesc(
            2, 0, name, type_, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, F32,
            RawQuant(Q.QNN_DEFINITION_UNDEFINED, Q.QNN_QUANTIZATION_ENCODING_UNDEFINED), tuple(dims),
            Q.QNN_TENSORMEMTYPE_RAW, raw, len(raw) if raw else 0, raw is not None))

    def node(self, op, name, inputs, outputs):
        ref = lambda t: TensorDesc(  # noqa: E731
            2, t.id, t.name, t.type, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, t.dtype,
            RawQuant(Q.QNN_DEFINITION_UNDEFINED, Q.QNN_QUANTIZATION_ENCODING_UNDEFINED), t.dims,
            Q.QNN_TENSORMEMTYPE_RAW)
        self.graph.add_node(OpConfigDesc(1, name, "qti.aisw", op, [], [ref(t) for t in inputs],
                                         [ref(t) for t in outputs]))

    def conv(self, name, x, cout):
        cin = x.dims[-1]
        w = self.tensor(f"{name}_w", (1, 1, cin, cout), STATIC,
                        (self.rng.standard_normal((1, 1, cin, cout)) / np.sqrt(cin)).astype(np.float32))
        y = self.tensor(f"{name}_out", (*x.dims[:-1], cout))
        self.node("Conv2d", name, [x, w], [y])
        return y


def paged_graph(vtcm: int | None = 1 << 20) -> Builder:
    """x -> A -> B -> P1 -> P2 -> P3 (1x1 convs at 48x48); y1 = A + P3, y2 = B + P3: A and B stay
    live through the chain, so 1 MiB of VTCM spills and fills (data paging).  P1 has 40 output
    channels: its weights and P2's are not multiples of HMX's 32-wide tiles."""
    b = Builder(vtcm=vtcm)
    x = b.tensor("x", (1, 48, 48, 64), APP_WRITE)
    a = b.conv("A", x, 64)
    bb = b.conv("B", a, 64)
    p3 = b.conv("P3", b.conv("P2", b.conv("P1", bb, 40), 64), 64)
    for name, src in (("y1", a), ("y2", bb)):
        y = b.tensor(name, a.dims, APP_READ)
        b.node("ElementWiseAdd", f"add{name[1]}", [src, p3], [y])
    b.graph.finalize()
    b.x = x
    return b


def feeds(b: Builder) -> dict:
    return {"x": np.random.default_rng(3).standard_normal(b.x.dims).astype(np.float32)}


@pytest.fixture(scope="module")
def paged():
    b = paged_graph()
    plan = b.graph.htp_plan
    assert {"spill", "fill"} <= {s.kind for s in plan.steps}, f"setup: 1 MiB of VTCM pages: {plan.passes}"
    return b, binary.serialize(b.ctx)


def _loaded(blob: bytes):
    ctx = load(blob, device=Device(SM8550, NULL_LOGGER))
    return ctx, loaded_graph(ctx, "paged")


# ------------------------------------------------------------------------------ item 8: the plan
def test_the_plan_is_recorded_and_the_loader_restores_it(paged, monkeypatch):
    b, blob = paged
    _, meta, _ = split(blob)
    assert meta["version"] == binary.FORMAT_VERSION == 3 and "plan" in meta["graphs"][0], \
        "format version 3 records the graph's plan"
    calls = []
    real = prepare.prepare_graph
    monkeypatch.setattr(prepare, "prepare_graph", lambda g: calls.append(g.name) or real(g))
    ctx, g = _loaded(blob)
    try:
        assert calls == [], f"the loader installs the recorded plan instead of preparing again: {calls}"
        assert g.htp_plan.to_optrace() == b.graph.htp_plan.to_optrace(), \
            "the loaded graph has the recorded plan: every step, block, offset, spill and fill"
        assert g.spill_fill_bytes == b.graph.spill_fill_bytes > 0, "its spill-fill buffer"
        want, got = run(b.graph, feeds(b)), run(g, feeds(b))
        assert all(want[k].tobytes() == got[k].tobytes() for k in want), "bit-identical outputs"
        assert binary.serialize(ctx) == blob, "a loaded context serializes to the bytes it was loaded from"
    finally:
        ctx.free()


def test_the_loaded_graph_runs_the_recorded_sequence_not_a_new_one(paged):
    """A recorded plan that differs from what prepare would make now (another cost model, another
    release) is the plan the graph runs: here the record's schedule is edited."""
    b, blob = paged
    original = b.graph.htp_plan

    def edit(meta):
        plan = meta["graphs"][0]["plan"]
        plan["total_cycles"] = original.total_cycles + 12345
        plan["schedule_policy"] = "runlist"
        cols = plan["steps"]["columns"]
        start, end = cols.index("start_cycle"), cols.index("end_cycle")
        for row in plan["steps"]["rows"]:
            row[start] += 1000
            row[end] += 1000
    ctx, g = _loaded(with_meta(blob, edit))
    try:
        assert g.htp_plan.total_cycles == original.total_cycles + 12345, "the recorded makespan"
        assert g.htp_plan.schedule_policy == "runlist", "the recorded schedule policy"
        assert [s.start_cycle for s in g.htp_plan.steps] == [s.start_cycle + 1000 for s in original.steps], \
            "the recorded step schedule, not a re-derived one"
    finally:
        ctx.free()


def test_binaries_without_a_plan_still_load_and_are_prepared(paged, monkeypatch):
    b, _ = paged
    monkeypatch.setattr(binary.format, "FORMAT_VERSION", 2)
    old = binary.serialize(b.ctx)
    monkeypatch.undo()
    h, meta, _ = split(old)
    assert h.format_version == 2 and "plan" not in meta["graphs"][0] and "sections" not in meta, \
        "a version-2 binary: no plan, one data section"
    assert h.data_offset % 64 == 0, "version 2: the data section on a 64-byte boundary"
    ctx, g = _loaded(old)
    try:
        assert g.htp_plan is not None and g.htp_plan.to_optrace() == b.graph.htp_plan.to_optrace(), \
            "prepared at load as before (the same cost model gives the same plan)"
    finally:
        ctx.free()


@pytest.mark.parametrize("edit,what", [
    (lambda p: p["steps"]["rows"][0].__setitem__(0, 5), "a step index out of order"),
    (lambda p: p["steps"]["rows"][0].__setitem__(p["steps"]["columns"].index("node_index"), 99),
     "a node index outside the graph"),
    (lambda p: p["steps"]["rows"][0].__setitem__(p["steps"]["columns"].index("kind"), "jump"), "an unknown kind"),
    (lambda p: p.__setitem__("graph", "other"), "another graph's plan"),
    (lambda p: p.__setitem__("total_cycles", "many"), "a string for an integer"),
    (lambda p: p["blocks"]["columns"].append("colour"), "a column without rows' values"),
    (lambda p: p.__setitem__("constraints", [[0, 10**6]]), "a constraint on a step that does not exist"),
])
def test_a_corrupted_plan_record_is_refused(paged, edit, what):
    _, blob = paged
    bad = with_meta(blob, lambda meta: edit(meta["graphs"][0]["plan"]))
    with pytest.raises(binary.format.QnnError) as e:
        _loaded(bad)
    assert e.value.rule == "QNNEMU-binary-metadata" and "plan" in e.value.detail, \
        f"{what}: refused as inconsistent metadata naming the plan record: {e.value.detail}"


def test_the_utility_prints_the_sequence_and_the_paging(paged, tmp_path):
    b, blob = paged
    path = tmp_path / "paged.bin"
    path.write_bytes(blob)
    out = tmp_path / "info.json"
    assert context_binary_utility.main(["--context_binary", str(path), "--json_file", str(out)]) == 0, "tool ran"
    report = json.loads(out.read_text())["qnnemu"]
    graph = report["graphs"]["paged"]
    plan = b.graph.htp_plan
    assert len(graph["sequence"]) == len(plan.steps) and \
        graph["sequence"][0].startswith(f"0 {plan.steps[0].kind} {plan.steps[0].name} "), \
        "one line per recorded step, in runlist order"
    assert graph["runlist"] == plan.prescheduled_order, "the pre-scheduled node order"
    spilled = sorted({s.name.rsplit(":", 1)[0] for s in plan.steps if s.kind == "spill"})
    assert graph["paging"]["spilled"] == spilled and spilled, f"the tensors paged out to DDR: {graph['paging']}"
    paging = graph["paging"]
    assert "x" in paging["ddr"] and paging["spill_fill_buffer_bytes"] == plan.spill_fill_buffer_bytes, \
        "graph I/O lives in DDR; the spill-fill buffer size"
    assert graph["paging"]["vtcm_resident"] and not set(graph["paging"]["vtcm_resident"]) & set(spilled), \
        "VTCM-resident tensors are the ones never paged"
    assert report["format_version"] == 3 and report["data_offset"] % 4096 == 0, "format and alignment reported"


# ------------------------------------------------------------------------------ item 8: layout
def test_the_data_section_starts_on_a_4_kib_page(paged):
    _, blob = paged
    h = binary.parse_header(blob)
    info = binary.inspect(blob)
    assert h.data_offset % 4096 == 0, f"data section at {h.data_offset}: 4 KiB aligned from the file start"
    assert all((h.data_offset + s.offset) % 4096 == 0 for s in info.sections), "every data section on a page"
    assert all(b.offset % binary.format.CONSTANT_ALIGN == 0 for b in info.blobs), "constants on the 256-byte granule"
    # the header check: a version-3 data section off its page is corrupt
    moved = bytearray(blob)
    struct.pack_into("<Q", moved, 72, h.data_offset - 64)
    with pytest.raises(binary.format.QnnError) as e:
        binary.parse_header(binary.reseal(bytes(moved)))
    assert e.value.rule == "QNNEMU-binary-header" and "4096" in e.value.detail, f"refused: {e.value.detail}"


def test_hmx_weights_reserve_their_padded_size(paged):
    b, blob = paged
    info = binary.inspect(blob)
    g = info.graphs[0]
    by_name = {t.name: t for t in g.tensors}
    hmx_nodes = {b.graph.nodes[s.node_index].name for s in b.graph.htp_plan.steps
                 if s.node_index is not None and "HMX" in (s.resource, *s.resources)}
    assert {"A", "P1", "P2"} <= hmx_nodes, f"setup: the float16 convolutions run on HMX on SM8550: {hmx_nodes}"
    pad32 = lambda n: -(-n // 32) * 32  # noqa: E731
    for name, (cin, cout) in {"P1_w": (64, 40), "P2_w": (40, 64), "A_w": (64, 64)}.items():
        blob_info = info.blobs[by_name[name].blob]
        want = pad32(cin) * pad32(cout) * 4
        assert blob_info.size == cin * cout * 4, f"{name}: the data is the weight itself"
        assert max(blob_info.reserved, blob_info.size) == want, \
            f"{name}: [{cin}, {cout}] reserves its 32 x 32 tile layout, {want} bytes (got {blob_info.reserved})"
    h = binary.parse_header(blob)
    p1 = info.blobs[by_name["P1_w"].blob]
    tail = blob[h.data_offset + p1.offset + p1.size:h.data_offset + p1.offset + p1.reserved]
    assert len(tail) == p1.reserved - p1.size and not any(tail), "the padding is zero bytes after the data"


# ------------------------------------------------------------------------------ item 4: data sections
@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


class Provider:
    """DMA callbacks: each request gets a fresh page-aligned buffer with the requested range;
    ``fds`` gives the fd of each request in turn."""

    def __init__(self, blob: bytes, fds=None):
        self.blob, self.fds = blob, list(fds) if fds else None
        self.requests: list[tuple[int, int]] = []
        self.released: list[int] = []
        self.keep: list = []
        self.provide = ffi.callback("Qnn_ContextBinaryDmaDataProviderFn_t", self._provide)
        self.release = ffi.callback("Qnn_ContextBinaryDmaDataReleaseFn_t", self._release)
        CALLBACKS.extend([self.provide, self.release])

    def _provide(self, req, resp, param):
        offset, size = int(req.offset), int(req.size)
        self.requests.append((offset, size))
        buf = ffi.new("char[]", size + 8192)
        self.keep.append(buf)
        start = (-int(ffi.cast("uintptr_t", buf))) % 4096
        ffi.memmove(buf + start, self.blob[offset:offset + size], size)
        resp.dmaBuffer.fd = self.fds[len(self.requests) - 1] if self.fds else 100 + len(self.requests)
        resp.dmaBuffer.data = buf + start
        resp.dataStartOffset = 0
        resp.alignedSize = size
        return OK

    def _release(self, mem, param):
        self.released.append(int(mem.dmaBuffer.fd))
        return OK

    def struct(self, env):
        cb = ffi.new("Qnn_ContextBinaryCallback_t *")
        cb.type = Q.QNN_CONTEXT_CALLBACK_DMA_BUFFER
        cb.dmaBufferCallback.version = Q.QNN_CONTEXT_CALLBACK_DMA_BUFFER_VERSION_1
        cb.dmaBufferCallback.v1.dataProvide = self.provide
        cb.dmaBufferCallback.v1.dataRelease = self.release
        env.keep.append(cb)
        return cb


def shared_weights_binary(env) -> tuple[bytes, dict]:
    """Two dense graphs with the same FC weight (shared) and their own biases, in a context with
    WEIGHT_SHARING_ENABLED."""
    ctx = env.context(env.context_configs({"custom": {
        "option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED, "weightSharingEnabled": True}}))
    rng = np.random.default_rng(5)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    biases = {f"g{i}": rng.standard_normal(3).astype(np.float32) for i in range(2)}
    for name, bias in biases.items():
        env.dense_graph(ctx, name, w, bias)
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    env.rec.clear()
    return blob, {name: (w, bias) for name, bias in biases.items()}


def _with_callback(env, blob: bytes, provider: Provider):
    h = binary.parse_header(blob)
    head = blob[:h.data_offset]   # the weights come from the provider only
    out = ffi.new("Qnn_ContextHandle_t *")
    code = abi.call("contextCreateFromBinaryWithCallback", vp(env.be), NULL, NULL, provider.struct(env),
                    env.buffer(head), len(head), out, NULL, NULL)
    return code, abi.hval(out[0])


def test_the_provider_is_called_once_per_data_section(env):
    blob, weights = shared_weights_binary(env)
    info = binary.inspect(blob)
    h = info.header
    assert [s.name for s in info.sections] == ["shared", "weights"], f"two data sections: {info.sections}"
    provider = Provider(blob)
    code, ctx = _with_callback(env, blob, provider)
    assert code == OK, f"contextCreateFromBinaryWithCallback: {env.rec.errors()}"
    assert provider.requests == [(h.data_offset + s.offset, s.size) for s in info.sections], \
        "one request per data section: the shared weights, then the graphs' own"
    assert all(off % 4096 == 0 for off, _ in provider.requests), "each section starts on a 4 KiB file offset"
    assert env.rules() == set(), f"page-aligned buffers: no warning: {env.rules()}"
    for name, (w, bias) in weights.items():
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        want = np.maximum(x @ w.T + bias, 0)
        np.testing.assert_allclose(env.run(env.retrieve(ctx, name), x), want, rtol=1e-6,
                                   err_msg=f"{name}: weights read from both provided sections")
    env.free_context(ctx)
    assert sorted(provider.released) == [101, 102], "both buffers released at contextFree"


def test_rule_with_callback_fd_reused(env):
    blob, _ = shared_weights_binary(env)
    provider = Provider(blob, fds=[7, 7])
    code, _ = _with_callback(env, blob, provider)
    msg = env.rec.assert_rule(code, Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY,
                              "QNNEMU-contextCreateFromBinaryWithCallback-fd", "contextCreateFromBinaryWithCallback",
                              "callback.dmaBufferCallback.v1.dataProvide")
    assert "fd 7" in msg and "distinct" in msg, f"the message names the fd: {msg}"
    assert provider.released == [7, 7], "both provided buffers are released when the load fails"
