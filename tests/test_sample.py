"""Builds the C samples (samples/conv_relu_fc.c, samples/context_binary.c) with their Makefile
and runs them on our backend and on the vendor's.

conv_relu_fc is a plain C11 QNN application; it exits non-zero on any QNN error, on a numeric
mismatch with its C reference, or when the backend accepts an unfinalized execute or an
unknown op type, and prints ``max relative error: <value>``.

context_binary is the issue-4 round trip (QnnContext_getBinary, the System library's
QnnSystemContext_getBinaryInfo, QnnContext_validateBinary, QnnContext_createFromBinary,
QnnGraph_retrieve): it saves a two-graph context, frees everything, lists the binary's graphs and
tensors, loads it back and compares the outputs bit for bit, then feeds damaged copies.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from vendor import our_library, vendor_dir

import qnnemu
from qnnemu.headers import Q

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
pytestmark = [
    pytest.mark.skipif(not (SAMPLES / "Makefile").is_file(), reason="samples/ not in this tree"),
    pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None,
                       reason="make and a C compiler are needed"),
]
ERROR_RE = re.compile(r"max relative error: (\S+) \(tolerance (\S+)\)")


def make(target: str, build: Path, python: str = sys.executable) -> subprocess.CompletedProcess:
    # The Makefile asks Python for the header and library paths: use this interpreter, able
    # to import the qnnemu being tested (installed or from the source tree).
    env = dict(os.environ)
    pkg_parent = str(Path(qnnemu.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH", "")) if p)
    return subprocess.run(["make", "-C", str(SAMPLES), target, f"PYTHON={python}",
                           f"BUILD={build}"], env=env, capture_output=True, text=True,
                          timeout=600)


def program_lines(stdout: str) -> list[str]:
    """stdout without make's own lines ("make: Entering directory ...", since -C implies -w)."""
    return [line for line in stdout.rstrip().splitlines() if not line.startswith("make")]


