"""C clients of either QNN ABI (docs/abi-compat.md): the same sources compiled against QNN 2.43
headers (written by ``tools/gen_headers.py --manifest tests/data/qnn-abi-2.43.json --out DIR``)
and against include/QNN (2.50), run against libQnnHtpEmu.so and, the same binaries, against the
vendor's libQnnHtp.so / libQnnSaver.so (skipped when onnxruntime_qnn is absent).

- device_client.c: SOC / ARCH / SIGNEDPD device configs (QnnHtpDevice_CustomConfig_t is 12/4
  with 2.43 headers, 24/8 with 2.50 ones) and what deviceGetInfo / deviceGetPlatformInfo report;
- interface_only.c: an application plus an op package built like the SDK's sample apps
  (-DQNN_API=visibility default, -Wall -Wextra -Werror, C and C++) from "QnnInterface.h" alone;
- saver_client.c: Saver/QnnSaver.h against the vendor's libQnnSaver.so: a recorded graph
  (saver_output.c + params.bin) that then replays on libQnnHtpEmu.so.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from vendor import our_library, vendor_env, vendor_library

import qnnemu
from qnnemu.headers import Q
from qnnemu.htp import soc as socs

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "tests" / "data" / "abi_compat"
INCLUDE_250 = Path(qnnemu.include_dir()) / "QNN"
CC = shutil.which("cc") or shutil.which("gcc")
CXX = shutil.which("c++") or shutil.which("g++")
QNN_API = '-DQNN_API=__attribute__((visibility("default")))'

pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler")


def _ours() -> Path:
    lib = our_library()
    if lib is None:
        pytest.skip("libQnnHtpEmu.so is not built")
    return lib


def _vendor(name: str = "libQnnHtp.so") -> Path:
    lib = vendor_library(name)
    if lib is None:
        pytest.skip(f"onnxruntime_qnn (vendor {name}) not installed")
    return lib


def _run(args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def include_243(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("qnn243") / "QNN"
    proc = _run([sys.executable, ROOT / "tools" / "gen_headers.py", "--manifest",
                 ROOT / "tests" / "data" / "qnn-abi-2.43.json", "--out", out])
    assert proc.returncode == 0, f"gen_headers.py --manifest 2.43 --out: {proc.stdout}{proc.stderr}"
    return out


def _include(request, abi: str) -> Path:
    return request.getfixturevalue("include_243") if abi == "2.43" else INCLUDE_250


def test_gen_headers_writes_the_243_abi(include_243):
    """The 2.43 headers: their own version banner, the 2.43 table and device config layout."""
    common = (include_243 / "QnnCommon.h").read_text()
    assert "core 2.32, QAIRT 2.43" in common, "the banner names the manifest's versions"
    assert "#define QNN_API_VERSION_MINOR 32" in (include_243 / "QnnTypes.h").read_text() + common, \
        "core API 2.32"
    assert not (include_243 / "HTP" / "QnnHtpDeviceConfigShared.h").exists(), "a 2.50-only header is not written"
    assert "Qnn_ArrayOf_t" not in (include_243 / "QnnTypes.h").read_text(), "2.50-only types are not written"
    assert "v2_32" in (include_243 / "QnnInterface.h").read_text(), "the 2.32 table member"
    proc = _run([sys.executable, ROOT / "tools" / "gen_headers.py", "--check", "--manifest",
                 ROOT / "tests" / "data" / "qnn-abi-2.43.json", "--out", include_243])
    assert proc.returncode == 0, f"--check agrees with what --out wrote: {proc.stdout}"


# ------------------------------------------------------------------------ device configs
LINE = re.compile(r"^(\S+) create=(\d+) info=(\d+) soc=(\d+) arch=(\d+) vtcm=(\d+) devices=(\d+) "
                  r"platform=(\d+) psoc=(\d+) parch=(\d+)$", re.M)


def _device_client(request, abi: str, tmp_path: Path) -> Path:
    exe = tmp_path / f"device_client_{abi}"
    proc = _run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{_include(request, abi)}",
                 SOURCES / "device_client.c", "-o", exe, "-ldl"])
    assert proc.returncode == 0 and not proc.stderr, f"device_client.c against {abi} headers: {proc.stderr}"
    return exe


def _device_cases(proc: subprocess.CompletedProcess, abi: str) -> dict[str, dict]:
    assert proc.returncode == 0, f"device_client ({abi}) failed: {proc.stdout}{proc.stderr[-2000:]}"
    size, align = (12, 4) if abi == "2.43" else (24, 8)
    core = "2.32" if abi == "2.43" else "2.39"
    assert f"layout size={size} align={align} core={core}" in proc.stdout, (
        f"the client was built with the {abi} layout of QnnHtpDevice_CustomConfig_t: {proc.stdout}")
    keys = ("create", "info", "soc", "arch", "vtcm", "devices", "platform", "psoc", "parch")
    cases = {m[0]: dict(zip(keys, map(int, m[1:]))) for m in LINE.findall(proc.stdout)}
    assert set(cases) == {"soc", "arch", "signedpd", "signedpd+soc+arch", "setconfig-soc"}, proc.stdout
    return cases


@pytest.mark.parametrize("abi", ["2.43", "2.50"])
def test_device_client_on_qnnemu(request, tmp_path, abi):
    cases = _device_cases(_run([_device_client(request, abi, tmp_path), _ours()]), abi)
    sm8550, sm8650 = socs.SOCS[Q.QNN_SOC_MODEL_SM8550], socs.SOCS[Q.QNN_SOC_MODEL_SM8650]
    default = socs.SOCS[socs.DEFAULT_SOC]  # SIGNEDPD alone keeps the default device
    want = {"soc": sm8550, "arch": socs.soc_for_arch(Q.QNN_HTP_DEVICE_ARCH_V75), "signedpd": default,
            "signedpd+soc+arch": sm8650,  # SOC wins over ARCH
            "setconfig-soc": sm8650}
    for name, row in want.items():
        got = cases[name]
        assert got["create"] == Q.QNN_SUCCESS and got["info"] == Q.QNN_SUCCESS, f"{abi} {name}: {got}"
        assert (got["soc"], got["arch"], got["vtcm"], got["devices"]) == (
            row.soc_model, row.arch, row.vtcm_mb, row.devices), f"{abi} {name}: deviceGetInfo reports {row.name}"
        assert (got["platform"], got["psoc"], got["parch"]) == (Q.QNN_SUCCESS, row.soc_model, row.arch), (
            f"{abi} {name}: deviceGetPlatformInfo reports the newest device, {row.name}")


@pytest.mark.parametrize("abi", ["2.43", "2.50"])
def test_device_client_on_the_vendor(request, tmp_path, abi):
    """The same binaries on the vendor's library, which reads only the 2.50 layout and always
    reports its x86 default device (SM8350, v68) whatever the configs say."""
    exe = _device_client(request, abi, tmp_path)
    cases = _device_cases(_run([exe, _vendor()], env=vendor_env()), abi)
    soc_cases = {"soc", "signedpd+soc+arch", "setconfig-soc"}
    for name, got in cases.items():
        if abi == "2.43" and name in soc_cases:
            # it reads the socModel of a 12-byte config at offset 8: "unknown custom config socModel"
            assert got["create"] == Q.QNN_DEVICE_ERROR_INVALID_CONFIG, f"vendor, 2.43 {name}: {got}"
            continue
        assert got["create"] == Q.QNN_SUCCESS and got["info"] == Q.QNN_SUCCESS, f"vendor, {abi} {name}: {got}"
        assert (got["soc"], got["arch"]) == (Q.QNN_SOC_MODEL_SM8350, Q.QNN_HTP_DEVICE_ARCH_V68), (
            f"vendor, {abi} {name}: its deviceGetInfo reports SM8350 / v68: {got}")


# ------------------------------------------------------- sample-app build, QnnInterface.h only
@pytest.mark.parametrize("lang", ["c", "c++"])
def test_sample_app_style_client(tmp_path, lang):
    compiler = CC if lang == "c" else CXX
    if compiler is None:
        pytest.skip(f"no {lang} compiler")
    exe = tmp_path / f"interface_only_{lang}"
    std = ["-std=c11"] if lang == "c" else ["-x", "c++", "-std=c++11", "-fno-exceptions", "-fno-rtti"]
    proc = _run([compiler, *std, "-fPIC", "-fvisibility=hidden", QNN_API, "-Wall", "-Wextra", "-Werror",
                 f"-I{INCLUDE_250}", SOURCES / "interface_only.c", "-o", exe, "-rdynamic", "-ldl"])
    assert proc.returncode == 0 and not proc.stderr, f"interface_only.c as {lang}: {proc.stderr}"
    if shutil.which("nm"):
        symbols = _run(["nm", "-D", "--defined-only", exe]).stdout
        assert "CompatPackage_interfaceProvider" in symbols, \
            "QNN_API from the command line exports the op package entry point under -fvisibility=hidden"
    proc = _run([exe, _ours()])
    assert proc.returncode == 0 and re.search(r"^ok \d+ ops$", proc.stdout, re.M), (
        f"on qnnemu: {proc.stdout}{proc.stderr}")
    vendor = vendor_library()
    if vendor is not None:
        proc = _run([exe, vendor], env=vendor_env())
        assert proc.returncode == 0 and re.search(r"^ok \d+ ops$", proc.stdout, re.M), f"on the vendor: {proc.stdout}"


# ------------------------------------------------------------------------------------ Saver
def test_saver_client_records_a_graph_that_replays_on_qnnemu(tmp_path):
    saver = _vendor("libQnnSaver.so")
    exe = tmp_path / "saver_client"
    proc = _run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE_250}",
                 SOURCES / "saver_client.c", "-o", exe, "-ldl"])
    assert proc.returncode == 0 and not proc.stderr, f"saver_client.c with Saver/QnnSaver.h: {proc.stderr}"
    out = tmp_path / "recording"
    out.mkdir()
    proc = _run([exe, saver, out], env=vendor_env(), cwd=tmp_path)
    assert proc.returncode == 0, f"every call through the Saver provider succeeds: {proc.stdout}{proc.stderr[-800:]}"
    assert "initialize=0" in proc.stdout, "QnnSaver_initialize accepts OUTPUT_DIRECTORY and BACKEND_ID"
    recorded = (out / "saver_output.c").read_text()
    assert '"relu_graph"' in recorded and "graphExecute" in recorded, "saver_output.c records the graph"
    params = np.fromfile(out / "params.bin", np.float32)
    assert params[:4].tolist() == [-1.0, 2.0, -3.0, 4.0], f"params.bin holds the input data: {params}"
    # The recording is a program of its own: compile it against include/QNN, run it on qnnemu.
    ours = _ours()
    replay = tmp_path / "replay"
    proc = _run([CC, "-O0", "-w", f"-I{INCLUDE_250}", out / "saver_output.c", "-o", replay, ours,
                 f"-Wl,-rpath,{ours.parent}"])
    assert proc.returncode == 0, f"saver_output.c compiles against include/QNN: {proc.stderr}"
    proc = _run([replay], cwd=out, env=dict(os.environ))
    assert proc.returncode == 0 and "ERROR" not in proc.stdout, f"the replay runs on qnnemu: {proc.stdout}"
