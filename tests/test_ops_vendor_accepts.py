"""Configurations the vendor's HTP graph path takes although its validation (or qnnemu's op
checks, before) refused them: qnnemu takes them and computes them as the vendor does, or, where
the vendor's values are no function of the inputs' values, as documented (docs/validation.md,
"Documented divergences"; docs/op-support.md, "Plain integers").

Each row is a one-node graph on an SM8550 (v73) device: (op, scalar parameters, inputs as
(data type, values, (scale, offset) or None), outputs as (data type, encoding), the values
libQnnHtp.so 2.51 computed (measured; for DIVERGE one run's values, which are no function of the
inputs and change between runs), and for DIVERGE qnnemu's values).

- plain INT_*/UINT_*/BOOL_8 tensors are fixed point with scale 1 (ops/base.py AS_FIXED): Relu,
  Add (saturating), Subtract, Relu6, SquareRoot, Neg, a fixed-point Relu into INT_8;
- logic ops on 8-bit codes (ops/elementwise.py byte_logic);
- Quantize between other types and Dequantize of floats (ops/cast.py).

Both backends run in a subprocess (the SoC choice is process-wide); the vendor's run is skipped
without onnxruntime-qnn and checks that it still computes the recorded values.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vendor import vendor_env, vendor_library

ROOT = Path(__file__).resolve().parent.parent
SOC_V73 = 43   # SM8550

# A subprocess: reads [[op, params, ins, outs], ...] as JSON on stdin, prints one JSON list of
# the first output's values (or "error <function> <code>") per row.
RUNNER = r"""
import json, sys
import numpy as np
from qnnemu.client import Backend, QnnCallError, htp_device_config
from qnnemu.core import dtypes
from qnnemu.headers import Q
lib, soc = sys.argv[1], int(sys.argv[2])
be = Backend(None if lib == "ours" else lib, log_level=None,
             device_configs=[htp_device_config("SOC", socModel=soc)])
dt = lambda name: getattr(Q, "QNN_DATATYPE_" + name)
results = []
for op, params, ins, outs in json.load(sys.stdin):
    ctx = be.context()
    try:
        g = ctx.graph("g")
        tensors, feeds = [], {}
        for k, (d, values, quant) in enumerate(ins):
            arr = np.array(values, dtype=dtypes.numpy_dtype(dt(d)))
            tensors.append(g.input(f"in{k}", arr.shape, dt(d), **({"quant": tuple(quant)} if quant else {})))
            feeds[f"in{k}"] = arr
        shape = (len(ins[0][1]),)
        g.node(op, tensors, [(f"out{j}", shape, dt(d)) + ((tuple(q),) if q else ()) for j, (d, q) in enumerate(outs)],
               {k: np.dtype(t).type(v) for k, (t, v) in (params or {}).items()}, name="node", app_read=True)
        g.finalize()
        results.append(g.execute(feeds)["out0"].tolist())
    except QnnCallError as e:
        results.append(f"error {e.function} {e.code}")
    finally:
        ctx.free()
        be._contexts.remove(ctx)
