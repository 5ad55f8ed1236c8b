"""Packaging of the backend (QnnInterface.h QnnInterface_getProviders from installed artifacts):
a wheel that works on any machine, a complete sdist, no stale builds.

- The wheel and the sdist are built once (``python -m build`` from a copy of the tree, as a fresh
  clone holds it; ``pip wheel`` when the ``build`` package is absent, and then the sdist test
  skips).  The wheel holds no path of the build machine and no RUNPATH; its libraries need
  nothing but libc.
- The wheel is installed into venvs made by two different Python builds of one X.Y (the one
  running the tests, and the distribution's /usr/bin/pythonX.Y when it is another build), one
  venv is moved to a new path, and from each a C sample (``make -C samples run-conv`` with the
  venv's python), the ONNX Runtime helper (``qnnemu.onnxruntime``: numpy in and out, and rpcmem
  shared memory) and a renamed copy of the backend (found through ``VIRTUAL_ENV``) run.
- ``pip install <sdist>`` from a directory outside the clone installs a working backend.
- A version bump in a clone whose ``build/`` holds the previous build: the non-editable reinstall
  rebuilds the libraries (the generated headers are in their dependencies), and a library of the
  old version next to the new package says why it refuses to load.

pip downloads go to a cache in the test's temporary directory (shared by the installs).  The
ONNX Runtime packages (hundreds of MB) are not reinstalled: each venv gets a ``.pth`` naming the
test interpreter's site directory that holds them, after its own site-packages.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from qnnemu.headers import Q

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
PY_XY = f"{sys.version_info.major}.{sys.version_info.minor}"
LIB_NAMES = ("libQnnHtpEmu.so", "libQnnSystem.so", "libcdsprpc.so", "_qnnemu_htp_abi.so", "_qnnemu_system_abi.so")

pytestmark = [
    pytest.mark.skipif(not (ROOT / "setup.py").is_file() or not (ROOT / "csrc").is_dir(),
                       reason="needs the source tree (setup.py, csrc/)"),
    pytest.mark.skipif(any(shutil.which(t) is None for t in ("cc", "make", "readelf", "strings")),
                       reason="needs a C compiler, make and binutils"),
]


# ------------------------------------------------------------------------------------ helpers
def clean_env(**extra: str) -> dict[str, str]:
    """No Python hint of the test run (PYTHONPATH would import the tree under test)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("QNNEMU_")}
    env.update(extra)
    return env


def tool_env(**extra: str) -> dict[str, str]:
    """For the test interpreter's own tools (build, pip): clean, but PYTHONPATH entries that do
    not hold a qnnemu package stay (where such tools may be installed)."""
    keep = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and not (Path(p) / "qnnemu").is_dir()]
    return clean_env(**({"PYTHONPATH": os.pathsep.join(keep)} if keep else {}), **extra)


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", clean_env())
    kwargs.setdefault("cwd", "/")  # `python -c` puts the working directory first on sys.path
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900, **kwargs)


def describe(proc: subprocess.CompletedProcess) -> str:
    return (f"$ {' '.join(map(str, proc.args))}\nexit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
            f"\n--- stderr\n{proc.stderr[-3000:]}")


def copy_tree(dest: Path) -> Path:
    """The tree as a fresh clone holds it: tracked and new files (git), else the sources without
    build outputs."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                                "--exclude-standard"], capture_output=True, check=True).stdout.split(b"\0")
        for name in filter(None, (os.fsdecode(f) for f in files)):
            src = ROOT / name
            if src.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)
    else:
        shutil.copytree(ROOT, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            "build", "dist", "*.so", "__pycache__", "*.egg-info", ".hypothesis", ".pytest_cache",
            "inplace-python.txt"))
    return dest


def has_build_module() -> bool:
    return run([sys.executable, "-c", "import build"], env=tool_env()).returncode == 0


def make_venv(python: str, path: Path) -> Path:
    proc = run([python, "-m", "venv", "--without-pip", path])
    assert proc.returncode == 0, f"venv with {python}: {describe(proc)}"
    return path / "bin" / "python"


def pip_install(venv_python: Path, *args, cache: Path) -> None:
    """The test interpreter's pip installs into the venv (--python: no pip inside the venv)."""
    proc = run([sys.executable, "-m", "pip", "--python", venv_python, "install", "--disable-pip-version-check",
                "--cache-dir", cache, *args])
    assert proc.returncode == 0, f"pip install {args}: {describe(proc)}"


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{PY_XY}" / "site-packages"


