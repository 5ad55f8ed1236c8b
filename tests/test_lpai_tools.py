"""The LPAI backend in the tools and its offline binaries (issue 15 items 3-5; docs/lpai.md "Tools",
"Context binaries", "Profiling", "ADSP direct mode and TCM"): qnnemu-context-binary-generator
prepares offline (PREPARE) on libQnnLpaiEmu.so, the System library lists the binary's graphs with
their memory sizes, qnnemu-net-run --backend lpai runs it (DDR, or TCM in ADSP direct mode, QNN
LPAI Memory Management, "TCM Memory Support in LPAIBackendExtensions (ADSP Direct Mode)"), LPAI
BASIC profiling, and the TCM pool's rules.

No vendor LPAI library exists for x86 (tests/test_lpai_memory.py pins that), so the documents'
numbers and messages are the reference.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import qnnemu
from qnnemu.core.engine import engine_mode
from qnnemu.errors import QnnError
from qnnemu.headers import Q
from qnnemu.lpai import tcm
from qnnemu.system_client import SystemLibrary
from qnnemu.tools import context_binary_generator as generator, lpai as lpai_tools, net_run

pytestmark = pytest.mark.skipif(not os.path.isfile(qnnemu.lpai_library_path()),
                                reason="libQnnLpaiEmu.so is not built")

TCM_MAX = 2_035_712
U8 = {"dtype": "UFIXED_POINT_8", "quant": {"scale": 1.0, "offset": 0}}


def run(main, argv, capsys) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def write_model(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def relu_model(d: Path, n: int = 16) -> Path:
    return write_model(d / "relu.json", {"name": "relu", "tensors": [
        {"name": "x", "type": "APP_WRITE", "dims": [1, n], **U8},
        {"name": "y", "type": "APP_READ", "dims": [1, n], **U8}],
        "nodes": [{"name": "r", "type": "Relu", "inputs": ["x"], "outputs": ["y"]}]})


def gather_model(d: Path, n: int) -> Path:
    """x: n uint8 bytes, idx: one int32 -> y: one uint8 byte (I/O bytes: n + 5)."""
    return write_model(d / "gather.json", {"name": "gather", "tensors": [
        {"name": "x", "type": "APP_WRITE", "dims": [n], **U8},
        {"name": "idx", "type": "APP_WRITE", "dtype": "INT_32", "dims": [1]},
        {"name": "y", "type": "APP_READ", "dims": [1], **U8}],
        "nodes": [{"name": "g", "type": "Gather", "inputs": ["x", "idx"], "outputs": ["y"],
                   "params": {"axis": 0}}]})


def concat_model(d: Path, k: int) -> Path:
    """k one-byte inputs concatenated: k + 1 I/O tensors."""
    tensors = [{"name": f"x{i}", "type": "APP_WRITE", "dims": [1, 1], **U8} for i in range(k)]
    tensors.append({"name": "y", "type": "APP_READ", "dims": [1, k], **U8})
    return write_model(d / f"concat{k}.json", {"name": "concat", "tensors": tensors, "nodes": [
        {"name": "c", "type": "Concat", "inputs": [f"x{i}" for i in range(k)], "outputs": ["y"],
         "params": {"axis": 1}}]})


def generate(model: Path, out: Path, capsys) -> Path:
    status, stdout, err = run(generator.main, ["--model", model, "--backend", "lpai", "--output_dir", out], capsys)
    assert status == 0, f"the generator prepares {model.name} offline on libQnnLpaiEmu.so: {err}"
    binary = out / f"{model.stem}.bin"
    assert binary.is_file() and f"wrote {os.path.normpath(binary)}" in stdout, f"binary written: {stdout}"
    return binary


def tcm_config(d: Path, mem_type: str = "tcm") -> Path:
    """eaiParams_direct.json naming eaiParams_direct.conf, as the document's TCM test prepares them."""
    (d / "eaiParams_direct.conf").write_text(json.dumps({"lpai_graph": {"execute": {"mem_type": mem_type}}}))
    return write_model(d / "eaiParams_direct.json", {
        "backend_extensions": {"shared_library_path": "/data/local/tmp/libQnnLpaiNetRunExtensions.so",
                               "config_file_path": "eaiParams_direct.conf"},
        "context_configs": {"is_persistent_binary": True}})


