"""FILE_READ_MEMORY_BUDGET and INIT_ACCELERATION at contextCreateFromBinary (issue 16 item 1; QNN
HTP backend documentation, "QNN HTP Context Config Options"; docs/context-binary.md "Read budget
and init acceleration"): the binary is read in reads of at most the budget (mmapped buffers only;
0 turns it off; a budget above the file reads the file), INIT_ACCELERATION spreads the graphs'
initialization over the device's HVX threads, and the load's profile shows both (event 1004
"Accelerator (load binary) time" and BACKEND events with the reads and the modelled times).

The vendor's libQnnHtp.so 2.51 (x86-64) accepts every budget on any buffer and logs a warning at 0;
it refuses INIT_ACCELERATION at contextCreateFromBinary (QNN_CONTEXT_ERROR_INVALID_CONFIG, "HTP
Config option: 8 not supported") -- a device feature its x86 build does not run: qnnemu emulates
the device and takes it (``test_vendor_read_budget_and_init_acceleration`` pins both).
"""
from __future__ import annotations

import json
import math
import subprocess
import sys

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.context_env import Env
from vendor import vendor_env, vendor_library

from qnnemu.core import binary
from qnnemu.core.binary import load_model
from qnnemu.core.device import DeviceModel
from qnnemu.headers import Q

OK = Q.QNN_SUCCESS
MIB = 1 << 20
LOAD_ACCEL = Q.QNN_HTP_PROFILE_EVENTTYPE_CONTEXT_LOAD_BIN_ACCEL_TIME_MICROSEC


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def big_binary(env, n_graphs: int = 1, layers: int = 1) -> bytes:
    """Graphs x[1,512] -> ``layers`` x (FullyConnected 512x512 -> Relu) -> y: 1 MiB of weights per
    layer, so a 1 MB budget needs several reads."""
    ctx = env.context()
    rng = np.random.default_rng(1)
    for k in range(n_graphs):
        code, g = abi.create("graphCreate", vp(ctx), abi.cstr(f"g{k}", env.keep), NULL)
        assert code == OK, "setup: graphCreate"
        x = env.create_tensor(g, abi.tensor("x", (1, 512)))
        for i in range(layers):
            weights = (rng.standard_normal((512, 512)) / 23).astype(np.float32)
            w = env.create_tensor(g, abi.static_tensor(f"w{i}", weights))
            h = env.create_tensor(g, abi.tensor(f"h{i}", (1, 512), type_=Q.QNN_TENSOR_TYPE_NATIVE))
            last = i == layers - 1
            y = env.create_tensor(g, abi.tensor("y" if last else f"r{i}", (1, 512),
                                                type_=Q.QNN_TENSOR_TYPE_APP_READ if last else Q.QNN_TENSOR_TYPE_NATIVE))
            for op in (abi.op_config(f"fc{i}", "FullyConnected", [x, w], [h]),
                       abi.op_config(f"relu{i}", "Relu", [h], [y])):
                env.keep.append(op)
                assert abi.call("graphAddNode", vp(g), op) == OK, "setup: graphAddNode"
            x = y
        assert abi.call("graphFinalize", vp(g), NULL, NULL) == OK, "setup: graphFinalize"
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    env.rec.clear()
    return blob


def chain_binary(env, ops: int) -> bytes:
    """One graph x[1,64] -> ``ops`` Relu -> y: a plan of ``ops`` steps."""
    ctx = env.context()
    code, g = abi.create("graphCreate", vp(ctx), abi.cstr("g0", env.keep), NULL)
    assert code == OK, "setup: graphCreate"
    x = env.create_tensor(g, abi.tensor("x", (1, 64)))
    for i in range(ops):
        last = i == ops - 1
        y = env.create_tensor(g, abi.tensor("y" if last else f"r{i}", (1, 64),
                                            type_=Q.QNN_TENSOR_TYPE_APP_READ if last else Q.QNN_TENSOR_TYPE_NATIVE))
        op = abi.op_config(f"relu{i}", "Relu", [x], [y])
        env.keep.append(op)
        assert abi.call("graphAddNode", vp(g), op) == OK, "setup: graphAddNode"
        x = y
    assert abi.call("graphFinalize", vp(g), NULL, NULL) == OK, "setup: graphFinalize"
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    env.rec.clear()
    return blob


def mmapped(tmp_path, blob: bytes) -> np.memmap:
    path = tmp_path / "model.bin"
    path.write_bytes(blob)
    return np.memmap(path, dtype=np.uint8, mode="r")