def borrow_onnxruntime(venv: Path) -> bool:
    """Adds the test interpreter's directories holding onnxruntime, onnxruntime_qnn and onnx to
    the venv (after its own site-packages); False when they are not installed."""
    try:
        import onnx
        import onnxruntime
        import onnxruntime_qnn
    except ImportError:
        return False
    dirs = dict.fromkeys(str(Path(m.__file__).resolve().parent.parent) for m in (onnxruntime_qnn, onnxruntime, onnx))
    (site_packages(venv) / "zz_test_borrowed_onnxruntime.pth").write_text("\n".join(dirs) + "\n")
    return True


def pip_supports_python_option() -> bool:
    out = run([sys.executable, "-m", "pip", "--version"], env=tool_env()).stdout
    m = re.match(r"pip (\d+)\.(\d+)", out)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (22, 3)


def interpreter_identity(python: str) -> str | None:
    proc = run([python, "-c", "import sys, venv; print(sys.version.split()[0], sys.base_prefix)"])
    return proc.stdout.strip() if proc.returncode == 0 else None


def other_python_build() -> str | None:
    """/usr/bin/pythonX.Y when it is a different build of this X.Y (with the venv module)."""
    candidate = f"/usr/bin/python{PY_XY}"
    if not os.access(candidate, os.X_OK):
        return None
    ours = interpreter_identity(sys.executable)
    theirs = interpreter_identity(candidate)
    return candidate if theirs and theirs != ours else None


# ---------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    if not pip_supports_python_option():
        pytest.skip("needs pip >= 22.3 (pip --python)")
    return tmp_path_factory.mktemp("packaging")


@pytest.fixture(scope="module")
def cache(work) -> Path:
    return work / "pip-cache"


@pytest.fixture(scope="module")
def dist(work, cache) -> dict:
    """sdist and wheel, built once from a copy of the tree."""
    src = copy_tree(work / "clone")
    out = work / "dist"
    if has_build_module():
        proc = run([sys.executable, "-m", "build", "--outdir", out, src], cwd=work,
                   env=tool_env(PIP_CACHE_DIR=str(cache)))
        assert proc.returncode == 0, f"python -m build makes sdist and wheel: {describe(proc)}"
    else:
        proc = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--cache-dir", cache, "-w", out, src],
                   cwd=work)
        assert proc.returncode == 0, f"pip wheel: {describe(proc)}"
    wheels = sorted(out.glob("qnnemu-*.whl"))
    sdists = sorted(out.glob("qnnemu-*.tar.gz"))
    assert len(wheels) == 1, f"one wheel: {wheels}"
    return {"wheel": wheels[0], "sdist": sdists[0] if sdists else None, "src": src}


