"""``qnnemu-sdk-root DIR`` / ``qnnemu.sdk_root(DIR)``: a QNN-SDK-shaped tree (``include/QNN``,
``lib/x86_64-linux-clang/{libQnnHtp.so,libQnnSystem.so,libcdsprpc.so}``) over the package, so
that projects configured with ``QNN_SDK_ROOT=DIR`` build and run unmodified: a CMake project
compiling the C samples against ``${QNN_SDK_ROOT}/include/QNN`` and dlopening
``${QNN_SDK_ROOT}/lib/x86_64-linux-clang/libQnnHtp.so`` (and its System library), and the
samples' Makefile with ``QNN_SDK_ROOT=DIR`` on its command line.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import qnnemu
from qnnemu.tools import sdk_root as tool

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
LIBS = ("libQnnHtp.so", "libQnnLpai.so", "libQnnSystem.so", "libcdsprpc.so")
OURS = {"libQnnHtp.so": qnnemu.backend_library_path(), "libQnnSystem.so": qnnemu.system_library_path(),
        "libQnnLpai.so": qnnemu.lpai_library_path(),
        "libcdsprpc.so": os.path.join(qnnemu.library_dir(), "libcdsprpc.so")}

pytestmark = pytest.mark.skipif(not Path(qnnemu.backend_library_path()).is_file(),
                                reason="the qnnemu libraries are not built (pip install -e .)")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of an app that knows nothing about Python: no PYTHONPATH, no venv, no
    QNNEMU_* hints; the backend finds its interpreter from where its links point."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("QNNEMU_")}
    env.update(extra)
    return env


def describe(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


def test_layout_links_copies_and_rerun(tmp_path, capsys):
    root = qnnemu.sdk_root(tmp_path / "sdk")
    assert root == tmp_path / "sdk", f"sdk_root returns the root: {root}"
    lib = root / "lib" / "x86_64-linux-clang"
    assert (root / "include" / "QNN" / "QnnInterface.h").is_file(), "headers under include/QNN"
    assert (root / "include" / "QNN" / "System" / "QnnSystemInterface.h").is_file(), "System headers too"
    for name in LIBS:
        assert (lib / name).is_symlink(), f"{name} is a link by default"
        assert (lib / name).resolve() == Path(OURS[name]).resolve(), f"{name} -> {OURS[name]}"
    # Again, as copies: the links are replaced by files with the same bytes.
    assert tool.main([str(root), "--copy"]) == 0, "the console script's main succeeds"
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"qnnemu-sdk-root: {root}: include/QNN and ") \
        and f"QNN_SDK_ROOT={root}" in out[0], f"one summary line naming the root: {out}"
    for name in LIBS:
        assert (lib / name).is_file() and not (lib / name).is_symlink(), f"{name} copied"
        assert (lib / name).read_bytes() == Path(OURS[name]).read_bytes(), f"{name}: the same bytes"
    assert not (root / "include" / "QNN").is_symlink() and \
        (root / "include" / "QNN" / "QnnInterface.h").read_bytes() == \
        (Path(qnnemu.include_dir()) / "QNN" / "QnnInterface.h").read_bytes(), "headers copied"
    # And back to links; files of the user's own in DIR stay.
    (root / "mine.txt").write_text("kept")
    qnnemu.sdk_root(root)
    assert all((lib / name).is_symlink() for name in LIBS) and (root / "include" / "QNN").is_symlink(), \
        "re-running replaces the copies by links"
    assert (root / "mine.txt").read_text() == "kept", "nothing else in DIR is touched"


def test_bad_directories_are_one_error_line(tmp_path, capsys):
    not_dir = tmp_path / "file"
    not_dir.write_text("x")
    assert tool.main([str(not_dir)]) == 1, "a file as DIR: exit status 1"
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"qnnemu-sdk-root: error: {not_dir} exists and is not a directory"], f"one error line: {err}"
    foreign = tmp_path / "sdk" / "include" / "QNN"
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("the user's")
    assert tool.main([str(tmp_path / "sdk")]) == 1, "an include/QNN that is not a QNN header tree: exit 1"
    err = capsys.readouterr().err
    assert "does not hold QNN headers; not replacing it" in err, f"refused with the reason: {err}"
    assert (foreign / "notes.txt").read_text() == "the user's", "the directory was left alone"
    assert tool.main([]) == 2, "no DIR: a usage error (status 2)"


CMAKE_PROJECT = r"""
cmake_minimum_required(VERSION 3.13)
project(qnn_sdk_app C)
# The usual way QNN applications find the SDK: -DQNN_SDK_ROOT=... or the environment.
if(NOT QNN_SDK_ROOT)
  set(QNN_SDK_ROOT $ENV{QNN_SDK_ROOT})