def describe(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"


def test_sample_builds_warning_free(tmp_path):
    proc = make("all", tmp_path)
    assert proc.returncode == 0, f"samples compile with -std=c11 -Wall -Wextra -Werror: {describe(proc)}"
    assert (tmp_path / "conv_relu_fc").is_file(), "make all produced build/conv_relu_fc"
    assert (tmp_path / "context_binary").is_file(), "make all produced build/context_binary"
    # -Werror turns any warning into a failure above; also make sure none slipped into the log.
    assert "warning:" not in proc.stderr, f"no compiler warnings: {describe(proc)}"


def check_run(proc, expected_runs: list[float]):
    assert proc.returncode == 0, f"sample run exits 0: {describe(proc)}"
    found = ERROR_RE.findall(proc.stdout)
    assert len(found) == len(expected_runs), \
        f"one 'max relative error' line per run ({len(expected_runs)}): {describe(proc)}"
    for (err, _), tol in zip(found, expected_runs):
        assert float(err) <= tol, f"sample's max relative error {err} <= {tol}"
    assert "ACCEPTED" not in proc.stdout, "the backend refused execute-before-finalize and NoSuchOp"
    assert proc.stdout.count("refused") >= 2, "the sample printed the backend's refusals"


def test_sample_on_our_backend(tmp_path):
    if our_library() is None:
        pytest.skip("our libQnnHtpEmu.so is not built (qnnemu.backend_library_path())")
    proc = make("run-conv", tmp_path)
    check_run(proc, [1e-4])
    logged = [line for line in proc.stderr.splitlines() if not line.startswith("make")]
    assert any(line.startswith("[qnn ERROR] ") for line in logged), f"the refusals were logged: {describe(proc)}"
    assert all(line.strip() for line in logged), f"the log callback prints no blank lines: {describe(proc)}"


def test_sample_on_vendor_backend(tmp_path):
    if vendor_dir() is None:
        pytest.skip("onnxruntime_qnn (vendor libQnnHtp.so) not installed")
    # run-vendor runs the sample twice: float32 (tolerance 1e-4), then HTP fp16 (1e-2).
    check_run(make("run-vendor", tmp_path), [1e-4, 1e-2])


# --- context_binary.c -----------------------------------------------------------------------

GRAPHS = {"conv_relu_fc": {"inputs": {"x": [1, 6, 6, 3]}, "outputs": {"y": [1, 8]}},
          "mul_add_relu": {"inputs": {"a": [1, 4, 4, 2], "b": [1, 4, 4, 2]}, "outputs": {"z": [1, 4, 4, 2]}}}
GRAPH_RE = re.compile(r'^  graph (\d+): "([^"]*)" \(graph info v([123])\), (\d+) inputs, (\d+) outputs$', re.M)
TENSOR_RE = re.compile(r'^      (input |output) "([^"]*)" id (\d+), tensor v([12]), (\S+), (\S+), dims \[([^\]]*)\], '
                       r'quant (.*)$', re.M)
BINARY_RE = re.compile(r"^binary: (\d+) bytes \(size query said (\d+)\) -> (.*)$", re.M)


def listing(stdout: str) -> dict[str, dict[str, dict[str, tuple]]]:
    """The sample's System-library listing: {graph: {"inputs"|"outputs": {tensor: (id, dtype, dims)}}},
    each graph's tensors being the lines between its header and the next graph header."""
    graphs = {}
    headers = list(GRAPH_RE.finditer(stdout))
    for i, h in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else stdout.find("== 4.", h.end())
        body = stdout[h.end():end]
        entry = {"inputs": {}, "outputs": {}}
        for t in TENSOR_RE.finditer(body):
            role = "inputs" if t.group(1).strip() == "input" else "outputs"
            dims = [int(d) for d in t.group(7).split(",") if d.strip()]
            entry[role][t.group(2)] = (int(t.group(3)), t.group(6), dims)
        assert len(entry["inputs"]) == int(h.group(4)) and len(entry["outputs"]) == int(h.group(5)), \
            f"graph {h.group(2)} prints one line per input and output it announces: {body}"
        graphs[h.group(2)] = entry
    return graphs


def check_context_run(proc: subprocess.CompletedProcess, build: Path, binary_name: str,
                      corrupted_must_be_refused: bool) -> str:
    out = proc.stdout
    assert proc.returncode == 0, f"context_binary exits 0: {describe(proc)}"
    assert program_lines(out)[-1] == "PASSED", f"context_binary's last line is PASSED: {describe(proc)}"
    assert "FAILED" not in out, f"no FAILED line: {describe(proc)}"

    sizes = BINARY_RE.search(out)
    assert sizes, f"the sample printed the binary's size: {describe(proc)}"
    saved = build / binary_name
    assert saved.is_file() and saved.stat().st_size == int(sizes.group(1)), \
        f"{saved} holds the {sizes.group(1)} bytes contextGetBinary wrote"
    assert "freed context, device, backend and log" in out, "the first session was freed before loading"

    graphs = listing(out)
    assert set(graphs) == set(GRAPHS), f"the System library lists both graphs, got {sorted(graphs)}: {describe(proc)}"
    for name, expected in GRAPHS.items():
        for role in ("inputs", "outputs"):
            got = graphs[name][role]
            assert set(got) == set(expected[role]), f"{name} {role}: {sorted(got)} vs {sorted(expected[role])}"
            for tensor, dims in expected[role].items():
                _, dtype, got_dims = got[tensor]
                assert (dtype, got_dims) == ("FLOAT_32", dims), \
                    f"{name}.{tensor} listed as FLOAT_32 {dims}, got {dtype} {got_dims}"
    ids = [t[0] for g in graphs.values() for r in g.values() for t in r.values()]
    assert len(set(ids)) == len(ids), f"tensor ids are distinct within the context: {ids}"

    for name in GRAPHS:
        assert f"executed loaded graph {name}" in out, f"{name} was retrieved and executed: {describe(proc)}"
        assert re.search(rf"^{name}: \d+ outputs, built vs loaded: bit-identical", out, re.M), \
            f"{name}: outputs after reload are bit-identical: {describe(proc)}"
    assert re.search(r"^truncated binary .*contextCreateFromBinary refused it: error [1-9]\d*", out, re.M), \
        f"the truncated copy is refused with an error code: {describe(proc)}"
    corrupted = re.search(r"^corrupted binary .*contextCreateFromBinary (refused|ACCEPTED)", out, re.M)
    assert corrupted, f"the flipped-byte copy was fed to contextCreateFromBinary: {describe(proc)}"
    if corrupted_must_be_refused:
        assert corrupted.group(1) == "refused", f"the flipped-byte copy is refused: {describe(proc)}"
        assert not re.search(r"contextValidateBinary ACCEPTED", out), \
            f"contextValidateBinary refuses both damaged copies: {describe(proc)}"
    return out


def test_context_sample_on_our_backend(tmp_path):
    if our_library() is None:
        pytest.skip("our libQnnHtpEmu.so is not built (qnnemu.backend_library_path())")
    out = check_context_run(make("run-context", tmp_path), tmp_path, "context_ours.bin",
                            corrupted_must_be_refused=True)
    # Our format (docs/context-binary.md) starts with its magic; our validator accepts the intact binary.
    assert (tmp_path / "context_ours.bin").read_bytes()[:8] == b"QNNEMUCB", "the saved binary is ours"
    assert re.search(r"^intact binary: contextValidateBinary: 0 \(valid\)", out, re.M), \
        f"our contextValidateBinary accepts the intact binary: {out[-2000:]}"
    check_readme_excerpt(out)


def check_readme_excerpt(out: str) -> None:
    """samples/README.md's "Output on our backend" shows what the sample prints: each of its
    lines (``...`` standing for left-out text) matches a line of ``out``, in order. Only the
    build id's version digits are free."""
    readme = (SAMPLES / "README.md").read_text()
    block = readme[readme.index("Output on our backend"):readme.index("What the vendor's backend")]
    shown = [line[4:] for line in block.splitlines() if line.startswith("    ")]
    assert shown, "the README shows the output"

    def norm(text: str) -> str:
        return re.sub(r"build id v2\.50\.0\.\d+", "build id v2.50.0.N", text)

    printed = [norm(line) for line in out.splitlines()]
    pos = 0
    for line in shown:
        if line == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in norm(line).split("...")) + "$")
        while pos < len(printed) and not pattern.match(printed[pos]):
            pos += 1
        assert pos < len(printed), f"samples/README.md's line {line!r} is printed (in this order): {out[-3000:]}"
        pos += 1