def configs(env, budget_mb: int | None = None, init_acceleration: bool | None = None):
    entries = []
    if budget_mb is not None:
        entries.append({"custom": {"option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET,
                                   "fileReadMemoryBudgetInMb": budget_mb}})
    if init_acceleration is not None:
        entries.append({"custom": {"option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_INIT_ACCELERATION,
                                   "initAcceleration": init_acceleration}})
    return env.context_configs(*entries)


def load(env, buffer, cfg) -> tuple[int, int, dict]:
    """contextCreateFromBinary of ``buffer`` (bytes: copied to a heap buffer; a memmap: passed in
    place) with a BASIC profile; (code, context, {identifier: (type, value)})."""
    handle = ffi.new("Qnn_ProfileHandle_t *")
    assert abi.call("profileCreate", vp(env.be), Q.QNN_PROFILE_LEVEL_BASIC, handle) == OK, "setup: profileCreate"
    prof = abi.hval(handle[0])
    ptr = env.buffer(buffer) if isinstance(buffer, bytes) else ffi.from_buffer(buffer)
    env.keep.append(ptr)
    out = ffi.new("Qnn_ContextHandle_t *")
    code = abi.call("contextCreateFromBinary", vp(env.be), NULL, cfg, ptr, len(buffer), out, vp(prof))
    events = {}
    ids, n = ffi.new("const QnnProfile_EventId_t **"), ffi.new("uint32_t *")
    if code == OK and abi.call("profileGetEvents", vp(prof), ids, n) == OK:
        for i in range(n[0]):
            data = ffi.new("QnnProfile_EventData_t *")
            assert abi.call("profileGetEventData", ids[0][i], data) == OK, "profileGetEventData"
            events[ffi.string(data.identifier).decode()] = (int(data.type), int(data.value))
    assert abi.call("profileFree", vp(prof)) == OK, "profileFree"
    return code, abi.hval(out[0]), events


