"""The HTP graph blob info of a context binary (HTP/QnnHtpSystemContext.h
QnnHtpSystemContext_GraphBlobInfo_t, read through QnnSystemContext_getBinaryInfo): what offline
prepare records for NUM_HVX_THREADS, the VTCM size and the optimization level (QNN HTP backend
documentation, "QNN HTP - Setting Number of HVX Threads": "The value passed in the config during
binary blob creation is what gets written in the serialized blob").

The vendor's libQnnHtp.so 2.51 (probed on SM8550 and SM8750, ``test_vendor_blob_info``) writes
``numHvxThreads`` 0 when NUM_HVX_THREADS is not configured, the SoC's maximum for an explicit 0 (6 on
SM8750, 4 on SM8550) and the count otherwise; ``vtcmSize`` in bytes: 4 MiB when unset, the SoC's
VTCM for 0, the request otherwise; ``optimizationLevel`` 0 when unset.  qnnemu wrote 4 threads, the
device's VTCM in MiB and level 2 (qnnemu/abi/system_entry.py ``_htp_graph_settings``); the values
are now the vendor's, and they are the ones the graph is prepared with (``graph_settings``).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from vendor import our_library, vendor_env, vendor_library

from qnnemu.headers import Q

MIB = 1 << 20
SM8550, SM8750 = int(Q.QNN_SOC_MODEL_SM8550), int(Q.QNN_SOC_MODEL_SM8750)
# graph name -> its HTP graph configs (client.htp_graph_config arguments)
GRAPHS = {"unset": [], "threads0": [("NUM_HVX_THREADS", {"numHvxThreads": 0})],
          "threads3": [("NUM_HVX_THREADS", {"numHvxThreads": 3})],
          "vtcm2": [("VTCM_SIZE", {"vtcmSizeInMB": 2})], "vtcm0": [("VTCM_SIZE", {"vtcmSizeInMB": 0})]}
# (SoC, graph) -> (vtcmSize, numHvxThreads, optimizationLevel) as the vendor writes them
EXPECTED = {
    (SM8750, "unset"): (4 * MIB, 0, 0), (SM8750, "threads0"): (4 * MIB, 6, 0),
    (SM8750, "threads3"): (4 * MIB, 3, 0), (SM8750, "vtcm2"): (2 * MIB, 0, 0), (SM8750, "vtcm0"): (8 * MIB, 0, 0),
    (SM8550, "unset"): (4 * MIB, 0, 0), (SM8550, "threads0"): (4 * MIB, 4, 0),
    (SM8550, "threads3"): (4 * MIB, 3, 0), (SM8550, "vtcm2"): (2 * MIB, 0, 0), (SM8550, "vtcm0"): (8 * MIB, 0, 0),
}


def blob_infos(library: str, system_library: str | None, soc: int) -> dict[str, dict]:
    """graph name -> its graph_blob_info, for one binary holding every graph of GRAPHS."""
    from qnnemu.client import Backend, htp_device_config, htp_graph_config
    from qnnemu.system_client import SystemLibrary
    with Backend(library, log_level=None, device_configs=[htp_device_config("SOC", socModel=soc)]) as be:
        ctx = be.context()
        for name, configs in GRAPHS.items():
            g = ctx.graph(name, configs=[htp_graph_config(o, **f) for o, f in configs])
            x = g.input("x", (1, 8))
            g.node("Relu", [x], [("y", (1, 8), np.float32)], app_read=True)
            g.finalize()
        blob = ctx.get_binary()
    info = SystemLibrary(system_library).binary_info(blob, details=True)
    return {g["name"]: g["graph_blob_info"] for g in info["graphs"]}


@pytest.mark.parametrize("soc", [SM8750, SM8550])
def test_blob_info_is_what_the_vendor_writes(soc):
    infos = blob_infos(str(our_library()), None, soc)
    for name in GRAPHS:
        got = (infos[name]["vtcm_size"], infos[name]["num_hvx_threads"], infos[name]["optimization_level"])
        assert got == EXPECTED[(soc, name)], \
            f"SoC {soc} graph {name}: (vtcmSize, numHvxThreads, optimizationLevel) {got} == {EXPECTED[(soc, name)]}"


def test_blob_info_matches_what_the_graph_runs_with():
    """A graph loaded from the binary is prepared with the VTCM the blob info names, and with the
    SoC's HVX threads where it names 0 (unset) or the SoC's maximum."""
    from qnnemu.client import Backend, ffi, htp_device_config, htp_graph_config
    from qnnemu.core.handles import HANDLES
    from qnnemu.htp.settings import graph_settings
    with Backend(str(our_library()), log_level=None,
                 device_configs=[htp_device_config("SOC", socModel=SM8750)]) as be:
        ctx = be.context()
        for name, configs in GRAPHS.items():
            g = ctx.graph(name, configs=[htp_graph_config(o, **f) for o, f in configs])
            x = g.input("x", (1, 8))
            g.node("Relu", [x], [("y", (1, 8), np.float32)], app_read=True)
            g.finalize()
        loaded = be.context_from_binary(ctx.get_binary())
        core = HANDLES.lookup(int(ffi.cast("uintptr_t", loaded.handle)))
        for name in GRAPHS:
            s = graph_settings(core.graphs[name])
            vtcm, threads, _ = EXPECTED[(SM8750, name)]
            assert s.vtcm_bytes == vtcm, f"{name}: prepared with {s.vtcm_bytes} bytes of VTCM, the blob says {vtcm}"
            assert s.hvx_threads == (threads or 6), f"{name}: runs with {s.hvx_threads} HVX threads (blob: {threads})"


_VENDOR = """
import sys, json
sys.path.insert(0, sys.argv[1])
import test_binary_blob_info as t
out = {str(soc): t.blob_infos(sys.argv[2], sys.argv[3], soc) for soc in (t.SM8750, t.SM8550)}
open(sys.argv[4], "w").write(json.dumps(out))
"""


def test_vendor_blob_info(tmp_path):
    htp, system = vendor_library("libQnnHtp.so"), vendor_library("libQnnSystem.so")
    if htp is None or system is None:
        pytest.skip("onnxruntime_qnn (the vendor's libQnnHtp.so, libQnnSystem.so) is not installed")
    import json
    result = tmp_path / "vendor.json"
    proc = subprocess.run([sys.executable, "-c", _VENDOR, str(Path(__file__).resolve().parent), str(htp),
                           str(system), str(result)], env=vendor_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and result.exists(), f"vendor probe failed: {proc.stderr[-2000:]}"
    vendor = json.loads(result.read_text())
    for (soc, name), want in EXPECTED.items():
        v = vendor[str(soc)][name]
        got = (v["vtcm_size"], v["num_hvx_threads"], v["optimization_level"])
        assert got == want, f"vendor SoC {soc} graph {name}: {got} == {want} (the pinned expectation)"