be.free()
print(json.dumps(results))
"""

AGREE = [
    ('ElementWiseAnd', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (0.5, 0)), ('UFIXED_POINT_8', [0, 3, 1, 3, 4, 1, 128, 0], (0.5, 0))], [('UFIXED_POINT_8', (0.5, 0))], [0, 1, 1, 1, 1, 1, 1, 0]),
    ('ElementWiseAnd', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (1.0, 0)), ('UFIXED_POINT_8', [0, 3, 1, 3, 4, 1, 128, 0], (1.0, 0))], [('UFIXED_POINT_8', (1.0, 0))], [0, 1, 1, 1, 1, 1, 1, 0]),
    ('ElementWiseAnd', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (1.0, -128)), ('UFIXED_POINT_8', [0, 3, 1, 3, 4, 1, 128, 0], (1.0, -128))], [('UFIXED_POINT_8', (1.0, -128))], [1, 1, 1, 1, 1, 1, 0, 1]),
    ('ElementWiseOr', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 0], (0.5, 0)), ('UFIXED_POINT_8', [0, 3, 1, 3, 4, 1, 128, 0], (0.5, 0))], [('UFIXED_POINT_8', (0.5, 0))], [0, 1, 1, 1, 1, 1, 1, 0]),
    ('ElementWiseXor', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 0], (0.5, 0)), ('UFIXED_POINT_8', [0, 3, 1, 3, 4, 1, 128, 0], (0.5, 0))], [('UFIXED_POINT_8', (0.5, 0))], [0, 0, 0, 0, 0, 0, 0, 0]),
    ('ElementWiseNot', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 0], (0.5, 0))], [('UFIXED_POINT_8', (0.5, 0))], [1, 0, 0, 0, 0, 0, 0, 1]),
    ('ElementWiseNot', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 0], (1.0, -128))], [('UFIXED_POINT_8', (1.0, -128))], [128, 128, 128, 128, 128, 128, 1, 128]),
    ('ElementWiseAnd', None, [('SFIXED_POINT_8', [0, 1, 2, -3, 5, -128, 127, -1], (0.5, 0)), ('SFIXED_POINT_8', [0, 3, 1, 3, -4, 1, 127, -1], (0.5, 0))], [('SFIXED_POINT_8', (0.5, 0))], [-128, -127, -127, -127, -127, -127, -127, -127]),
    ('ElementWiseNot', None, [('SFIXED_POINT_8', [0, 1, 2, -3, 5, -128, 127, -1], (0.5, 0))], [('SFIXED_POINT_8', (0.5, 0))], [-127, 0, 0, 0, 0, 0, 0, 0]),
    ('ElementWiseAnd', None, [('INT_8', [0, 1, 2, -3, 5, -128, 127, -1], None), ('INT_8', [0, 3, 1, 3, -4, 1, 127, -1], None)], [('INT_8', None)], [-128, -127, -127, -127, -127, -127, -127, -127]),
    ('ElementWiseOr', None, [('UINT_8', [0, 1, 2, 3, 5, 255, 128, 0], None), ('UINT_8', [0, 3, 1, 3, 4, 1, 128, 0], None)], [('UINT_8', None)], [0, 1, 1, 1, 1, 1, 1, 0]),
    ('ElementWiseNot', None, [('UINT_8', [0, 1, 2, 3, 5, 255, 128, 0], None)], [('UINT_8', None)], [1, 0, 0, 0, 0, 0, 0, 1]),
    ('ElementWiseNot', None, [('INT_8', [0, 1, 2, -3, 5, -128, 127, -1], None)], [('INT_8', None)], [-127, 0, 0, 0, 0, 0, 0, 0]),
    ('Dequantize', None, [('FLOAT_16', [0, 1.5, -2.25, 3, 1000, -0.1, 7, 65504], None)], [('FLOAT_32', None)], [0.0, 1.5, -2.25, 3.0, 1000.0, -0.0999755859375, 7.0, 65504.0]),
    ('Dequantize', None, [('FLOAT_32', [0, 1.5, -2.25, 3, 1000, -0.1, 7, 1e+30], None)], [('FLOAT_32', None)], [0.0, 1.5, -2.25, 3.0, 1000.0, -0.10000000149011612, 7.0, 1.0000000150474662e+30]),
    ('Quantize', None, [('FLOAT_32', [0, 1.5, -2.25, 3, 1000, -0.1, 7, 1e+30], None)], [('FLOAT_32', None)], [0.0, 1.5, -2.25, 3.0, 1000.0, -0.10000000149011612, 7.0, 1.0000000150474662e+30]),
    ('Quantize', None, [('FLOAT_16', [0, 1.5, -2.25, 3, 1000, -0.1, 7, 65504], None)], [('FLOAT_16', None)], [0.0, 1.5, -2.25, 3.0, 1000.0, -0.0999755859375, 7.0, 65504.0]),
    ('Quantize', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (0.5, -3))], [('SFIXED_POINT_16', (0.01, 0))], [-150, -100, -50, 0, 100, 12600, 6250, 200]),
    ('Quantize', None, [('INT_8', [0, 1, 2, -3, 5, -128, 127, -1], None)], [('INT_8', None)], [0, 1, 2, -3, 5, -128, 127, -1]),
    ('Quantize', None, [('UINT_8', [0, 1, 2, 3, 5, 255, 128, 7], None)], [('UINT_16', None)], [0, 1, 2, 3, 5, 255, 128, 7]),
    ('Quantize', None, [('INT_32', [0, 1, 2, -3, 5, -100000, 1000000, -1], None)], [('INT_32', None)], [0, 1, 2, -3, 5, -100000, 1000000, -1]),
    ('Quantize', None, [('UINT_32', [0, 1, 2, 3, 5, 3000000000, 1000000, 7], None)], [('INT_32', None)], [0, 1, 2, 3, 5, -1294967296, 1000000, 7]),
    ('Quantize', None, [('INT_64', [0, 1, 2, -3, 5, -100000, 10000000000, -1], None)], [('INT_64', None)], [0, 1, 2, -3, 5, -100000, 10000000000, -1]),
    ('Quantize', None, [('BOOL_8', [0, 1, 1, 0, 1, 0, 1, 0], None)], [('BOOL_8', None)], [0, 1, 1, 0, 1, 0, 1, 0]),
    ('ElementWiseBinary', {'operation': ('uint32', 1)}, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (0.5, 0)), ('UFIXED_POINT_8', [0, 3, 1, 3, 4, 1, 128, 0], (0.5, 0))], [('UFIXED_POINT_8', (0.5, 0))], [0, 1, 1, 1, 1, 1, 1, 0]),
    ('ElementWiseNot', None, [('SFIXED_POINT_8', [0, 1, 10, -3, 5, -128, 127, -10], (0.5, 10))], [('SFIXED_POINT_8', (0.5, 10))], [-10, -10, -10, -10, -10, -10, -10, -127]),
    ('ElementWiseNot', None, [('SFIXED_POINT_8', [0, 1, 10, -3, 5, -128, 127, -10], (0.5, 0))], [('SFIXED_POINT_8', (0.5, 10))], [-127, -10, -10, -10, -10, -10, -10, -10]),
    ('ElementWiseNot', None, [('UFIXED_POINT_8', [0, 1, 10, 3, 5, 128, 127, 50], (0.5, 0))], [('UFIXED_POINT_8', (2.0, -50))], [1, 50, 50, 50, 50, 50, 50, 50]),
    ('ElementWiseNot', None, [('UFIXED_POINT_8', [0, 1, 10, 3, 5, 128, 127, 50], (0.5, -50))], [('UFIXED_POINT_8', (2.0, 0))], [0, 0, 0, 0, 0, 0, 0, 1]),
    ('ElementWiseAnd', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (0.5, 0)), ('UFIXED_POINT_8', [0, 3, 1, 3, 4, 1, 128, 0], (0.5, 0))], [('UFIXED_POINT_8', (0.5, -50))], [0, 1, 1, 1, 1, 1, 1, 0]),
    ('ElementWiseAnd', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (0.5, -2)), ('UFIXED_POINT_8', [0, 3, 1, 3, 4, 1, 128, 0], (0.1, -3))], [('UFIXED_POINT_8', (0.5, 0))], [1, 0, 0, 0, 1, 1, 1, 1]),
    ('ElementWiseOr', None, [('SFIXED_POINT_8', [0, 1, 2, -3, 5, -128, 127, -1], (0.5, 3)), ('SFIXED_POINT_8', [0, 3, 1, 3, -4, 1, 127, -3], (0.5, 0))], [('SFIXED_POINT_8', (0.5, 20))], [-127, -127, -127, -127, -127, -127, -127, -127]),
    ('ElementWiseXor', None, [('SFIXED_POINT_8', [0, 1, 2, -3, 0, -128, 127, -1], (0.5, 0)), ('SFIXED_POINT_8', [0, 0, 1, 3, -4, 0, 127, -1], (0.5, 0))], [('SFIXED_POINT_8', (0.5, 0))], [-128, -127, -128, -128, -127, -127, -128, -128]),
    ('ElementWiseXor', None, [('UINT_8', [0, 1, 2, 3, 0, 255, 128, 0], None), ('UINT_8', [0, 0, 1, 3, 4, 0, 128, 0], None)], [('UINT_8', None)], [0, 1, 0, 0, 1, 1, 0, 0]),
    ('ElementWiseBinary', {'operation': ('uint32', 15)}, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 0], (0.5, 0)), ('UFIXED_POINT_8', [0, 3, 1, 3, 0, 1, 128, 0], (0.5, 0))], [('UFIXED_POINT_8', (0.5, 0))], [0, 1, 1, 1, 1, 1, 1, 0]),
    ('ElementWiseBinary', {'operation': ('uint32', 19)}, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 0], (0.5, 0)), ('UFIXED_POINT_8', [0, 0, 1, 3, 0, 1, 128, 0], (0.5, 0))], [('UFIXED_POINT_8', (0.5, 0))], [0, 1, 0, 0, 1, 0, 0, 0]),
    ('ElementWiseUnary', {'operation': ('uint32', 9)}, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 0], (0.5, -128))], [('UFIXED_POINT_8', (0.5, -128))], [128, 128, 128, 128, 128, 128, 1, 128]),
    ('Quantize', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (0.5, 0))], [('UFIXED_POINT_8', (0.5, 0))], [0, 1, 2, 3, 5, 255, 128, 7]),
    ('Quantize', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (0.5, 0))], [('UFIXED_POINT_16', (0.25, -10))], [10, 12, 14, 16, 20, 520, 266, 24]),
    ('Quantize', None, [('UFIXED_POINT_16', [0, 1, 2, 3, 5, 255, 1280, 7000], (0.5, 0))], [('UFIXED_POINT_8', (20, -10))], [10, 10, 10, 10, 10, 16, 42, 185]),
    ('Quantize', None, [('UINT_8', [0, 1, 2, 3, 5, 255, 128, 7], None)], [('UINT_8', None)], [0, 1, 2, 3, 5, 255, 128, 7]),
    ('Quantize', None, [('UINT_8', [0, 1, 2, 3, 5, 255, 128, 7], None)], [('BOOL_8', None)], [0, 1, 2, 3, 5, 255, 128, 7]),
    ('Quantize', None, [('BOOL_8', [0, 1, 1, 0, 1, 0, 1, 0], None)], [('INT_16', None)], [0, 1, 1, 0, 1, 0, 1, 0]),
    ('Quantize', None, [('UINT_16', [0, 1, 2, 3, 5, 255, 1280, 7000], None)], [('UINT_8', None)], [0, 1, 2, 3, 5, 255, 255, 255]),
    ('Quantize', None, [('INT_16', [0, 1, 2, -3, 5, -255, 1280, -7000], None)], [('INT_16', None)], [0, 1, 2, -3, 5, -255, 1280, -7000]),
    ('Quantize', None, [('INT_32', [0, 1, 2, -3, 5, -100000, 1000000, -1], None)], [('UINT_32', None)], [0, 1, 2, 4294967293, 5, 4294867296, 1000000, 4294967295]),
    ('Relu', None, [('INT_8', [0, 1, 2, -3, 5, -128, 127, -1], None)], [('INT_8', None)], [0, 1, 2, 0, 5, 0, 127, 0]),
    ('Relu', None, [('UINT_32', [0, 1, 2, 3, 5, 3000000000, 127, 1], None)], [('UINT_32', None)], [0, 1, 2, 3, 5, 0, 127, 1]),
    ('ElementWiseAdd', None, [('UINT_8', [0, 1, 2, 3, 200, 255, 128, 7], None), ('UINT_8', [0, 3, 1, 3, 100, 1, 128, 0], None)], [('UINT_8', None)], [0, 4, 3, 6, 255, 255, 255, 7]),
    ('ElementWiseSubtract', None, [('INT_16', [0, 1, 2, -3, 5, -32768, 32767, -1], None), ('INT_16', [0, 3, 1, 3, -4, 1, -5, 0], None)], [('INT_16', None)], [0, -2, 1, -6, 9, -32768, 32767, -1]),
    ('Relu6', None, [('UINT_8', [0, 1, 2, 3, 5, 255, 128, 7], None)], [('UINT_8', None)], [0, 1, 2, 3, 5, 6, 6, 6]),
    ('ElementWiseSquareRoot', None, [('UINT_16', [0, 1, 2, 3, 5, 255, 1280, 7000], None)], [('UINT_16', None)], [0, 1, 1, 2, 2, 16, 36, 84]),
    ('Relu', None, [('BOOL_8', [0, 1, 1, 0, 1, 0, 1, 0], None)], [('BOOL_8', None)], [0, 1, 1, 0, 1, 0, 1, 0]),
    ('ElementWiseNeg', None, [('INT_8', [0, 1, 2, -3, 5, -128, 127, -1], None)], [('INT_8', None)], [0, -1, -2, 3, -5, 127, -127, 1]),
    ('Relu', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (0.5, -100))], [('INT_8', None)], [0, 0, 0, 0, 0, 78, 14, 0]),
    ('Cast', None, [('INT_8', [0, 1, 2, -3, 5, -128, 127, -1], None)], [('INT_16', None)], [0, 1, 2, -3, 5, -128, 127, -1]),
]
DIVERGE = [
    ('Quantize', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (0.5, 0))], [('UFIXED_POINT_8', (0.25, -10))], [10, 10, 10, 10, 10, 10, 10, 10], [10, 12, 14, 16, 20, 255, 255, 24]),
    ('Quantize', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (0.5, 0))], [('INT_8', None)], [0, 0, 0, 0, 0, 0, 0, 0], [0, 1, 1, 2, 3, 127, 64, 4]),
    ('Quantize', None, [('INT_8', [0, 1, 2, -3, 5, -128, 127, -1], None)], [('UFIXED_POINT_8', (0.5, -100))], [255, 255, 255, 255, 255, 255, 255, 255], [100, 102, 104, 94, 110, 0, 255, 98]),
    ('Quantize', None, [('BOOL_8', [0, 1, 1, 0, 1, 0, 1, 0], None)], [('UFIXED_POINT_8', (0.5, -3))], [3, 3, 3, 3, 3, 3, 3, 3], [3, 5, 5, 3, 5, 3, 5, 3]),
    ('Quantize', None, [('SFIXED_POINT_8', [0, 1, 2, 3, 5, -128, 127, 7], (0.5, 0))], [('UFIXED_POINT_8', (0.25, -10))], [10, 10, 10, 10, 10, 10, 10, 10], [10, 12, 14, 16, 20, 0, 255, 24]),
    ('Quantize', None, [('UINT_8', [0, 1, 2, 3, 5, 255, 128, 7], None)], [('UFIXED_POINT_8', (0.5, -3))], [3, 3, 3, 3, 3, 3, 3, 3], [3, 5, 7, 9, 13, 255, 255, 17]),
    ('Quantize', None, [('UINT_8', [0, 1, 2, 3, 5, 255, 128, 7], None)], [('INT_8', None)], [0, 0, 0, 0, 0, 0, 0, 0], [0, 1, 2, 3, 5, 127, 127, 7]),
    ('Quantize', None, [('INT_8', [0, 1, 2, -3, 5, -128, 127, -1], None)], [('BOOL_8', None)], [255, 255, 0, 0, 0, 0, 0, 0], [0, 1, 2, 0, 5, 0, 127, 0]),
    ('Quantize', None, [('UFIXED_POINT_8', [0, 1, 2, 3, 5, 255, 128, 7], (0.5, 0))], [('BOOL_8', None)], [0, 0, 0, 0, 0, 0, 0, 0], [0, 1, 1, 2, 3, 128, 64, 4]),
]


def _run(library: str, rows) -> list:
    env = vendor_env() if library != "ours" else dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("QNNEMU_OP_SUPPORT", None)
    proc = subprocess.run([sys.executable, "-c", RUNNER, library, str(SOC_V73)], env=env, text=True,
                          input=json.dumps([list(r[:4]) for r in rows]), capture_output=True, timeout=300)
    assert proc.returncode == 0, f"{library}: the runner failed: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _name(row) -> str:
    op, _, ins, outs = row[:4]
    return f"{op}({','.join(i[0] for i in ins)}->{outs[0][0]})"


def test_qnnemu_computes_what_the_vendor_computes():
    got = _run("ours", AGREE)
    bad = [(_name(r), g, r[4]) for r, g in zip(AGREE, got) if g != r[4]]
    assert not bad, f"{len(bad)} of {len(AGREE)} configurations differ from the vendor's values " \
                    f"(name, qnnemu, vendor): {bad}"


def test_qnnemu_computes_the_documented_values_where_the_vendor_diverges():
    got = _run("ours", DIVERGE)
    bad = [(_name(r), g, r[5]) for r, g in zip(DIVERGE, got) if g != r[5]]
    assert not bad, f"{len(bad)} of {len(DIVERGE)} divergences: qnnemu computes other values than " \
                    f"documented (name, got, documented): {bad}"


@pytest.mark.skipif(vendor_library() is None, reason="onnxruntime-qnn (the vendor's libQnnHtp.so) is absent")
def test_vendor_still_computes_the_recorded_values():
    """AGREE: the recorded values exactly.  DIVERGE: the vendor takes and runs the graph (its
    values there are not even the same from one run to the next: a few of them change)."""
    got = _run(str(vendor_library()), AGREE + DIVERGE)
    bad = [(_name(r), g, r[4]) for r, g in zip(AGREE, got) if g != r[4]]
    assert not bad, f"the vendor's libQnnHtp.so computes {len(bad)} of {len(AGREE)} configurations otherwise " \
                    f"than recorded (name, now, recorded): {bad}"
    refused = [(_name(r), g) for r, g in zip(DIVERGE, got[len(AGREE):]) if not isinstance(g, list) or len(g) != 8]
    assert not refused, f"the vendor no longer runs {len(refused)} of the divergent configurations: {refused}"