def input_list(d: Path, arrays: dict[str, np.ndarray]) -> Path:
    for name, a in arrays.items():
        a.tofile(d / f"{name}.raw")
    lst = d / "input_list.txt"
    lst.write_text(" ".join(f"{name}:={d / name}.raw" for name in arrays) + "\n")
    return lst


@pytest.fixture(scope="module")
def relu_binary(tmp_path_factory):
    d = tmp_path_factory.mktemp("lpai_relu")
    status = generator.main(["--model", str(relu_model(d)), "--backend", "lpai", "--output_dir", str(d)])
    assert status == 0, "the generator prepares the Relu model offline on libQnnLpaiEmu.so"
    return d / "relu.bin"


# ------------------------------------------------------------------------------ item 3
def test_offline_binary_is_listed_with_its_memory_sizes(relu_binary):
    """The System library lists an LPAI binary: backend id LPAI, the LPAI API version, and per
    graph the memory plan's sizes (graph info v3's graphBlobInfo, docs/lpai.md)."""
    info = SystemLibrary().binary_info(relu_binary.read_bytes(), details=True)
    assert info["backend_id"] == Q.QNN_BACKEND_ID_LPAI, f"an LPAI binary: backend id {info['backend_id']}"
    assert info["backend_api"] == [Q.QNN_LPAI_API_VERSION_MAJOR, Q.QNN_LPAI_API_VERSION_MINOR,
                                   Q.QNN_LPAI_API_VERSION_PATCH], f"LPAI API version: {info['backend_api']}"
    (g,) = info["graphs"]
    mem = g["lpai_memory"]
    assert mem["scratch_mem_size"] > 0 and mem["scratch_mem_size"] % 128 == 0, f"scratch size: {mem}"
    assert mem["persistent_mem_size"] == 0, f"a stateless graph: {mem}"
    assert mem["io_size"] == 32, f"16 bytes in, 16 out: {mem}"
    assert [t["name"] for t in g["inputs"]] == ["x"] and [t["name"] for t in g["outputs"]] == ["y"], \
        "the graph IO is listed (QNN LPAI Memory Management, \"Querying IO Memory Requirements\")"


def test_binary_sizes_are_what_the_loaded_graph_reports(relu_binary):
    """The sizes in the binary are the ones graphGetProperty answers after contextCreateFromBinary."""
    from qnnemu.client import Backend
    info = SystemLibrary().binary_info(relu_binary.read_bytes())
    (g,) = info["graphs"]
    with Backend(qnnemu.lpai_library_path(), log_level=None) as be:
        ctx = be.context_from_binary(relu_binary.read_bytes())
        graph = ctx.retrieve_graph(g["name"], g["inputs"], g["outputs"])
        sizes = lpai_tools.set_buffers(graph)
        assert sizes == (g["lpai_memory"]["scratch_mem_size"], g["lpai_memory"]["persistent_mem_size"]), \
            f"the loaded graph reports {sizes}; the binary says {g['lpai_memory']}"
        graph.finalize()
        out = lpai_tools.IoBuffers(graph, tcm.Allocator(Q.QNN_LPAI_MEM_TYPE_DDR, False, logging.getLogger("t")))
        x = np.arange(16, dtype=np.uint8).reshape(1, 16)
        assert (out.execute({"x": x})["y"] == x).all(), "Relu of codes with offset 0 is the identity"


def test_offline_prepared_graph_executes_only_with_buffers(tmp_path, capsys):
    """PREPARE without buffers finalizes offline (serializable); executing that graph before it
    took its buffers is refused, as for a graph loaded from a binary."""
    from qnnemu.client import Backend, QnnCallError
    with Backend(qnnemu.lpai_library_path(), log_level=None) as be:
        ctx = be.context()
        g = ctx.graph("g", configs=[lpai_tools.prepare_config()])
        x = g.input("x", (1, 8), Q.QNN_DATATYPE_UFIXED_POINT_8, quant=(1.0, 0))
        g.node("Relu", [x], [("y", (1, 8), Q.QNN_DATATYPE_UFIXED_POINT_8, (1.0, 0))], app_read=True)
        g.finalize()
        assert len(ctx.get_binary()) > 0, "an offline-prepared context serializes"
        io = lpai_tools.IoBuffers(g, tcm.Allocator(Q.QNN_LPAI_MEM_TYPE_DDR, False, logging.getLogger("t")))
        with pytest.raises(QnnCallError) as err:
            io.execute({"x": np.ones((1, 8), np.uint8)})
        assert err.value.code == Q.QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED, f"no buffers yet: {err.value}"
        lpai_tools.set_buffers(g)
        g.finalize()
        assert (io.execute({"x": np.full((1, 8), 3, np.uint8)})["y"] == 3).all(), "runs once bound"