# ------------------------------------------------------------------------------------- wheel
def test_wheel_holds_no_path_of_the_build(dist, work):
    wheel = dist["wheel"]
    assert re.fullmatch(rf"qnnemu-[\w.]+-cp{sys.version_info.major}{sys.version_info.minor}-"
                        rf"cp{sys.version_info.major}{sys.version_info.minor}-linux_x86_64\.whl", wheel.name), \
        f"a CPython {PY_XY} x86-64 Linux wheel: {wheel.name}"
    unpacked = work / "wheel-contents"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(unpacked)
    for lib in LIB_NAMES:
        assert f"qnnemu/lib/{lib}" in names, f"the wheel carries qnnemu/lib/{lib}"
    assert "qnnemu/include/QNN/QnnInterface.h" in names, "the wheel carries the QNN headers"
    assert not any(n.endswith("inplace-python.txt") for n in names), "no in-tree interpreter record in a wheel"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "qnnemu-sdk-root = qnnemu.tools.sdk_root:main" in (unpacked / entry_points).read_text(), \
        "the qnnemu-sdk-root console script is declared"
    # Where the build happened (the copy, its build env under the temp dir) and this interpreter.
    machine = {str(dist["src"]), str(work), sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"],
               sysconfig.get_paths()["include"], str(sysconfig.get_config_var("LIBDIR"))}
    machine = {p for p in machine if p.count("/") >= 2}
    build_env = re.compile(r"/(?:tmp|var/tmp)/[^\s\0]*(?:build-env|pip-|build-via-sdist)[^\s\0]*")
    for f in sorted(unpacked.rglob("*")):
        if not f.is_file() or f.suffix in (".h", ".py", ".md", ".txt") or f.name in ("METADATA", "RECORD", "WHEEL"):
            continue
        text = run(["strings", "-n", "4", f]).stdout
        baked = sorted(p for p in machine if p in text) + build_env.findall(text)
        assert not baked, f"{f.relative_to(unpacked)}: no path of the build machine: {baked}"
        if f.suffix == ".so":
            dyn = run(["readelf", "-d", f]).stdout
            runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", dyn)
            assert runpath in ([], ["$ORIGIN"]), f"{f.name}: RUNPATH is $ORIGIN at most: {runpath}"
            needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", dyn))
            assert not any(n.startswith(("libpython", "libcdsprpc")) for n in needed), \
                f"{f.name}: no DT_NEEDED on libpython or libcdsprpc: {needed}"


ORT_SCRIPT = r"""
import sys
import numpy as np
from onnx import TensorProto, helper
import qnnemu, qnnemu.onnxruntime as qort
graph = helper.make_graph(
    [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
sess = qort.session(model, provider_options={"enable_htp_shared_memory_allocator": "1"})
x = np.linspace(-1, 1, 8, dtype=np.float32)[None]
y = sess.run(None, {"x": x})[0]
z = qort.run_shared(sess, {"x": x})[0]
print("backend", qnnemu.backend_library_path())
print("python", sys.version.split()[0], sys.prefix)
print("close", bool(np.allclose(y, np.maximum(x, 0) + x, atol=1e-2)), "shared-equal", bool(np.array_equal(y, z)))
"""

@pytest.fixture(scope="module", params=["test-python", "system-python"],
                ids=["test-python", "system-python-moved-venv"])
def installed(request, dist, work, cache) -> dict:
    """A venv of each Python build with the wheel installed (the second one then moved)."""
    build = request.param
    python = sys.executable if build == "test-python" else other_python_build()
    if python is None:
        pytest.skip(f"no second Python {PY_XY} build (/usr/bin/python{PY_XY}) with the venv module")
    venv = work / f"venv-{build}"
    make_venv(python, venv)
    pip_install(venv / "bin" / "python", dist["wheel"], cache=cache)
    if build == "system-python":
        moved = work / "moved" / f"venv-{build}"
        moved.parent.mkdir()
        venv.rename(moved)
        venv = moved
    vpython = venv / "bin" / "python"
    backend = site_packages(venv) / "qnnemu" / "lib" / "libQnnHtpEmu.so"
    ident = run([vpython, "-c", "import sys, qnnemu; print(sys.prefix, qnnemu.backend_library_path())"])
    assert ident.returncode == 0 and ident.stdout.split() == [str(venv), str(backend)], \
        f"the venv imports its own qnnemu: {describe(ident)}"
    return {"build": build, "venv": venv, "python": vpython, "backend": backend,
            "sample_build": work / f"sample-{build}"}


