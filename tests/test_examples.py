"""examples/ and the README's commands, run exactly as written (issue 11, item 7 "Tools and
README").

The shell commands are parsed from the ```sh blocks of examples/README.md (and of README.md's
"Tools" section) and run literally with bash in a temporary directory holding a copy of
examples/, with the console scripts and the ``python`` of the interpreter running the tests
first on PATH (what an active venv does). Checked: every command succeeds and prints what the
README shows; the outputs of net-run (the prepared context binary), of apply_adapter.py (the
adapter's binary section applied) and of the profiled run match this file's own numpy
reference; the optrace flow gives a chrometrace and an HTML report; the vendor's backend
(``--backend htp``, only when onnxruntime-qnn is installed) computes the same. Also: the data
files are what examples/make_data.py writes, and .ci/run runs README.md's test command.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from vendor import our_library, vendor_library

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
README = ROOT / "README.md"
VENDOR_FLAG = "--backend htp"

if our_library() is None:
    pytest.skip("our libQnnHtpEmu.so is not built (qnnemu.backend_library_path())", allow_module_level=True)


# ---------------------------------------------------------------------------------- parsing
def fenced_blocks(text: str, language: str) -> list[list[str]]:
    """The lines of every ```<language> block of a Markdown text."""
    return [block.splitlines() for block in
            re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.M | re.S)]


def commands(text: str) -> list[list[str]]:
    """Per ```sh block, its commands (lines that are not empty or comments)."""
    return [[line.strip() for line in block if line.strip() and not line.lstrip().startswith("#")]
            for block in fenced_blocks(text, "sh")]


def section(text: str, title: str) -> str:
    """A ``## <title>`` section of a Markdown text, up to the next ``## ``."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"README has a '## {title}' section"
    return match.group(1)


# ---------------------------------------------------------------------------------- running
def shell_env() -> dict[str, str]:
    """PATH with this interpreter's directory first: `python` and the console scripts are the
    ones installed with the qnnemu under test, as in an active venv."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_commands(lines: list[str], cwd: Path) -> list[subprocess.CompletedProcess]:
    done = []
    for line in lines:
        proc = subprocess.run(["bash", "-c", line], cwd=cwd, env=shell_env(), capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, (f"`{line}` succeeds (exit {proc.returncode})\nstdout: "
                                      f"{proc.stdout[-2000:]}\nstderr: {proc.stderr[-3000:]}")
        done.append(proc)
    return done


def copy_examples(dest: Path) -> Path:
    shutil.copytree(EXAMPLES, dest / "examples", ignore=shutil.ignore_patterns("out", "__pycache__"))
    return dest


@pytest.fixture(scope="module")
def scripts_on_path():
    missing = [s for s in ("qnnemu-net-run", "qnnemu-context-binary-generator",
                           "qnnemu-context-binary-utility", "qnnemu-profile-viewer", "qnnemu-sdk-root")
               if shutil.which(s, path=shell_env()["PATH"]) is None]
    if missing:
        pytest.skip(f"console scripts {missing} are not installed next to {sys.executable} "
                    f"or on PATH (pip install -e .)")


@pytest.fixture(scope="module")
def example_run(tmp_path_factory, scripts_on_path):
    """examples/README.md's first command block, run in a copy: (work dir, processes)."""
    blocks = commands((EXAMPLES / "README.md").read_text())
    assert len(blocks) == 2, "examples/README.md has two command blocks (ours, the vendor's)"
    assert not any(VENDOR_FLAG in line for line in blocks[0]), "the first block runs on qnnemu only"
    work = copy_examples(tmp_path_factory.mktemp("examples"))
    return work, run_commands(blocks[0], work)


# ------------------------------------------------------------------------------- reference
def f32(path: Path, shape) -> np.ndarray:
    return np.fromfile(path, "<f4").reshape(shape)


def reference(x: np.ndarray, lora_a: np.ndarray, lora_b: np.ndarray) -> np.ndarray:
    """y = Relu(x @ W^T + b + (x @ A) @ B) in float64, W and b of examples/mlp.json."""
    doc = json.loads((EXAMPLES / "mlp.json").read_text())
    tensors = {t["name"]: t for t in doc["graphs"][0]["tensors"]}
    w = f32(EXAMPLES / tensors["fc_weight"]["data"], (16, 32)).astype(np.float64)
    b = np.array(tensors["fc_bias"]["data"], np.float64)
    x = x.astype(np.float64)
    return np.maximum(x @ w.T + b + (x @ lora_a.astype(np.float64)) @ lora_b.astype(np.float64), 0)