def test_net_run_backend_lpai_runs_the_binary_with_debug_log(relu_binary, tmp_path, capsys):
    """--backend lpai on a context binary (DDR), --log_level debug reaching the backend's log."""
    x = (np.arange(16, dtype=np.float32) - 8).reshape(1, 16)
    lst = input_list(tmp_path, {"x": x})
    status, out, err = run(net_run.main, ["--backend", "lpai", "--retrieve_context", relu_binary, "--input_list",
                                          lst, "--output_dir", tmp_path / "out", "--log_level", "debug"], capsys)
    assert status == 0, f"net-run on LPAI: {err}"
    y = np.fromfile(tmp_path / "out" / "Result_0" / "y.raw", np.float32)
    assert np.array_equal(y, np.maximum(x.reshape(-1), 0)), f"Relu outputs: {y}"
    assert "backend debug:" in err and "LPAI graph 'relu' planned" in err, \
        f"--log_level debug reaches the LPAI backend's log: {err[-2000:]}"
    assert "tcm pool" not in err and "TCM pool" not in err, "DDR by default: no TCM pool"


def test_net_run_backend_lpai_prepares_a_model_online(tmp_path, capsys):
    x = np.linspace(-3, 3, 16, dtype=np.float32).reshape(1, 16)
    lst = input_list(tmp_path, {"x": x})
    status, out, err = run(net_run.main, ["--backend", "lpai", "--model", relu_model(tmp_path), "--input_list", lst,
                                          "--output_dir", tmp_path / "out", "--num_inferences", 2], capsys)
    assert status == 0, f"net-run --model on LPAI: {err}"
    assert "ran 2 inferences of graph relu" in out, f"summary: {out}"
    y = np.fromfile(tmp_path / "out" / "Result_1" / "y.raw", np.float32)
    assert np.array_equal(y, np.maximum(np.round(x.reshape(-1)), 0)), f"Relu of the quantized input: {y}"


def test_direct_mode_needs_an_lpai_backend(tmp_path, capsys):
    lst = input_list(tmp_path, {"x": np.zeros((1, 16), np.float32)})
    status, _, err = run(net_run.main, ["--model", relu_model(tmp_path), "--input_list", lst, "--output_dir",
                                        tmp_path / "o", "--direct_mode", "adsp"], capsys)
    assert status == 1 and "ADSP direct mode is the LPAI backend's" in err, f"refused on HTP: {err}"


# ------------------------------------------------------------------------------ item 5
def test_lpai_basic_profiling_reports_time_and_memory(relu_binary, tmp_path, capsys):
    lst = input_list(tmp_path, {"x": np.ones((1, 16), np.float32)})
    status, _, err = run(net_run.main, ["--backend", "lpai", "--retrieve_context", relu_binary, "--input_list",
                                        lst, "--output_dir", tmp_path, "--profiling_level", "basic"], capsys)
    assert status == 0, f"profiled run: {err}"
    calls = json.loads((tmp_path / net_run.PROFILE_FILE).read_text())["calls"]
    mem = SystemLibrary().binary_info(relu_binary.read_bytes())["graphs"][0]["lpai_memory"]
    for call, time_name in (("graphFinalize", "QNN (finalize) time"), ("graphExecute", "QNN (execute) time")):
        (record,) = [c for c in calls if c["call"] == call]
        events = {e["identifier"]: e for e in record["events"]}
        assert events[time_name]["unit"] == Q.QNN_PROFILE_EVENTUNIT_MICROSEC, f"{call}: time event {events}"
        expected = {"Scratch memory size": mem["scratch_mem_size"], "Persistent memory size": 0,
                    "IO memory size": 32, "Scratch memory size without sharing": mem["naive_scratch_size"]}
        got = {k: events[k]["value"] for k in expected}
        assert got == expected, f"{call}: memory sizes as BYTES events: {got} != {expected}"
        assert all(events[k]["unit"] == Q.QNN_PROFILE_EVENTUNIT_BYTES for k in expected), f"{call}: units"
        assert not any("HVX" in k or "VTCM" in k for k in events), f"{call}: no HTP events on LPAI: {list(events)}"