endif()
if(NOT EXISTS "${QNN_SDK_ROOT}/include/QNN/QnnInterface.h")
  message(FATAL_ERROR "QNN_SDK_ROOT=${QNN_SDK_ROOT} has no include/QNN")
endif()
set(QNN_LIB_DIR "${QNN_SDK_ROOT}/lib/x86_64-linux-clang")
set(CMAKE_C_STANDARD 11)
add_executable(conv_relu_fc "${SAMPLES}/conv_relu_fc.c")
add_executable(context_binary "${SAMPLES}/context_binary.c")
foreach(app conv_relu_fc context_binary)
  target_include_directories(${app} PRIVATE "${QNN_SDK_ROOT}/include/QNN")
  target_compile_options(${app} PRIVATE -Wall -Wextra -Werror)
  target_compile_definitions(${app} PRIVATE
    DEFAULT_BACKEND="${QNN_LIB_DIR}/libQnnHtp.so"
    DEFAULT_SYSTEM_LIBRARY="${QNN_LIB_DIR}/libQnnSystem.so"
    DEFAULT_BINARY="${CMAKE_BINARY_DIR}/context.bin")
  target_link_libraries(${app} PRIVATE ${CMAKE_DL_LIBS} m)
endforeach()
"""


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None,
                    reason="needs cmake and a C compiler (apt-get install -y cmake)")
@pytest.mark.parametrize("copy", [False, True], ids=["links", "copies"])
def test_cmake_project_with_qnn_sdk_root(tmp_path, copy):
    """Configured with QNN_SDK_ROOT only; the programs dlopen the SDK tree's libQnnHtp.so and
    libQnnSystem.so (no arguments: the paths CMake baked in).  Copies find the package through
    QNNEMU_PYTHONHOME / QNNEMU_PYTHONPATH (they cannot from where they are)."""
    sdk = qnnemu.sdk_root(tmp_path / "sdk", copy=copy)
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(CMAKE_PROJECT)
    build = tmp_path / "build"
    env = clean_env()
    configure = subprocess.run(["cmake", "-S", str(project), "-B", str(build), f"-DQNN_SDK_ROOT={sdk}",
                                f"-DSAMPLES={SAMPLES}"], capture_output=True, text=True, env=env, timeout=300)
    assert configure.returncode == 0, f"cmake configures with QNN_SDK_ROOT: {describe(configure)}"
    compiled = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True, env=env,
                              timeout=300)
    assert compiled.returncode == 0, f"the project builds against ${{QNN_SDK_ROOT}}/include/QNN: {describe(compiled)}"
    if copy:
        import sys
        env = clean_env(QNNEMU_PYTHONHOME=sys.prefix,
                        QNNEMU_PYTHONPATH=str(Path(qnnemu.__file__).resolve().parent.parent))
    conv = subprocess.run([str(build / "conv_relu_fc")], capture_output=True, text=True, env=env, timeout=300)
    assert conv.returncode == 0 and re.search(r"max relative error: \S+", conv.stdout), \
        f"conv_relu_fc runs on ${{QNN_SDK_ROOT}}/lib/x86_64-linux-clang/libQnnHtp.so: {describe(conv)}"
    ctx = subprocess.run([str(build / "context_binary")], capture_output=True, text=True, env=env, timeout=300)
    assert ctx.returncode == 0 and ctx.stdout.rstrip().splitlines()[-1] == "PASSED", \
        f"context_binary (backend and System library from the SDK tree) passes: {describe(ctx)}"
    assert "qnnemu:" not in conv.stderr + ctx.stderr, \
        f"the libraries loaded without a loader message on stderr: {conv.stderr[-500:]} {ctx.stderr[-500:]}"


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="needs make and a C compiler")
def test_samples_makefile_with_qnn_sdk_root(tmp_path):
    """`make -C samples run QNN_SDK_ROOT=DIR`: headers and libraries from the tree; Python is not
    asked (PYTHON=false would fail any $(shell $(PYTHON) ...))."""
    sdk = qnnemu.sdk_root(tmp_path / "sdk")
    proc = subprocess.run(["make", "-C", str(SAMPLES), "run", f"QNN_SDK_ROOT={sdk}", "PYTHON=false",
                           f"BUILD={tmp_path / 'build'}"], capture_output=True, text=True, env=clean_env(),
                          timeout=600)
    assert proc.returncode == 0, f"make run QNN_SDK_ROOT=... exits 0: {describe(proc)}"
    sdk_backend = f"{sdk}/lib/x86_64-linux-clang/libQnnHtp.so"
    assert sdk_backend in proc.stdout, f"the samples ran on {sdk_backend}: {describe(proc)}"
    assert [line for line in proc.stdout.splitlines() if not line.startswith("make")][-1] == "PASSED", \
        f"both samples passed: {describe(proc)}"