INPUTS = [f32(EXAMPLES / f"input_{n}.raw", (1, 32)) for n in range(2)]
BASE = (f32(EXAMPLES / "lora_a.raw", (32, 4)), f32(EXAMPLES / "lora_b.raw", (4, 16)))
ADAPTER = (f32(EXAMPLES / "adapter/lora_a.raw", (32, 4)), f32(EXAMPLES / "adapter/lora_b.raw", (4, 16)))


def check_results(result_root: Path, factors, what: str) -> list[np.ndarray]:
    outputs = []
    for n, x in enumerate(INPUTS):
        path = result_root / f"Result_{n}" / "y.raw"
        assert path.is_file(), f"{what}: inference {n} wrote {path}"
        got = f32(path, (1, 16))
        want = reference(x, *factors)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5,
                                   err_msg=f"{what}: inference {n} matches numpy")
        outputs.append(got)
    return outputs


# ---------------------------------------------------------------------------------- tests
def test_example_commands_print_what_the_readme_shows(example_run):
    """One summary line per command on stdout, in the README's order ('...' matches any text),
    and nothing on stderr (our libraries never write there; the tools only on problems)."""
    _, procs = example_run
    printed = "".join(p.stdout for p in procs).splitlines()
    shown = fenced_blocks((EXAMPLES / "README.md").read_text(), "text")
    assert len(shown) == 1 and shown[0], "examples/README.md shows what the commands print"
    pos = 0
    for line in shown[0]:
        pattern = re.compile(".*".join(re.escape(part) for part in line.split("...")) + "$")
        while pos < len(printed) and not pattern.match(printed[pos]):
            pos += 1
        assert pos < len(printed), f"examples/README.md's line {line!r} is printed (in order): {printed}"
        pos += 1
    for proc in procs:
        assert proc.stderr == "", f"`{proc.args[-1]}` writes nothing on stderr: {proc.stderr[-2000:]}"


def test_example_outputs_match_numpy(example_run):
    """net-run on the binary computes the description (LoRA branch zero), apply_adapter.py the
    adapter's weights; the profiled run is bit-identical to the plain one."""
    work, _ = example_run
    out = work / "examples" / "out"
    base = check_results(out / "base", BASE, "net-run --retrieve_context")
    lora = check_results(out / "lora", ADAPTER, "apply_adapter.py (adapter applied)")
    assert all(np.abs(b - a).max() > 0.1 for b, a in zip(base, lora)), \
        "the adapter changes every inference's output (its LoRA branch is not zero)"
    profiled = check_results(out / "profiled", BASE, "net-run --profiling_option optrace")
    assert all(np.array_equal(p, b) for p, b in zip(profiled, base)), "profiling does not change outputs"


def test_example_binary_sections_and_info(example_run):
    """The generator wrote the binary, the description's section and the adapter's; the
    utility's JSON describes graph mlp."""
    work, _ = example_run
    out = work / "examples" / "out"
    sections = {p.name: p.read_bytes() for p in out.glob("*.section.bin")}
    assert set(sections) == {"mlp.mlp.section.bin", "mlp.mlp.lora.section.bin"}, \
        f"one section with the description's values, one with the adapter's: {sorted(sections)}"
    assert sections["mlp.mlp.section.bin"] != sections["mlp.mlp.lora.section.bin"], \
        "the adapter's section differs from the description's"
    info = json.loads((out / "mlp.info.json").read_text())
    text = json.dumps(info)
    assert '"mlp"' in text and '"x"' in text and '"y"' in text, \
        f"the utility's JSON names graph mlp and its tensors x, y: {text[:500]}"