@pytest.mark.slow
def test_c_sample_from_each_venv(installed):
    """conv_relu_fc, built and run by the Makefile with the venv's python, on the venv's backend:
    a C app with no Python hint in its environment."""
    proc = run(["make", "-C", SAMPLES, "run-conv", f"PYTHON={installed['python']}",
                f"BUILD={installed['sample_build']}"])
    assert proc.returncode == 0 and re.search(r"max relative error: \S+", proc.stdout), \
        f"conv_relu_fc runs on the venv's backend: {describe(proc)}"
    assert str(installed["backend"]) in proc.stdout, f"the sample used {installed['backend']}: {describe(proc)}"
    assert "qnnemu:" not in proc.stderr, f"no loader message: {describe(proc)}"


@pytest.mark.slow
def test_renamed_copy_finds_the_active_venv(installed, work):
    """`cp libQnnHtpEmu.so app/libQnnHtp.so`: from where it is the copy cannot see its package;
    with the venv active (VIRTUAL_ENV) it loads, without it it says why on stderr."""
    sample = installed["sample_build"] / "conv_relu_fc"
    if not sample.is_file():
        proc = run(["make", "-C", SAMPLES, sample, f"PYTHON={installed['python']}",
                    f"BUILD={installed['sample_build']}"])
        assert proc.returncode == 0, describe(proc)
    copy = work / f"app-{installed['build']}" / "libQnnHtp.so"
    copy.parent.mkdir(exist_ok=True)
    shutil.copy(installed["backend"], copy)
    proc = run([sample, copy], env=clean_env(VIRTUAL_ENV=str(installed["venv"])))
    assert proc.returncode == 0 and "max relative error" in proc.stdout, \
        f"a renamed copy runs with VIRTUAL_ENV set: {describe(proc)}"
    proc = run([sample, copy], env=clean_env(QNNEMU_PYTHONHOME=str(installed["venv"])))
    assert proc.returncode == 0 and "max relative error" in proc.stdout, \
        f"... and with QNNEMU_PYTHONHOME naming the venv: {describe(proc)}"


@pytest.mark.slow
def test_onnxruntime_helper_from_each_venv(installed):
    if not borrow_onnxruntime(installed["venv"]):
        pytest.skip("onnxruntime-qnn is not installed")
    proc = run([installed["python"], "-c", ORT_SCRIPT])
    assert proc.returncode == 0, f"qnnemu.onnxruntime runs from the venv: {describe(proc)}"
    assert f"backend {installed['backend']}" in proc.stdout and f" {installed['venv']}\n" in proc.stdout, \
        f"the venv's backend and interpreter were used: {describe(proc)}"
    assert "close True shared-equal True" in proc.stdout, \
        f"ONNX Runtime's QNN EP computed relu(x)+x on qnnemu, also in rpcmem shared memory: {describe(proc)}"


# -------------------------------------------------------------------------------------- sdist
@pytest.mark.slow
def test_sdist_is_complete_and_installs_from_elsewhere(dist, work, cache):
    if dist["sdist"] is None:
        pytest.skip("python -m build needs the `build` package (the test extra installs it)")
    with tarfile.open(dist["sdist"]) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    needed = {"setup.py", "pyproject.toml", "MANIFEST.in", "csrc/build_backend.py", "csrc/build_system.py",
              "csrc/build_kernels.py", "csrc/embed_python.h", "csrc/loader.c", "csrc/shim.c", "csrc/exports.map",
              "csrc/system_exports.map", "csrc/htp_module.map", "csrc/system_module.map", "csrc/rpcmem.c",
              "include/QNN/QnnInterface.h", "include/QNN/System/QnnSystemInterface.h", "samples/Makefile",
              "samples/conv_relu_fc.c", "qnnemu/_version.py"}
    assert needed <= names, f"the sdist carries every build input: missing {sorted(needed - names)}"
    assert not [n for n in names if n.endswith((".so", ".o", "inplace-python.txt"))], \
        "no built file in the sdist"
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    vpython = make_venv(sys.executable, work / "venv-sdist")
    proc = run([sys.executable, "-m", "pip", "--python", vpython, "install", "--disable-pip-version-check",
                "--cache-dir", cache, dist["sdist"]], cwd=elsewhere)
    assert proc.returncode == 0, f"pip install <sdist> from outside the clone: {describe(proc)}"
    backend = site_packages(work / "venv-sdist") / "qnnemu" / "lib" / "libQnnHtpEmu.so"
    proc = run(["make", "-C", SAMPLES, "run-conv", f"PYTHON={vpython}", f"BUILD={work / 'sample-sdist'}"])
    assert proc.returncode == 0 and str(backend) in proc.stdout and "max relative error" in proc.stdout, \
        f"the backend installed from the sdist runs the C sample: {describe(proc)}"