# ------------------------------------------------------------------------------ item 4: TCM
def _exact_gather(d: Path, capsys, extra: int = 0) -> tuple[Path, Path, int]:
    """A Gather model whose binary + I/O is TCM_MAX + ``extra`` bytes: (binary, input list, n)."""
    binary_size = 1024
    for _ in range(4):   # the binary's size depends a little on n's digits: settle it
        n = TCM_MAX + extra - binary_size - 5
        binary = generate(gather_model(d, n), d / "bin", capsys)
        if binary.stat().st_size == binary_size:
            break
        binary_size = binary.stat().st_size
    assert binary.stat().st_size + n + 5 == TCM_MAX + extra, "the model's binary + I/O is the size wanted"
    (d / "x.raw").write_bytes(bytes(range(256)) * (n // 256) + bytes(n % 256))
    np.array([7], np.int32).tofile(d / "idx.raw")
    (d / "list.txt").write_text(f"x:={d / 'x.raw'} idx:={d / 'idx.raw'}\n")
    return binary, d / "list.txt", n


def _tcm_run(binary: Path, lst: Path, d: Path, capsys, *extra) -> tuple[int, str, str]:
    return run(net_run.main, ["--backend", "lpai", "--retrieve_context", binary, "--input_list", lst,
                              "--output_dir", d / "out", "--direct_mode", "adsp", "--config_file", tcm_config(d),
                              "--use_native_input_files", "--use_native_output_files", *extra], capsys)


def test_tcm_pool_holds_exactly_its_maximum(tmp_path, capsys):
    """Binary + I/O of exactly 2,035,712 bytes load from TCM, with the document's debug messages."""
    binary, lst, n = _exact_gather(tmp_path, capsys)
    status, out, err = _tcm_run(binary, lst, tmp_path, capsys, "--log_level", "debug")
    assert status == 0, f"a model of exactly {TCM_MAX} bytes of binary + I/O runs from TCM: {err[-3000:]}"
    assert np.fromfile(tmp_path / "out" / "Result_0" / "y.raw", np.uint8).tolist() == [7], "y = x[7]"
    lines = [line.split("debug: ", 1)[1] for line in err.splitlines() if line.startswith("qnnemu-net-run: debug:")]
    assert lines.count(f"TCM pool current size: 0 max_size: {TCM_MAX}") == 1, f"pool registered once: {lines}"
    allocs = [line for line in lines if line.startswith("Allocate size ")]
    assert allocs == [f"Allocate size {binary.stat().st_size} from tcm pool 0", f"Allocate size {n} from tcm pool 0",
                      "Allocate size 4 from tcm pool 0", "Allocate size 1 from tcm pool 0"], \
        f"one message per buffer: the model binary, then the I/O tensors: {allocs}"
    print("\n".join(line for line in err.splitlines() if "TCM" in line or "tcm pool" in line))


def test_tcm_pool_refuses_one_byte_more(tmp_path, capsys):
    binary, lst, _ = _exact_gather(tmp_path, capsys, extra=1)
    status, _, err = _tcm_run(binary, lst, tmp_path, capsys)
    assert status == 1, f"one byte over the pool fails the initialization: {err}"
    assert "qnnemu-net-run: error: TCM memory allocation failure: required size: 1" in err, \
        f"the document's message at error level (the last, 1-byte buffer does not fit): {err}"
    assert "[QNNEMU-lpai-tcm-alloc-failure]" in err and "no fallback to DDR" in err, f"the tool's error: {err}"
    assert not (tmp_path / "out" / "Result_0").exists(), "nothing ran"


def test_tcm_allows_32_allocations_and_refuses_the_33rd(tmp_path, capsys):
    """The binary + 31 I/O tensors: 32 TCM buffers run; + 32 I/O tensors: the 33rd is refused
    (the document's "system fatal error": an error, status 1, no crash)."""
    for k, ok in ((30, True), (31, False)):
        d = tmp_path / f"k{k}"
        d.mkdir()
        binary = generate(concat_model(d, k), d / "bin", capsys)
        lst = input_list(d, {f"x{i}": np.full((1, 1), i, np.uint8) for i in range(k)})
        status, _, err = _tcm_run(binary, lst, d, capsys)
        if ok:
            assert status == 0, f"binary + {k + 1} I/O tensors = 32 TCM buffers: {err}"
            y = np.fromfile(d / "out" / "Result_0" / "y.raw", np.uint8)
            assert y.tolist() == list(range(k)), f"Concat output from TCM buffers: {y}"
        else:
            assert status == 1 and "[QNNEMU-lpai-tcm-alloc-count]" in err and "allocation 33 refused" in err, \
                f"the 33rd TCM buffer is refused: {err}"


def test_invalid_mem_type_logs_the_documented_messages(relu_binary, tmp_path, capsys):
    lst = input_list(tmp_path, {"x": np.zeros((1, 16), np.float32)})
    status, _, err = run(net_run.main, ["--backend", "lpai", "--retrieve_context", relu_binary, "--input_list", lst,
                                        "--output_dir", tmp_path / "out", "--direct_mode", "adsp",
                                        "--config_file", tcm_config(tmp_path, "sram")], capsys)
    assert status == 1, f"an undefined memory type fails the initialization: {err}"
    first = err.index("error: Invalid memory type")
    second = err.index("error: Memory type only supports DDR & TCM")
    assert first < second < err.index("[QNNEMU-lpai-tcm-mem-type]"), f"the parser's, then the allocator's: {err}"


def test_tcm_is_refused_outside_adsp_direct_mode(relu_binary, tmp_path, capsys):
    lst = input_list(tmp_path, {"x": np.zeros((1, 16), np.float32)})
    status, _, err = run(net_run.main, ["--backend", "lpai", "--retrieve_context", relu_binary, "--input_list", lst,
                                        "--output_dir", tmp_path / "out", "--config_file", tcm_config(tmp_path)],
                         capsys)
    assert status == 1 and "[QNNEMU-lpai-tcm-direct-mode]" in err and "ADSP direct mode only" in err, \
        f"TCM without --direct_mode adsp (x86 simulation): {err}"


def test_model_buffer_in_tcm_needs_the_adsp_target():
    """MODEL_BUFFER_MEM_TYPE = TCM: accepted by a backend created with HW_INFO target ADSP (direct
    mode); the x86 target refuses it (QNNEMU-lpai-context-mem-type, tests/test_lpai_rules.py)."""
    from qnnemu.client import Backend, QnnCallError
    tcm_cfg = lpai_tools.model_buffer_config(Q.QNN_LPAI_MEM_TYPE_TCM)
    with Backend(qnnemu.lpai_library_path(), log_level=None,
                 backend_configs=[lpai_tools.hw_info_config(Q.QNN_LPAI_BACKEND_TARGET_ADSP)]) as be:
        be.context([tcm_cfg])
    with Backend(qnnemu.lpai_library_path(), log_level=None) as be, pytest.raises(QnnCallError) as err:
        be.context([tcm_cfg])
    assert err.value.code == Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, f"x86 target: {err.value}"


# ------------------------------------------------------------------------------ the TCM pool's rules
def _direct_mode_case():
    tcm.Allocator(Q.QNN_LPAI_MEM_TYPE_TCM, False, logging.getLogger("t"))


def _alloc_failure_case():
    tcm.Allocator(Q.QNN_LPAI_MEM_TYPE_TCM, True, logging.getLogger("t")).allocate(TCM_MAX + 1, "input 'x'")


def _alloc_count_case():
    a = tcm.Allocator(Q.QNN_LPAI_MEM_TYPE_TCM, True, logging.getLogger("t"))
    for i in range(33):
        a.allocate(1, f"input 'x{i}'")


def _mem_type_case():
    tcm.Allocator(tcm.UNDEFINED, True, logging.getLogger("t")).allocate(16, "model binary")


RULE_CASES = {
    "QNNEMU-lpai-tcm-direct-mode": (_direct_mode_case, "lpai_graph.execute.mem_type"),
    "QNNEMU-lpai-tcm-alloc-failure": (_alloc_failure_case, "input 'x'"),
    "QNNEMU-lpai-tcm-alloc-count": (_alloc_count_case, "input 'x32'"),
    "QNNEMU-lpai-tcm-mem-type": (_mem_type_case, "model binary"),
}


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_tcm_rule(rule):
    case, path = RULE_CASES[rule]
    with pytest.raises(QnnError) as err:
        case()
    e = err.value
    assert (e.rule, e.code) == (rule, Q.QNN_COMMON_ERROR_MEM_ALLOC), f"{rule}: {e.rule} code {e.code}"
    assert f"[{rule}] {tcm.FUNC}: {path}:" in str(e), f"{rule}: function and parameter path named: {e}"


# ------------------------------------------------------------------------------ issue 15 acceptance
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
@pytest.mark.parametrize("info_version", ["1", "3"])
def test_sample_runs_an_offline_binary_with_user_io(relu_binary, tmp_path, info_version):
    """samples/lpai_binary_io.c: the "Querying IO Memory Requirements" and "Allocating and
    Configuring IO Memory" snippets (System library listing, aligned user IO) on an offline
    binary, with binary info v1 (what the snippet reads) and v3 (the default)."""
    root = Path(__file__).resolve().parent.parent
    exe = tmp_path / "lpai_binary_io"
    build = subprocess.run(["make", "-s", "-C", str(root / "samples"), f"LPAI_IO_OUT={exe}", "lpai_binary_io"],
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, f"make lpai_binary_io failed: {build.stdout}{build.stderr}"
    env = dict(os.environ, PYTHONPATH=str(root), QNNEMU_SYSTEM_BINARY_INFO_VERSION=info_version)
    done = subprocess.run([str(exe), qnnemu.lpai_library_path(), qnnemu.system_library_path(), str(relu_binary)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, f"lpai_binary_io failed ({done.returncode}): {done.stdout}{done.stderr}"
    assert f"1. binary info v{info_version}: backend id {Q.QNN_BACKEND_ID_LPAI}, graph relu" in done.stdout, \
        f"the System library's listing: {done.stdout}"
    # (an 8-bit Relu is one code table in the C engine: its scratch is the I/O alone, 2 x 64 codes
    # rounded to the 128-byte alignment)
    assert "3. alignment start=128 size=128, scratch 128, persistent 0, finalized" in done.stdout, done.stdout
    assert "output y: 0 1 2 3 4 5 6 7" in done.stdout, f"Relu of the input pattern (codes, offset 0): {done.stdout}"
    assert done.stdout.rstrip().endswith("PASSED"), done.stdout


def _state_session_graph(s, hidden: int = 8):
    """An LSTM-like cell on uint8 codes (scale 1, offset 0) with two state tensors kept in
    persistent memory: c' = Relu(c + x), h' = Relu(h + c') , y = h'."""
    from abi import op_config, tensor
    u8 = Q.QNN_DATATYPE_UFIXED_POINT_8
    code, g = s.graph("lstm_like")
    assert code == 0, f"graphCreate {code}"
    shape = (1, hidden)
    x = tensor("x", shape, u8, quant=(1.0, 0))
    c = tensor("c", shape, u8, Q.QNN_TENSOR_TYPE_APP_READWRITE, quant=(1.0, 0))
    h = tensor("h", shape, u8, Q.QNN_TENSOR_TYPE_APP_READWRITE, quant=(1.0, 0))
    cx = tensor("cx", shape, u8, Q.QNN_TENSOR_TYPE_NATIVE, quant=(1.0, 0))
    hc = tensor("hc", shape, u8, Q.QNN_TENSOR_TYPE_NATIVE, quant=(1.0, 0))
    y = tensor("y", shape, u8, Q.QNN_TENSOR_TYPE_APP_READ, quant=(1.0, 0))
    for t in (x, c, h, cx, hc, y):
        assert s.tensor(g, t) == 0, f"tensorCreateGraphTensor: {s.rec.errors()}"
    nodes = [("c_add", "ElementWiseAdd", [c, x], [cx]), ("c_next", "Relu", [cx], [c]),
             ("h_add", "ElementWiseAdd", [h, c], [hc]), ("h_next", "Relu", [hc], [h]),
             ("out", "Relu", [h], [y])]
    for name, op, ins, outs in nodes:
        assert s.node(g, op_config(name, op, ins, outs)) == 0, f"graphAddNode {name}: {s.rec.errors()}"
    return g, x, y


@pytest.mark.skipif(engine_mode() == "python", reason="QNNEMU_ENGINE=python: no C engine arena")
def test_lstm_like_graph_keeps_two_states_in_persistent_memory():
    """Both states (c and h) get their own aligned slots in the persistent pool and carry across
    executes; scratch one alignment unit smaller than reported is refused at graphFinalize."""
    from abi import LpaiSession, aligned_bytes
    s = LpaiSession()
    try:
        g, x, y = _state_session_graph(s)
        code, scratch = s.graph_property(g, Q.QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE)
        assert code == 0 and scratch > 0, f"SCRATCH_MEM_SIZE {code} {scratch}"
        code, persistent = s.graph_property(g, Q.QNN_LPAI_GRAPH_GET_PROP_PERSISTENT_MEM_SIZE)
        assert code == 0 and persistent == 128, f"two 8-byte states at 64-byte offsets, size-aligned: {persistent}"
        pbuf = aligned_bytes(persistent, fill=0xEE)
        assert s.set_graph(g, s.mem("scratch", aligned_bytes(scratch - 128)), s.mem("persistent", pbuf)) == 0, \
            f"a smaller (aligned) scratch buffer is accepted by graphSetConfig: {s.rec.errors()}"
        s.rec.clear()
        s.rec.assert_rule(s.finalize(g), Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, "QNNEMU-lpai-graph-mem-too-small",
                          "graphFinalize", "scratch buffer.size")
        assert s.set_graph(g, s.mem("scratch", aligned_bytes(scratch))) == 0, f"{s.rec.errors()}"
        assert s.finalize(g) == 0, f"graphFinalize with the reported size: {s.rec.errors()}"
        ys = []
        for _ in range(4):
            out = np.zeros((1, 8), np.uint8)
            assert s.execute_aligned(g, [(x, np.full((1, 8), 1, np.uint8))], [(y, out)]) == 0, s.rec.errors()
            ys.append(int(out[0, 0]))
        # c_t = t, h_t = h_{t-1} + c_t: 1, 3, 6, 10
        assert ys == [1, 3, 6, 10], f"both states carried across executes: {ys}"
        assert sorted({int(pbuf[0]), int(pbuf[64])}) == [4, 10], f"c and h in the persistent pool: {pbuf[::64]}"
    finally:
        s.close()


def add_static_model(d: Path) -> Path:
    """y = x + w, w a STATIC uint8 tensor whose bytes (17 .. 24) are findable in the binary."""
    return write_model(d / "add_w.json", {"name": "add_w", "tensors": [
        {"name": "x", "type": "APP_WRITE", "dims": [1, 8], **U8},
        {"name": "w", "type": "STATIC", "dims": [1, 8], **U8, "data": list(range(17, 25))},
        {"name": "y", "type": "APP_READ", "dims": [1, 8], **U8}],
        "nodes": [{"name": "a", "type": "ElementWiseAdd", "inputs": ["x", "w"], "outputs": ["y"]}]})


def test_binary_is_used_in_place(tmp_path, capsys):
    """REQUIRE_PERSISTENT_BINARY is 1: libQnnLpaiEmu.so loads a binary as a persistent one (QNN
    contextCreateFromBinary with PERSISTENT_BINARY), its weights are read from the application's
    buffer -- so changing that buffer after the load changes the results."""
    from qnnemu.client import Backend
    binary = generate(add_static_model(tmp_path), tmp_path / "bin", capsys)
    buf = np.frombuffer(binary.read_bytes(), np.uint8).copy()
    at = bytes(buf).find(bytes(range(17, 25)))
    assert at > 0, "the weights are stored in the binary"
    allocator = tcm.Allocator(Q.QNN_LPAI_MEM_TYPE_DDR, False, logging.getLogger("t"))
    info = SystemLibrary().binary_info(bytes(buf))["graphs"][0]
    with Backend(qnnemu.lpai_library_path(), log_level=None) as be:
        ctx = be.context_from_binary(buf)
        graph = ctx.retrieve_graph(info["name"], info["inputs"], info["outputs"])
        lpai_tools.set_buffers(graph)
        graph.finalize()
        io = lpai_tools.IoBuffers(graph, allocator)
        x = np.ones((1, 8), np.uint8)
        assert io.execute({"x": x})["y"].tolist() == [list(range(18, 26))], "y = x + w"
        buf[at:at + 8] = 100
        y = io.execute({"x": x})["y"]
        assert y.tolist() == [[101] * 8], f"the weights are read from the application's binary buffer: {y}"