def test_example_optrace_flow(example_run):
    """net-run --profiling_level detailed --profiling_option optrace -> qnnemu-profile-viewer:
    a chrometrace with events and an HTML report."""
    work, _ = example_run
    out = work / "examples" / "out"
    log = json.loads((out / "profiled" / "qnn-profiling-data.json").read_text())
    assert log["optrace"] is True and log["profiling_level"] == "detailed", \
        f"the profiling log records the optrace option: { {k: log[k] for k in ('optrace', 'profiling_level')} }"
    trace = json.loads((out / "trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert len(events) > 0, "the chrometrace has events"
    assert "<html" in (out / "report.html").read_text().lower(), "the QHAS report is HTML"


@pytest.mark.skipif(vendor_library() is None, reason="onnxruntime_qnn (vendor libQnnHtp.so) not installed")
def test_example_on_the_vendor_backend(example_run):
    """examples/README.md's vendor block (after the first, as the README has it): --backend htp
    prepares and runs the description on the vendor's libQnnHtp.so; its outputs match numpy,
    and check_outputs.py checks them."""
    blocks = commands((EXAMPLES / "README.md").read_text())
    assert all(VENDOR_FLAG in line or "check_outputs.py" in line for line in blocks[1]), \
        f"the second block is the vendor's: {blocks[1]}"
    work, _ = example_run
    procs = run_commands(blocks[1], work)
    check_results(work / "examples" / "out" / "vendor", BASE, "net-run --backend htp")
    assert "vendor: 2 inferences" in procs[-1].stdout, f"check_outputs.py checked the vendor's run: {procs[-1].stdout}"


def test_readme_tools_commands_run(tmp_path, scripts_on_path):
    """README.md's "Tools" command block, literally (the --backend htp line only with the
    vendor's library installed): each command succeeds and names what it wrote."""
    blocks = commands(section(README.read_text(), "Tools"))
    assert len(blocks) == 1, "README.md's Tools section has one command block"
    lines = blocks[0]
    scripts = {line.split()[0] for line in lines}
    assert scripts == {"qnnemu-context-binary-generator", "qnnemu-context-binary-utility", "qnnemu-net-run",
                       "qnnemu-profile-viewer", "qnnemu-sdk-root"}, \
        f"the block shows all five console scripts: {scripts}"
    if vendor_library() is None:
        lines = [line for line in lines if VENDOR_FLAG not in line]
    work = copy_examples(tmp_path)
    procs = run_commands(lines, work)
    for line, proc in zip(lines, procs):
        # (the vendor's library writes a line of its own on stdout too)
        summaries = [text for text in proc.stdout.splitlines() if text.startswith(line.split()[0] + ": ")]
        assert len(summaries) == 1, f"`{line}` prints one summary line: {proc.stdout}"


def test_readme_names_six_console_scripts():
    """README.md's Tools section counts the console scripts pyproject.toml declares."""
    scripts = re.findall(r"^(qnnemu-[a-z-]+) = ", (ROOT / "pyproject.toml").read_text(), flags=re.M)
    assert len(scripts) == 6, f"pyproject.toml declares six console scripts: {scripts}"
    tools = section(README.read_text(), "Tools")
    assert "Six console scripts" in tools, "README.md says six console scripts"
    for script in scripts:
        assert f"`{script}" in tools, f"README.md's Tools section describes {script}"
    assert "$VENDOR" not in README.read_text(), "README.md uses no undefined $VENDOR"


def test_ci_runs_the_readme_test_command():
    """.ci/run's last line is README.md's test command, character for character; the set-up
    commands name the venv's python and the venv is git-ignored."""
    setup = section(README.read_text(), "Set-up commands (fresh clone)")
    shown = [line.strip() for line in setup.splitlines() if line.startswith("    ")]
    assert len(shown) == 2, f"README.md shows two set-up commands: {shown}"
    main_command, test_command = shown
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert ci[-1] == test_command, f".ci/run runs README.md's test command: {ci[-1]!r} vs {test_command!r}"
    for command in shown:
        assert command.startswith("python3 -m venv .venv && .venv/bin/python -m pip install -e \".[test]\" && "), \
            f"the command makes a venv and installs with the venv's python: {command}"
        assert "pip install" not in command.split("&&")[0] and " python3 -m pip" not in command, \
            f"pip never runs with the system's python3: {command}"
    assert main_command.endswith("make -C samples run PYTHON=.venv/bin/python"), main_command
    assert test_command.endswith(".venv/bin/python -m pytest -q"), test_command
    assert ".venv/" in (ROOT / ".gitignore").read_text().split(), ".gitignore ignores .venv/"


def test_example_data_is_what_make_data_writes():
    """The committed .raw files and input list are examples/make_data.py's output."""
    spec = importlib.util.spec_from_file_location("examples_make_data", EXAMPLES / "make_data.py")
    make_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_data)
    for name, array in make_data.data().items():
        assert (EXAMPLES / name).read_bytes() == array.astype("<f4").tobytes(), \
            f"examples/{name} is what make_data.py writes"
    assert (EXAMPLES / "input_list.txt").read_text() == make_data.INPUT_LIST, "input_list.txt too"