def test_a_budget_reads_an_mmapped_binary_in_chunks(env, tmp_path):
    blob = big_binary(env, layers=2)
    h = binary.parse_header(blob)
    mm = mmapped(tmp_path, blob)
    code, ctx, whole = load(env, mm, configs(env, init_acceleration=False))
    assert code == OK, f"load without a budget: {env.rec.errors()}"
    env.free_context(ctx)
    code, ctx, chunked = load(env, mm, configs(env, budget_mb=1))
    assert code == OK and env.rec.rules() == set(), f"load with a 1 MB budget: {env.rec.records[-3:]}"
    # the payload CRC pass and the copy of the data section, each in reads of at most 1 MiB
    want_reads = math.ceil((h.total_size - h.header_size) / MIB) + math.ceil(h.data_size / MIB)
    assert chunked["Binary read: reads"][1] == want_reads, f"reads of at most 1 MiB: {chunked}"
    assert chunked["Binary read: largest read (bytes)"][1] == MIB, "no read above the budget"
    assert whole["Binary read: reads"][1] == 2 and whole["Binary read: largest read (bytes)"][1] > 2 * MIB, \
        f"without a budget the binary is read at once (the CRC pass, the copy): {whole}"
    assert chunked["Binary read: bytes"][1] == whole["Binary read: bytes"][1], "the same bytes either way"
    read_whole, read_chunked = whole["Binary read: modelled time"][1], chunked["Binary read: modelled time"][1]
    assert read_chunked > read_whole, f"reading in chunks costs time (modelled {read_chunked} vs {read_whole} us)"
    assert chunked[load_accel_name()][0] == LOAD_ACCEL and \
        abs(chunked[load_accel_name()][1] - (read_chunked + chunked["Graph init: modelled time"][1])) <= 1, \
        "event 1004 is the modelled read + initialization"
    out = np.zeros((1, 512), np.float32)   # the graph loaded from chunks runs
    x = abi.tensor("x", (1, 512))
    y = abi.tensor("y", (1, 512), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    abi.set_buffer(x, np.ones((1, 512), np.float32))
    abi.set_buffer(y, out)
    assert abi.call("graphExecute", vp(env.retrieve(ctx, "g0")), abi.tensor_array([x], env.keep), 1,
                    abi.tensor_array([y], env.keep), 1, NULL, NULL) == OK and out.any(), "executes"
    env.free_context(ctx)


def load_accel_name() -> str:
    return "Accelerator (load binary) time"


def test_init_acceleration_spreads_graph_initialization(env):
    blob = chain_binary(env, 300)
    small = chain_binary(env, 2)
    threads = DeviceModel().hvx_threads
    init = {}
    for name, b in (("big", blob), ("small", small)):
        for on in (False, True):
            code, ctx, ev = load(env, b, configs(env, init_acceleration=on))
            assert code == OK, f"{name} init acceleration {on}: {env.rec.errors()}"
            assert ev["Graph init: HVX threads"][1] == (threads if on else 1), f"{name}: threads {ev}"
            init[name, on] = ev["Graph init: modelled time"][1]
            env.free_context(ctx)
    gain = {name: init[name, False] / init[name, True] for name in ("big", "small")}
    assert gain["big"] > 1.5, f"a graph of many steps initializes faster on every thread: {init}"
    assert gain["small"] < gain["big"] and gain["small"] < 1.2, \
        f"'may not be effective for small graphs with a few number of ops': {gain}"


def test_load_model_numbers():
    read = binary.ReadStats(chunk_bytes=MIB)
    list(read.pieces(0, 3 * MIB + 1))
    assert (read.chunks, read.bytes_read, read.largest) == (4, 3 * MIB + 1, MIB), "reads of at most the budget"
    assert load_model.read_us(read) == pytest.approx(4 * load_model.READ_LATENCY_US +
                                                     (3 * MIB + 1) / load_model.READ_BYTES_PER_US), "read time"
    assert load_model.init_us([10], 4) == pytest.approx(load_model.GRAPH_INIT_US + 10 * load_model.STEP_INIT_US / 4)


# The warning rules (budget 0, above the file, not mmapped) and their effect (the binary read at
# once) are tests/test_warning_rules.py's cases.


# ------------------------------------------------------------------------------ the vendor
_PROBE = r"""
import sys, json
import numpy as np
from qnnemu.client import Backend, htp_context_config, QnnCallError
lib, path = sys.argv[1] if sys.argv[1] != "-" else None, sys.argv[2]
out = {}
with Backend(lib, log_level=None) as be:
    ctx = be.context()
    g = ctx.graph("g")
    x = g.input("x", (1, 256))
    g.node("Relu", [x], [("y", (1, 256), np.float32)], app_read=True)
    g.finalize()
    blob = ctx.get_binary()
    open(path, "wb").write(blob)
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    cases = {"budget0": ("FILE_READ_MEMORY_BUDGET", {"fileReadMemoryBudgetInMb": 0}),
             "budget1": ("FILE_READ_MEMORY_BUDGET", {"fileReadMemoryBudgetInMb": 1}),
             "budget_above_file": ("FILE_READ_MEMORY_BUDGET", {"fileReadMemoryBudgetInMb": 4096}),
             "init_acceleration": ("INIT_ACCELERATION", {"initAcceleration": True})}
    for name, (option, field) in cases.items():
        for kind, buf in (("heap", blob), ("mmap", mm)):
            try:
                be.context_from_binary(buf, [htp_context_config(option, **field)]).free()
                out[f"{name}/{kind}"] = 0
            except QnnCallError as e:
                out[f"{name}/{kind}"] = e.code
print("RESULT " + json.dumps(out))
"""


def _probe(lib: str, tmp_path, env: dict | None = None) -> dict:
    proc = subprocess.run([sys.executable, "-c", _PROBE, lib, str(tmp_path / "probe.bin")], env=env,
                          capture_output=True, text=True, timeout=300)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, f"probe of {lib} failed: {proc.stderr[-2000:]}"
    return json.loads(line[7:])


def test_vendor_read_budget_and_init_acceleration(tmp_path):
    lib = vendor_library()
    if lib is None:
        pytest.skip("onnxruntime_qnn (the vendor's libQnnHtp.so) is not installed")
    import os
    ours_env = dict(os.environ)
    vendor = _probe(str(lib), tmp_path, vendor_env())
    ours = _probe("-", tmp_path, ours_env)
    for case, code in vendor.items():
        if case.startswith("init_acceleration"):
            assert code == Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, f"vendor {case}: refused on x86 ({code})"
            assert ours[case] == OK, f"qnnemu {case}: the device feature is emulated ({ours[case]})"
        else:
            assert code == OK == ours[case], f"{case}: accepted by both (vendor {code}, qnnemu {ours[case]})"