def test_context_sample_on_vendor_backend(tmp_path):
    if vendor_dir() is None or not (vendor_dir() / "libQnnSystem.so").is_file():
        pytest.skip("onnxruntime_qnn (vendor libQnnHtp.so + libQnnSystem.so) not installed")
    # The vendor's loader does not checksum weight data: run-context-vendor passes data_unchecked,
    # so a loaded flipped-byte copy is reported rather than failed (samples/README.md).
    check_context_run(make("run-context-vendor", tmp_path), tmp_path, "context_vendor.bin",
                      corrupted_must_be_refused=False)


def test_make_run_runs_both_samples(tmp_path):
    """The README's main command: both samples on our backend, output ending in PASSED."""
    if our_library() is None:
        pytest.skip("our libQnnHtpEmu.so is not built (qnnemu.backend_library_path())")
    proc = make("run", tmp_path)
    assert proc.returncode == 0, f"make run exits 0: {describe(proc)}"
    assert len(ERROR_RE.findall(proc.stdout)) == 1, f"make run ran conv_relu_fc: {describe(proc)}"
    assert set(listing(proc.stdout)) == set(GRAPHS), f"make run ran context_binary: {describe(proc)}"
    lines = program_lines(proc.stdout)
    assert lines.count("PASSED") == 2 and lines[-1] == "PASSED", \
        f"each sample printed PASSED and the output ends with it: {describe(proc)}"


# --- what the app sees when a library refuses to start ----------------------------------------