# -------------------------------------------------------------------------------- stale builds
PROBE_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include "QnnInterface.h"
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("dlopen failed: %s\n", dlerror()); return 2; }
  Qnn_ErrorHandle_t (*get)(const QnnInterface_t ***, uint32_t *) =
      (Qnn_ErrorHandle_t (*)(const QnnInterface_t ***, uint32_t *))dlsym(h, "QnnInterface_getProviders");
  const QnnInterface_t **list = NULL;
  uint32_t n = 0;
  Qnn_ErrorHandle_t rc = get(&list, &n);
  printf("rc %lu\n", (unsigned long)rc);
  return rc ? 1 : 0;
}
"""


@pytest.mark.slow
def test_version_bump_rebuilds_on_reinstall(work, cache):
    """`pip install <clone>` (non-editable) twice, the version bumped in between, the clone's
    build/ kept: the second install's libraries are rebuilt for the new version."""
    clone = copy_tree(work / "bump-clone")
    vpython = make_venv(sys.executable, work / "venv-bump")
    backend = site_packages(work / "venv-bump") / "qnnemu" / "lib" / "libQnnHtpEmu.so"
    probe = work / "bump-probe"
    (work / "bump-probe.c").write_text(PROBE_C)
    proc = run(["cc", "-std=c11", "-I", ROOT / "include" / "QNN", work / "bump-probe.c", "-o", probe, "-ldl"])
    assert proc.returncode == 0, describe(proc)

    pip_install(vpython, clone, cache=cache)
    assert (clone / "build").is_dir(), "pip built in the clone's build/ (which the second install finds)"
    old = work / "old-version" / "libQnnHtpEmu.so"
    old.parent.mkdir()
    shutil.copy(backend, old)
    version_file = clone / "qnnemu" / "_version.py"
    text = version_file.read_text()
    version = re.search(r'__version__ = "([^"]+)"', text).group(1)
    bumped = f"{version}.post1"
    version_file.write_text(text.replace(f'"{version}"', f'"{bumped}"'))

    pip_install(vpython, clone, cache=cache)
    proc = run([vpython, "-c", "import qnnemu; print(qnnemu.__version__)"])
    assert proc.stdout.strip() == bumped, f"the venv has qnnemu {bumped}: {describe(proc)}"
    proc = run([probe, backend])
    assert proc.returncode == 0 and "rc 0" in proc.stdout and "qnnemu:" not in proc.stderr, \
        f"the reinstalled backend was rebuilt for {bumped} and loads: {describe(proc)}"
    # The previous build against the new package: refused, and the app's stderr says why.
    proc = run([probe, old], env=clean_env(VIRTUAL_ENV=str(work / "venv-bump")))
    assert proc.returncode == 1 and f"rc {Q.QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES}" in proc.stdout, \
        f"the old library refuses the new package: QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES: {describe(proc)}"
    assert f"libQnnHtpEmu.so was built for qnnemu {version} but this Python imports qnnemu {bumped}" in proc.stderr, \
        f"a library of the old version says why it refuses: {describe(proc)}"
