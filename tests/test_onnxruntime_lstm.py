"""ONNX LSTM through ONNX Runtime's QNN EP on qnnemu (QnnOpDef.h Lstm; docs/validation.md).

The EP splits an ONNX LSTM into Lstm nodes and passes every absent optional input as a
``QNN_TENSOR_TYPE_NULL`` tensor of rank 1 and dimensions ``[0]`` created with
tensorCreateGraphTensor -- which the vendor's backend accepts and qnnemu used to refuse
(QNNEMU-tensor-dims-zero).  Each variant (forward, reverse, bidirectional, initial states,
peepholes) runs on qnnemu and is compared with the CPU EP; with the vendor package installed the
same models run on the vendor's libQnnHtp.so (SM8550, in a subprocess: the vendor's library and
ours are not loaded by one ORT process here) and qnnemu must match it too.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from helpers.lstm_models import VARIANTS, lstm_model  # noqa: E402
from vendor import vendor_env, vendor_library  # noqa: E402

_VENDOR_SCRIPT = r"""
import json, sys
import numpy as np
sys.path.insert(0, {tests!r})
import qnnemu.onnxruntime as qort
from helpers.lstm_models import VARIANTS, lstm_model
out = {{}}
for name, kw in VARIANTS.items():
    model, feeds = lstm_model(**kw)
    try:
        sess = qort.session(model, provider_options={{"backend_path": {lib!r}, "soc_model": "43"}})
        out[name] = [r.tolist() for r in sess.run(None, feeds)]
    except Exception as e:
        out[name] = str(e)[:300]
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def vendor_results():
    lib = vendor_library()
    if lib is None:
        return None
    env = vendor_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _VENDOR_SCRIPT.format(tests=str(Path(__file__).parent), lib=str(lib))],
                          env=env, capture_output=True, text=True, timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, f"the vendor subprocess printed no result: {proc.stderr[-800:]}"
    return json.loads(line[-1][len("RESULT "):])


@pytest.mark.float_math("float32")   # exact float32 on our side: compared with ORT's CPU EP at 1e-5
@pytest.mark.parametrize("name", list(VARIANTS))
def test_lstm_through_the_ep(name, vendor_results):
    import qnnemu.onnxruntime as qort
    model, feeds = lstm_model(**VARIANTS[name])
    cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    # SM8550, as the vendor runs it: the HTP has no float Lstm on v68 (docs/op-support.md).
    # Without NULL [0] tensors, the graph would not compose.
    ours = qort.session(model, provider_options={"soc_model": "43"}).run(None, feeds)
    for k, (a, b) in enumerate(zip(ours, cpu)):
        assert np.allclose(a, b, atol=1e-5), f"{name}: output {k} differs from the CPU EP by {np.abs(a - b).max()}"
    if vendor_results is None:
        return
    theirs = vendor_results[name]
    assert not isinstance(theirs, str), f"{name}: the vendor failed: {theirs}"
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert np.allclose(a, np.asarray(b, np.float32), atol=5e-3), \
            f"{name}: output {k} differs from the vendor's (float16 math) by {np.abs(a - np.asarray(b)).max()}"