@pytest.fixture(scope="module")
def built_samples(tmp_path_factory) -> Path:
    if our_library() is None:
        pytest.skip("our libQnnHtpEmu.so is not built (qnnemu.backend_library_path())")
    build = tmp_path_factory.mktemp("samples")
    proc = make("all", build)
    assert proc.returncode == 0, f"samples build: {describe(proc)}"
    return build


def run_sample(program: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    pkg_parent = str(Path(qnnemu.__file__).resolve().parent.parent)
    full["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, full.get("PYTHONPATH", "")) if p)
    full.update(env)
    return subprocess.run([str(program), *args], env=full, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("variable, value, library, rule", [
    ("QNNEMU_CORE_API_VERSION", "foo", "libQnnHtpEmu.so", "QNNEMU-env-core-api"),
    ("QNNEMU_CORE_API_VERSION", "2.31", "libQnnHtpEmu.so", "QNNEMU-env-core-api"),
    ("QNNEMU_SYSTEM_API_VERSION", "foo", "libQnnSystem.so", "QNNEMU-env-system-api"),
])
def test_version_negotiation_failure_says_why_on_stderr(built_samples, tmp_path, variable, value, library, rule):
    """A bad QNNEMU_CORE_API_VERSION / QNNEMU_SYSTEM_API_VERSION fails getProviders with
    QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES; no logger exists yet, so the library says why in one
    "qnnemu: <library>: <why>" line on stderr, the loader's convention (docs/loading.md)."""
    if library == "libQnnSystem.so":  # context_binary reaches the System library after the backend
        proc = run_sample(built_samples / "context_binary", qnnemu.backend_library_path(),
                          qnnemu.system_library_path(), str(tmp_path / "ctx.bin"), **{variable: value})
        getter = "QnnSystemInterface_getProviders"
    else:
        proc = run_sample(built_samples / "conv_relu_fc", **{variable: value})
        getter = "QnnInterface_getProviders"
    assert proc.returncode != 0, f"{variable}={value}: the sample fails: {describe(proc)}"
    ours = [line for line in proc.stderr.splitlines() if line.startswith("qnnemu: ")]
    assert len(ours) == 1 and ours[0].startswith(f"qnnemu: {library}: [{rule}] {variable}='{value}'"), \
        f"one 'qnnemu: {library}: [{rule}] {variable}=...' line on stderr: {describe(proc)}"
    assert f"{getter} failed with error {Q.QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES}" in proc.stderr, \
        f"the app saw QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES: {describe(proc)}"
    assert "qnnemu:" not in proc.stdout, f"nothing from the library on stdout: {describe(proc)}"


def test_makefile_names_the_python_that_cannot_import_qnnemu(tmp_path):
    """`make -C samples` asks $(PYTHON) for the paths: when it cannot import qnnemu (the
    system's python3 outside the venv), make stops with that reason and the PYTHON= hint."""
    for python, why in ((f"{sys.executable} -I -S", "No module named 'qnnemu'"),
                        ("/nonexistent/python3", "not found")):
        proc = make("all", tmp_path, python=python)
        assert proc.returncode != 0, f"PYTHON={python}: make fails: {describe(proc)}"
        assert f"{python} cannot import qnnemu (" in proc.stderr and why in proc.stderr \
            and "PYTHON=.venv/bin/python" in proc.stderr, f"the reason and the PYTHON= hint: {describe(proc)}"
        assert "QNN headers not found" not in proc.stderr, f"no confusing follow-up error: {describe(proc)}"


def test_makefile_takes_python_relative_to_the_clone(tmp_path):
    """README.md runs `make -C samples run PYTHON=.venv/bin/python` from the clone's root: a
    relative PYTHON not found from samples/ is taken from the clone's root."""
    if our_library() is None:
        pytest.skip("our libQnnHtpEmu.so is not built (qnnemu.backend_library_path())")
    relative = os.path.relpath(sys.executable, SAMPLES.parent)
    assert not (SAMPLES / relative).exists(), "the path means something else from samples/"
    check_run(make("run-conv", tmp_path, python=relative), [1e-4])
