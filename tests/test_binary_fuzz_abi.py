"""Fuzzing the context-binary loaders through the C ABI (issue 4: "Truncated, corrupted (CRC),
foreign (for example a vendor HTP binary) or future-version binaries return the documented
context error codes with a clear log line -- never a crash"; docs/context-binary.md "Loading" /
"Errors", docs/binary-sections.md "Errors").

Real binaries are made through the ABI (tests/abi.py) from a context with weight sharing, a
context tensor shared by two graphs, a quantized graph (per-tensor and per-channel encodings), a
graph with UPDATEABLE_STATIC weights, and mutated by hypothesis: bit flips, byte overwrites,
insertions, deletions, truncations, splices of foreign bytes (the vendor's libQnnHtp.so binary
when it is installed, a vendor-like header, a binary section), header fields set to boundary
values, lengths rewritten; most mutants get their CRCs recomputed (``binary.reseal``) so that
they reach the header consistency checks, the metadata schema and the graph rebuild. Each mutant
goes to

- ``contextCreateFromBinary``, ``contextValidateBinary`` (libQnnHtpEmu.so),
- ``contextCreateFromBinaryListAsync`` with a notification callback,
- ``systemContextGetBinaryInfo`` of our libQnnSystem.so,

and mutated binary sections go to ``contextApplyBinarySection``.  Properties:

- the return code is QNN_SUCCESS or a documented QnnContext_Error_t / QnnSystemContext_Error_t
  code (never QNN_COMMON_ERROR_GENERAL, the code of an unexpected exception); binary sections
  may also answer the tensor-update codes docs/binary-sections.md lists;
- a failure logs an ERROR line through the app's QnnLog callback carrying a ``[QNNEMU-...]``
  rule id (never ``QNNEMU-binary-internal``, the "a bug, not a crash" fallback) and the
  function's name;
- a failed load leaves no context or graph behind (the library runs in this interpreter: the
  core's handle table is counted) and writes no handle; a rejected section leaves the context
  computing bit-identically;
- a mutant that loads executes; when its bytes after the header are the original's (only header
  fields changed), bit-identically to the original;
- the loaders agree: ValidateBinary fails exactly when loading fails (with the same code; it
  runs the rebuild's checks too), the System library refuses exactly what inspection refuses
  (same rule id, the System code documented for it), ListAsync notifies the code
  contextCreateFromBinary gives.

Besides byte-level mutants, ``metadata_mutants`` replaces values of the metadata JSON (sizes and
CRCs kept consistent) so that mutants reach tensor creation, graphAddNode and graphFinalize of
the rebuild, and the graph configs the System library describes.  The fixed-input tests whose
docstrings start "Found by the fuzzer" are cases it found (each failed before its fix).

Case counts scale with the hypothesis profile (tests/conftest.py): ``ci`` (default) runs a few
thousand cases in about 15 s, ``dev`` ten times more.
"""
from __future__ import annotations

import json
import os
import re
import struct
import sys
import zlib
from pathlib import Path

import abi
import cffi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from hypothesis import HealthCheck, event, given, note, settings, strategies as st

import qnnemu
from qnnemu.core import binary, sections
from qnnemu.core.context import Context
from qnnemu.core.graph import Graph
from qnnemu.core.handles import HANDLES
from qnnemu.errors import QnnError
from qnnemu.headers import Q, cdef

pytestmark = pytest.mark.usefixtures("qnn_abi")

OK = Q.QNN_SUCCESS
F32, U8, S8, S32 = (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8,
                    Q.QNN_DATATYPE_SFIXED_POINT_32)
APP_WRITE, APP_READ, NATIVE = Q.QNN_TENSOR_TYPE_APP_WRITE, Q.QNN_TENSOR_TYPE_APP_READ, Q.QNN_TENSOR_TYPE_NATIVE
STATIC, UPD_STATIC = Q.QNN_TENSOR_TYPE_STATIC, Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC
RULE_RE = abi.RULE_ID

# What the loaders may answer (QnnContext.h / QnnSystemContext.h error enums, minus the
# "undefined" placeholder); QNN_COMMON_ERROR_GENERAL (an internal exception) is never allowed.
CONTEXT_CODES = frozenset(Q.enum("QNN_CONTEXT_ERROR_")) - {Q.QNN_CONTEXT_ERROR_UNDEFINED}
SYSTEM_CODES = frozenset(Q.enum("QNN_SYSTEM_CONTEXT_ERROR_"))


def _documented_binary_rules() -> dict[str, frozenset[int]]:
    """docs/context-binary.md "Errors": rule id -> the QnnContext_Error_t code(s) it documents."""
    text = (Path(__file__).parent.parent / "docs" / "context-binary.md").read_text()
    table = text.split("\n## Errors", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in table.splitlines():
        m = re.match(r"\|\s*`(QNNEMU-[^`]+)`\s*\|([^|]*)\|", line)
        if m:
            out[m.group(1)] = frozenset(getattr(Q, c) for c in re.findall(r"QNN_CONTEXT_ERROR_[A-Z_]+", m.group(2)))
    return out


BINARY_RULES = _documented_binary_rules()
assert "QNNEMU-binary-crc" in BINARY_RULES and "QNNEMU-binary-magic" in BINARY_RULES, \
    "docs/context-binary.md: the Errors table is where this module reads the documented codes"
# The System library maps the core's codes (qnnemu/abi/system_entry.py's docstring): foreign,
# truncated, corrupted, future-version binaries are MALFORMED_BINARY, a NULL/empty buffer an
# invalid argument.
SYSTEM_FOR_CONTEXT = {Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT: Q.QNN_SYSTEM_CONTEXT_ERROR_INVALID_ARGUMENT,
                      Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY: Q.QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY,
                      Q.QNN_CONTEXT_ERROR_BINARY_VERSION: Q.QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY}
# contextApplyBinarySection: the context codes plus the tensor-update codes of docs/binary-sections.md.
SECTION_CODES = CONTEXT_CODES | {Q.QNN_TENSOR_ERROR_INCOMPATIBLE_TENSOR_UPDATE, Q.QNN_TENSOR_ERROR_DOES_NOT_EXIST,
                                 Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM}

# Thousands of ABI cases per ci run in total, ten times more under dev: every test scales
# settings.default.max_examples (ci 100, dev 1000) by its own factor.
def scaled(factor: float) -> settings:
    return settings(max_examples=max(1, int(factor * settings.default.max_examples)),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


_CALLBACKS: list = []   # cffi callbacks outlive every call that may use them


# ================================================================================== environment
class Env:
    """A recording DEBUG logger and a backend (module scope: every case shares them)."""

    def __init__(self):
        self.rec = abi.LogRecorder()
        self.keep: list = []
        code, self.log = abi.create("logCreate", self.rec.callback, Q.QNN_LOG_LEVEL_DEBUG)
        assert code == OK, "setup: logCreate"
        code, self.be = abi.create("backendCreate", vp(self.log), NULL)
        assert code == OK, "setup: backendCreate"

    def close(self):
        assert abi.call("backendFree", vp(self.be)) == OK, "teardown: backendFree"
        assert abi.call("logFree", vp(self.log)) == OK, "teardown: logFree"

    def errors_since(self, mark: int) -> list[str]:
        return [m for lv, m in self.rec.records[mark:] if lv == Q.QNN_LOG_LEVEL_ERROR]

    def configs(self, *custom: dict):
        """A NULL-terminated QnnContext_Config_t list of HTP custom configs (dicts of fields)."""
        ptrs = []
        for fields in custom:
            cc = ffi.new("QnnHtpContext_CustomConfig_t *")
            for k, v in fields.items():
                setattr(cc, k, v)
            c = ffi.new("QnnContext_Config_t *")
            c.option = Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM
            c.customConfig = cc
            self.keep += [cc, c]
            ptrs.append(c)
        return abi.null_terminated("QnnContext_Config_t", ptrs, self.keep)


def live_counts() -> tuple[int, int]:
    return len(HANDLES.live(Context)), len(HANDLES.live(Graph))


def _graph(ctx: int, name: str, keep: list, configs=NULL) -> int:
    code, g = abi.create("graphCreate", vp(ctx), abi.cstr(name, keep), configs)
    assert code == OK, f"setup: graphCreate('{name}') returned {code}"
    return g


def htp_graph_configs(keep: list):
    """graphCreate configs stored in the binary: a priority and HTP custom configs (optimization
    level, VTCM size, HVX threads), so that mutations reach what the loader, graphExecute and the
    System library's QnnHtpSystemContext_GraphBlobInfo_t read from them."""
    ptrs = []
    prio = ffi.new("QnnGraph_Config_t *")
    prio.option = Q.QNN_GRAPH_CONFIG_OPTION_PRIORITY
    prio.priority = Q.QNN_PRIORITY_HIGH
    ptrs.append(prio)
    for option, member, value in (
            (Q.QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION, "optimizationOption",
             {"type": Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_OPTIMIZATION_FLAG, "floatValue": 2.0}),
            (Q.QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE, "vtcmSizeInMB", 4),
            (Q.QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS, "numHvxThreads", 2)):
        cc = ffi.new("QnnHtpGraph_CustomConfig_t *")
        cc.option = option
        setattr(cc, member, value)
        c = ffi.new("QnnGraph_Config_t *")
        c.option = Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM
        c.customConfig = cc
        keep += [cc, c]
        ptrs.append(c)
    keep.append(prio)
    return abi.null_terminated("QnnGraph_Config_t", ptrs, keep)


def _tensors(g: int, keep: list, *tensors: abi.Struct) -> None:
    for t in tensors:
        code = abi.call("tensorCreateGraphTensor", vp(g), t.ptr)
        assert code == OK, f"setup: tensorCreateGraphTensor('{ffi.string(t.v.name).decode()}') returned {code}"
        keep.append(t)


def _nodes(g: int, keep: list, *ops: abi.Struct) -> None:
    for op in ops:
        keep.append(op)
        assert abi.call("graphAddNode", vp(g), op) == OK, "setup: graphAddNode"
    assert abi.call("graphFinalize", vp(g), NULL, NULL) == OK, "setup: graphFinalize"


def _axis_quant(t: abi.Struct, axis: int, scales: np.ndarray) -> abi.Struct:
    """Gives ``t`` a per-channel AXIS_SCALE_OFFSET encoding (offsets 0)."""
    pairs = ffi.new("Qnn_ScaleOffset_t[]", [(float(s), 0) for s in scales])
    t.keep.append(pairs)
    qp = t.v.quantizeParams
    qp.encodingDefinition = Q.QNN_DEFINITION_DEFINED
    qp.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET
    qp.axisScaleOffsetEncoding.axis = axis
    qp.axisScaleOffsetEncoding.numScaleOffsets = len(scales)
    qp.axisScaleOffsetEncoding.scaleOffset = pairs
    return t


def build_rich_context(env: Env, seed: int = 11, keep: list | None = None) -> int:
    """A context (weight sharing on) with a STATIC context tensor shared by graphs 'dense_a' (with
    graph configs) and 'dense_b', a quantized conv graph 'quant' (uint8 in/out, per-channel int8 UPDATEABLE_STATIC
    weights, int32 bias), and 'lora': y = x @ W + b with UPDATEABLE_STATIC W and b."""
    keep = env.keep if keep is None else keep
    rng = np.random.default_rng(seed)
    code, ctx = abi.create("contextCreate", vp(env.be), NULL, env.configs(
        {"option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED, "weightSharingEnabled": True}))
    assert code == OK, f"setup: contextCreate returned {code}"
    shared = abi.static_tensor("shared_w", rng.standard_normal((3, 4)).astype(np.float32))
    assert abi.call("tensorCreateContextTensor", vp(ctx), shared.ptr) == OK, "setup: tensorCreateContextTensor"
    keep.append(shared)
    for name in ("dense_a", "dense_b"):
        g = _graph(ctx, name, keep, htp_graph_configs(keep) if name == "dense_a" else NULL)
        t = [abi.tensor("x", (1, 4)), abi.static_tensor("b", rng.standard_normal(3).astype(np.float32)),
             abi.tensor("h", (1, 3), type_=NATIVE), abi.tensor("y", (1, 3), type_=APP_READ)]
        _tensors(g, keep, *t)
        _nodes(g, keep, abi.op_config("fc", "FullyConnected", [t[0], shared, t[1]], [t[2]]),
               abi.op_config("relu", "Relu", [t[2]], [t[3]]))
    g = _graph(ctx, "quant", keep)
    scales = np.array([0.01, 0.02, 0.005], np.float32)
    qx = abi.tensor("qx", (1, 5, 5, 2), U8, quant=(0.05, -128))
    qw = _axis_quant(abi.tensor("qw", (3, 3, 2, 3), S8, UPD_STATIC,
                                data=rng.integers(-127, 128, (3, 3, 2, 3), dtype=np.int8)), 3, scales)
    qb = _axis_quant(abi.tensor("qb", (3,), S32, STATIC, data=rng.integers(-500, 500, 3, dtype=np.int32)),
                     0, scales * np.float32(0.05))
    qy = abi.tensor("qy", (1, 5, 5, 3), U8, APP_READ, quant=(0.04, -100))
    pad = abi.tensor("qconv.pad_amount", (2, 2), Q.QNN_DATATYPE_UINT_32, STATIC,
                     data=np.array([[1, 1], [1, 1]], np.uint32))
    _tensors(g, keep, qx, qw, qb, qy)
    _nodes(g, keep, abi.op_config("qconv", "Conv2d", [qx, qw, qb], [qy], [abi.tensor_param("pad_amount", pad)]))
    g = _graph(ctx, "lora", keep)
    t = [abi.tensor("x", (2, 4)), abi.tensor("W", (4, 3), F32, UPD_STATIC,
                                             data=rng.standard_normal((4, 3)).astype(np.float32)),
         abi.tensor("b", (3,), F32, UPD_STATIC, data=rng.standard_normal(3).astype(np.float32)),
         abi.tensor("h", (2, 3), type_=NATIVE), abi.tensor("y", (2, 3), type_=APP_READ)]
    _tensors(g, keep, *t)
    _nodes(g, keep, abi.op_config("mm", "MatMul", [t[0], t[1]], [t[3]]),
           abi.op_config("add", "ElementWiseAdd", [t[3], t[2]], [t[4]]))
    return ctx


def get_binary(ctx: int) -> bytes:
    size = ffi.new("Qnn_ContextBinarySize_t *")
    assert abi.call("contextGetBinarySize", vp(ctx), size) == OK, "contextGetBinarySize"
    buf = ffi.new("char[]", int(size[0]))
    written = ffi.new("Qnn_ContextBinarySize_t *")
    assert abi.call("contextGetBinary", vp(ctx), buf, size[0], written) == OK, "contextGetBinary"
    return ffi.buffer(buf, int(written[0]))[:]


def retrieve(ctx: int, name: str) -> int:
    code, g = abi.create("graphRetrieve", vp(ctx), abi.cstr(name))
    assert code == OK, f"graphRetrieve('{name}') returned {code}"
    return g


def _feed(t: binary.TensorInfo) -> np.ndarray:
    """A deterministic input for tensor ``t`` (values in every data type's range)."""
    from qnnemu.core import dtypes
    npd = dtypes.numpy_dtype(t.dtype)
    rng = np.random.default_rng(zlib.crc32(t.name.encode()))
    raw = rng.integers(0, 100, t.dims)
    return (raw.astype(npd) if npd.kind in "iub" else (raw / 25.0 - 2).astype(npd))


def execute(g: int, graph: binary.GraphInfo) -> tuple[int, dict[str, bytes]]:
    """graphExecute of ``g`` described by ``graph`` (inspect of its binary): (code, outputs)."""
    from qnnemu.core import dtypes
    keep: list = []
    ins, outs, results = [], [], {}
    for t in graph.inputs:
        s = abi.tensor(t.name, t.dims, t.dtype, APP_WRITE, tensor_id=t.id)
        abi.set_buffer(s, _feed(t))
        ins.append(s)
    for t in graph.outputs:
        arr = np.zeros(t.dims, dtypes.numpy_dtype(t.dtype))
        s = abi.tensor(t.name, t.dims, t.dtype, APP_READ, tensor_id=t.id)
        abi.set_buffer(s, arr)
        outs.append(s)
        results[t.name] = arr
    code = abi.call("graphExecute", vp(g), abi.tensor_array(ins, keep), len(ins),
                    abi.tensor_array(outs, keep), len(outs), NULL, NULL)
    return code, {k: v.tobytes() for k, v in results.items()}


def run_all(ctx: int, blob: bytes) -> dict[str, dict[str, bytes]]:
    """Every graph of loaded context ``ctx`` (made from ``blob``) executed: name -> outputs."""
    out = {}
    for graph in binary.inspect(blob).graphs:
        code, results = execute(retrieve(ctx, graph.name), graph)
        assert code == OK, f"graphExecute of graph '{graph.name}' of a loaded binary returned {code}"
        out[graph.name] = results
    return out


# ================================================================================== fixtures
@pytest.fixture(scope="module")
def env():
    e = Env()
    yield e
    e.close()


class Corpus:
    """The fuzzing inputs: ``blob`` (of ``build_rich_context``), ``outputs`` (its graphs'
    results when loaded), ``foreign`` (byte strings to splice in).  Its repr is short, so that
    hypothesis' failure reports show the mutant, not the corpus."""

    def __init__(self, blob: bytes, outputs: dict, foreign: list[bytes]):
        self.blob, self.outputs, self.foreign = blob, outputs, foreign

    def __repr__(self) -> str:
        return f"Corpus({len(self.blob)}-byte binary, {len(self.foreign)} foreign strings)"


@pytest.fixture(scope="module")
def rich(env):
    """(binary, outputs of its graphs when loaded) of ``build_rich_context``."""
    ctx = build_rich_context(env)
    blob = get_binary(ctx)
    assert abi.call("contextFree", vp(ctx), NULL) == OK, "setup: contextFree"
    code, loaded = load(env, blob)
    assert code == OK, f"setup: the unmutated binary loads ({env.rec.errors()[-1:]})"
    outputs = run_all(loaded, blob)
    assert abi.call("contextFree", vp(loaded), NULL) == OK, "setup: contextFree"
    return blob, outputs


def _vendor_binary(tmp: Path) -> bytes | None:
    """A real context binary of the vendor's libQnnHtp.so (ONNX Runtime's EPContext dump), or None."""
    sys.path.insert(0, str(Path(__file__).parent))
    from vendor import vendor_context_binary
    return vendor_context_binary(tmp)[0]


# A foreign header of the vendor's shape (version words, a size, zeros) for when the real one
# cannot be made.
VENDOR_LIKE = struct.pack("<IIII", 0x2, 0x3, 4096, 0) + bytes(240)


@pytest.fixture(scope="module")
def foreign(tmp_path_factory, rich):
    """Foreign byte strings spliced into binaries: the vendor's binary (when it can be made), a
    vendor-like header, a qnnemu binary section, random bytes."""
    real = _vendor_binary(tmp_path_factory.mktemp("vendor_ctx"))
    sec = sections.encode(sections.Section(Q.QNN_CONTEXT_SECTION_UPDATABLE, None, 0))
    rand = np.random.default_rng(5).integers(0, 256, 512, dtype=np.uint8).tobytes()
    return [b for b in (real, VENDOR_LIKE, sec, rand) if b]


# ================================================================================== calls
def load(env: Env, blob: bytes | None, size: int | None = None) -> tuple[int, int]:
    buf = NULL if blob is None else ffi.new("char[]", blob or b"\0")
    out = ffi.new("Qnn_ContextHandle_t *")
    code = abi.call("contextCreateFromBinary", vp(env.be), NULL, NULL, buf,
                    len(blob or b"") if size is None else size, out, NULL)
    return code, abi.hval(out[0])


def validate(env: Env, blob: bytes) -> int:
    buf = ffi.new("char[]", blob or b"\0")
    return abi.call("contextValidateBinary", vp(env.be), NULL, NULL, buf, len(blob))


def rules_in(messages: list[str]) -> list[str]:
    """The rule id of each message: the first one (a wrapped inner rule may follow it)."""
    return [found[0] for found in (RULE_RE.findall(m) for m in messages) if found]


def assert_refusal(env: Env, mark: int, code: int, allowed: frozenset, func: str, what: str) -> str:
    """A failed call: an allowed code and an ERROR log line with the function name and a rule
    id that is not the internal-error fallback; returns the rule id."""
    assert code != Q.QNN_COMMON_ERROR_GENERAL, \
        f"{what}: {func} returned QNN_COMMON_ERROR_GENERAL (an internal exception): {env.errors_since(mark)[-1:]}"
    assert code in allowed, f"{what}: {func} returned {code}, not a documented error code of the call"
    errors = [m for m in env.errors_since(mark) if func in m]
    rules = rules_in(errors)
    assert rules, f"{what}: {func} failed with {code} but logged no ERROR line with a [QNNEMU-...] rule id: " \
                  f"{env.rec.records[mark:][-3:]}"
    assert "QNNEMU-binary-internal" not in rules, \
        f"{what}: {func} hit an unexpected exception (QNNEMU-binary-internal), not a checked rule: {errors[-1]}"
    rule = rules[-1]
    if rule.startswith("QNNEMU-binary-") and allowed is CONTEXT_CODES:
        assert rule in BINARY_RULES, f"{what}: {func}: rule {rule} is not in docs/context-binary.md's Errors table"
        assert code in BINARY_RULES[rule], \
            f"{what}: {func} returned {code} for {rule}; docs/context-binary.md documents {set(BINARY_RULES[rule])}"
    return rule


# ================================================================================== mutations
# Header fields (docs/context-binary.md "Header"): name -> (offset, struct format).
HEADER_FIELDS = {
    "magic": (0, "8s"), "format_version": (8, "I"), "header_size": (12, "I"), "total_size": (16, "Q"),
    "flags": (24, "I"), "payload_crc32": (28, "I"), "core_api_major": (32, "H"), "core_api_minor": (34, "H"),
    "backend_api_major": (38, "H"), "soc_model": (44, "I"), "htp_arch": (48, "I"), "vtcm_mb": (52, "I"),
    "metadata_offset": (56, "Q"), "metadata_size": (64, "Q"), "data_offset": (72, "Q"), "data_size": (80, "Q"),
    "build_id": (88, "32s"), "graph_count": (120, "I"), "metadata_crc32": (124, "I"), "reserved": (128, "28s"),
    "header_crc32": (156, "I"),
}
_MAX = {"B": 0xFF, "H": 0xFFFF, "I": 0xFFFFFFFF, "Q": 0xFFFFFFFFFFFFFFFF}
_BYTES_VALUES = [b"", b"\0" * 8, b"QNNEMUBS", b"QNNEMUCA", b"\x02\0\0\0\x03\0\0\0", b"\xff" * 32, b"v9.99\xff\x80"]


def boundary_values(fmt: str, old, blob_len: int):
    """Values at the edges of a field's range and of the binary's own sizes."""
    if fmt.endswith("s"):
        return st.sampled_from(_BYTES_VALUES) | st.binary(max_size=int(fmt[:-1]))
    hi = _MAX[fmt]
    near = [v for v in (old - 1, old + 1, old + 64, old - 64, old * 2, old // 2) if 0 <= v <= hi]
    edges = [0, 1, 2, 63, 64, 159, 160, 161, hi, hi - 1, hi // 2 + 1, blob_len, blob_len - 1, blob_len + 1,
             binary.FORMAT_VERSION + 1, 2**31, 2**32 - 1, 2**32]
    return st.sampled_from([v for v in near + edges if 0 <= v <= hi]) | st.integers(0, hi)


@st.composite
def mutated_binaries(draw, corpus: Corpus) -> tuple[bytes, str]:
    """(mutant, how) of the corpus binary: 1-4 mutations, then usually the CRCs re-sealed."""
    blob, foreign = corpus.blob, corpus.foreign
    h = binary.parse_header(blob)
    out = bytearray(blob)
    hows = []
    regions = [(0, binary.HEADER_SIZE), (h.metadata_offset, h.metadata_offset + h.metadata_size),
               (h.data_offset, h.total_size), (0, len(blob))]

    @st.composite
    def positions(draw2):
        lo, hi = draw2(st.sampled_from(regions))
        return draw2(st.integers(lo, max(lo, min(hi, len(out)) - 1)))

    def position():
        return draw(positions())

    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3, 4]))):
        kind = draw(st.sampled_from(["flip", "byte", "insert", "delete", "truncate", "splice", "field",
                                     "field", "field", "lengths"]))
        if not out:
            break
        if kind == "flip":
            pos, bit = position(), draw(st.integers(0, 7))
            out[pos % len(out)] ^= 1 << bit
        elif kind == "byte":
            out[position() % len(out)] = draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, ord('"'), ord("}"),
                                                               ord("9"), ord("-")]) | st.integers(0, 255))
        elif kind == "insert":
            pos = position()
            out[pos:pos] = draw(st.binary(min_size=1, max_size=70))
        elif kind == "delete":
            pos = position()
            del out[pos:pos + draw(st.integers(1, 70))]
        elif kind == "truncate":
            n = draw(st.sampled_from([0, 1, 7, 8, 11, 12, 159, 160, h.metadata_offset + h.metadata_size,
                                      h.data_offset, len(out) - 1]) | st.integers(0, len(out)))
            del out[n:]
        elif kind == "splice":
            src = draw(st.sampled_from(foreign))
            start = draw(st.integers(0, len(src) - 1))
            chunk = src[start:start + draw(st.integers(1, 256))]
            pos = draw(st.sampled_from([0, 8, binary.HEADER_SIZE, h.data_offset]) | positions())
            out[pos:pos + len(chunk)] = chunk
        else:
            # "lengths": a declared size moved by a little (a length rewrite that keeps the header
            # plausible); "field": any header field set to a boundary value.
            names = ["total_size", "metadata_size", "data_size"] if kind == "lengths" else sorted(HEADER_FIELDS)
            name = draw(st.sampled_from(names), label="header field")
            off, fmt = HEADER_FIELDS[name]
            if len(out) < off + struct.calcsize("<" + fmt):
                continue
            old = struct.unpack_from("<" + fmt, out, off)[0]
            if kind == "lengths":
                value = min(max(0, old + draw(st.integers(-70, 70))), _MAX[fmt])
            else:
                value = draw(boundary_values(fmt, old if isinstance(old, int) else 0, len(out)))
            struct.pack_into("<" + fmt, out, off, value)
            hows.append(f"{name}={value!r:.40}")
            continue
        hows.append(kind)
    sealed = draw(st.sampled_from([True, True, True, False]))
    mutant = binary.reseal(bytes(out)) if sealed else bytes(out)
    return mutant, "+".join(hows) + (" (resealed)" if sealed else "")


def same_payload(a: bytes, b: bytes) -> bool:
    """Only header fields differ: the metadata and the data section are the same bytes, and the
    device the header records computes float32 the same way (float16 math from v69 on:
    docs/numerics.md)."""
    if len(a) < binary.HEADER_SIZE or a[binary.HEADER_SIZE:] != b[binary.HEADER_SIZE:]:
        return False
    devices = [binary.prepared_device(binary.inspect(x).header) for x in (a, b)]
    return len({d.soc.float16_math for d in devices}) == 1


# ================================================================================== context binaries
def check_mutant(env: Env, blob: bytes, mutant: bytes, baseline: dict) -> tuple[str, int]:
    """contextCreateFromBinary, contextValidateBinary and (if it loads) execution of one mutant;
    (outcome: the rule id or "loaded", the load's code)."""
    before = live_counts()
    mark = len(env.rec.records)
    code, handle = load(env, mutant)
    if code != OK:
        rule = assert_refusal(env, mark, code, CONTEXT_CODES, "contextCreateFromBinary", "mutant")
        assert handle == 0, f"contextCreateFromBinary failed ({rule}) but wrote a context handle 0x{handle:x}"
        assert live_counts() == before, \
            f"contextCreateFromBinary failed ({rule}) and left contexts/graphs behind: {before} -> {live_counts()}"
        vcode = validate(env, mutant)
        assert vcode == code, \
            f"contextValidateBinary returned {vcode}, contextCreateFromBinary {code} ({rule}) for the same bytes"
        assert live_counts() == before, f"contextValidateBinary ({rule}) leaves no context or graph behind"
        return rule, code
    try:
        assert handle and isinstance(HANDLES.lookup(handle), Context), "a loaded binary gives a live context handle"
        assert validate(env, mutant) == OK, "contextValidateBinary accepts a binary that loads"
        got = run_all(handle, mutant)
        if same_payload(mutant, blob):
            assert got == baseline, "a binary differing only in header fields computes bit-identically"
    finally:
        assert abi.call("contextFree", vp(handle), NULL) == OK, "contextFree of a loaded mutant"
    assert live_counts() == before, "contextFree releases the loaded mutant's context and graphs"
    return "loaded", OK


@pytest.fixture(scope="module")
def corpus(rich, foreign):
    return Corpus(rich[0], rich[1], foreign)


def test_unmutated_binary_loads_and_computes(env, corpus):
    assert check_mutant(env, corpus.blob, corpus.blob, corpus.outputs) == ("loaded", OK), "the original binary loads"
    assert set(corpus.outputs) == {"dense_a", "dense_b", "quant", "lora"}, "every graph ran"




# ================================================================================== System library
sys_ffi = cffi.FFI()
sys_ffi.cdef(cdef(("System/QnnSystemInterface.h",)))
sys_ffi.cdef("int vsnprintf(char *, size_t, const char *, void *);")
_libc = sys_ffi.dlopen(None)


class SystemLib:
    """Our libQnnSystem.so (cffi ABI mode), a System context and a recording System logger."""

    def __init__(self):
        self.lib = sys_ffi.dlopen(qnnemu.system_library_path())
        providers = sys_ffi.new("const QnnSystemInterface_t ***")
        n = sys_ffi.new("uint32_t *")
        assert self.lib.QnnSystemInterface_getProviders(providers, n) == OK, "QnnSystemInterface_getProviders"
        self.providers = providers
        self.t = providers[0][0].v1_14
        self.records: list[tuple[int, str]] = []
        self.callback = sys_ffi.callback("QnnLog_Callback_t", self._on_log)
        _CALLBACKS.append(self.callback)
        out = sys_ffi.new("Qnn_LogHandle_t *")
        assert self.t.systemLogCreate(self.callback, Q.QNN_LOG_LEVEL_DEBUG, out) == OK, "systemLogCreate"
        self.log = out[0]
        ctx = sys_ffi.new("QnnSystemContext_Handle_t *")
        assert self.t.systemContextCreate(ctx) == OK, "systemContextCreate"
        self.ctx = ctx[0]

    def _on_log(self, fmt, level, timestamp, args):
        try:
            buf = sys_ffi.new("char[]", 8192)
            _libc.vsnprintf(buf, 8192, fmt, args)
            self.records.append((int(level), sys_ffi.string(buf).decode("utf-8", "replace")))
        except Exception:  # never let an exception cross into C
            pass

    def close(self):
        assert self.t.systemContextFree(self.ctx) == OK, "systemContextFree"
        assert self.t.systemLogFree(self.log) == OK, "systemLogFree"

    def binary_info(self, blob: bytes) -> tuple[int, int | None]:
        """(code, numGraphs of the answer) of systemContextGetBinaryInfo."""
        buf = sys_ffi.new("char[]", blob or b"\0")
        info = sys_ffi.new("const QnnSystemContext_BinaryInfo_t **")
        size = sys_ffi.new("Qnn_ContextBinarySize_t *")
        code = self.t.systemContextGetBinaryInfo(self.ctx, buf, len(blob), info, size)
        if code != OK:
            return code, None
        root = info[0]
        v = (root.contextBinaryInfoV1, root.contextBinaryInfoV2, root.contextBinaryInfoV3)[int(root.version) - 1]
        return code, int(v.numGraphs)


@pytest.fixture(scope="module")
def system():
    if not os.path.isfile(qnnemu.system_library_path()):
        pytest.skip("libQnnSystem.so is not built (pip install -e .)")
    s = SystemLib()
    yield s
    s.close()


def check_system(system: SystemLib, mutant: bytes, load_code: int, load_rule: str) -> None:
    """systemContextGetBinaryInfo agrees with the loader: it refuses what the loader refuses
    before the rebuild (with the same rule id and the mapped code), and describes the rest."""
    mark = len(system.records)
    code, n_graphs = system.binary_info(mutant)
    assert code != Q.QNN_COMMON_ERROR_GENERAL, \
        f"systemContextGetBinaryInfo returned QNN_COMMON_ERROR_GENERAL: {system.records[mark:][-1:]}"
    # What the System library does not check: compatibility (another core API major version is
    # described, not refused) and the graph rebuild.
    described = load_code == OK or load_rule in ("QNNEMU-binary-api-version", "QNNEMU-binary-graph")
    if described:
        assert code == OK, f"systemContextGetBinaryInfo returned {code} for a binary the loader got past " \
                           f"inspection with ({load_rule}): {system.records[mark:][-1:]}"
        assert n_graphs == len(binary.inspect(mutant).graphs), "BinaryInfo numGraphs is the binary's graph count"
        return
    assert code in SYSTEM_CODES, f"systemContextGetBinaryInfo returned {code}, not a QnnSystemContext_Error_t"
    assert code == SYSTEM_FOR_CONTEXT.get(load_code), \
        f"systemContextGetBinaryInfo returned {code} where the loader returned {load_code} ({load_rule})"
    errors = [m for lv, m in system.records[mark:] if lv == Q.QNN_LOG_LEVEL_ERROR
              and "systemContextGetBinaryInfo" in m]
    # An empty buffer is the System library's own size check; everything else is the core's rule.
    want = "QNNEMU-systemContext-buffer-size" if load_rule == "QNNEMU-binary-null" else load_rule
    assert rules_in(errors) == [want], \
        f"systemContextGetBinaryInfo logs one ERROR line with rule {want} (the loader's {load_rule}): {errors}"


# ================================================================================== tests: loading
def _htp_graph_config(meta: dict, option: str) -> dict:
    return next(g for g in meta["graphs"] if g["name"] == "dense_a")["configs"]["htp"][option]


@pytest.mark.parametrize("case", ["level inf", "level nan", "hvx threads 2**64"])
def test_graph_config_values_beyond_the_c_fields_are_described(env, corpus, system, case):
    """Found by the fuzzer: a stored HTP graph config value no C field can hold (a non-finite
    optimization level, numHvxThreads beyond uint64_t) made systemContextGetBinaryInfo fail with
    QNN_COMMON_ERROR_GENERAL while the binary loads and runs.  It is now described (with the
    default for that value)."""
    def edit(meta):
        if case == "hvx threads 2**64":
            _htp_graph_config(meta, "QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS")["numHvxThreads"] = 2**64
        else:
            opt = _htp_graph_config(meta, "QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION")["optimizationOption"]
            opt["floatValue"] = {"$f": case.split()[-1]}
    mutant = with_metadata(corpus.blob, edit)
    outcome, code = check_mutant(env, corpus.blob, mutant, corpus.outputs)
    assert (outcome, code) == ("loaded", OK), f"{case}: the binary loads and runs, got {outcome} / {code}"
    check_system(system, mutant, code, outcome)


@pytest.mark.parametrize("where,value", [("graph", 5), ("graph", None), ("context", 5), ("context", [])])
def test_htp_configs_that_are_not_objects_are_malformed(env, corpus, system, where, value):
    """Found by the fuzzer: stored HTP configs that are not an object of config objects reached
    the graph build (graph) or the config merge (context) and failed there as
    QNNEMU-binary-internal, while contextValidateBinary and the System library accepted the
    binary.  They are now inconsistent metadata for every loader."""
    def edit(meta):
        configs = meta["graphs"][0]["configs"] if where == "graph" else meta["context"]["configs"]
        configs["htp"] = value
    mutant = with_metadata(corpus.blob, edit)
    outcome, code = check_mutant(env, corpus.blob, mutant, corpus.outputs)
    assert (outcome, code) == ("QNNEMU-binary-metadata", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY), \
        f"{where} configs.htp = {value!r}: refused as inconsistent metadata, got {outcome} / {code}"
    assert any("configs.htp" in m for m in env.rec.errors()[-2:]), "the log line names the field"
    check_system(system, mutant, code, outcome)


@pytest.mark.parametrize("where,value", [("graph", [0.0, 0.0]), ("graph", "HIGH"), ("context", [])])
def test_priority_configs_that_are_not_integers_are_malformed(env, corpus, system, where, value):
    """Found by the fuzzer (reproduce_failure b'AEEBQQFBK0EJQQJBAA=='): a stored graph priority
    holding an array reached the priority table at the graph rebuild and failed there as
    QNNEMU-binary-internal (an array compared with QNN_PRIORITY_UNDEFINED).  A priority that is
    no integer is now inconsistent metadata for every loader, like the other stored values."""
    def edit(meta):
        configs = meta["graphs"][0]["configs"] if where == "graph" else meta["context"]["configs"]
        configs["priority"] = binary._enc(np.array(value, np.float32)) if isinstance(value, list) else value
    mutant = with_metadata(corpus.blob, edit)
    outcome, code = check_mutant(env, corpus.blob, mutant, corpus.outputs)
    assert (outcome, code) == ("QNNEMU-binary-metadata", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY), \
        f"{where} configs.priority = {value!r}: refused as inconsistent metadata, got {outcome} / {code}"
    assert any("configs.priority" in m for m in env.rec.errors()[-2:]), "the log line names the field"
    check_system(system, mutant, code, outcome)


def with_metadata(blob: bytes, edit) -> bytes:
    """``blob`` with its metadata changed by ``edit(meta)``, re-assembled (consistent CRCs)."""
    h = binary.parse_header(blob)
    meta = json.loads(blob[h.metadata_offset:h.metadata_offset + h.metadata_size])
    edit(meta)
    return binary.assemble(h, meta, blob[h.data_offset:h.data_offset + h.data_size])


def _tensor(meta: dict, graph: str, name: str) -> dict:
    g = next(g for g in meta["graphs"] if g["name"] == graph)
    return next(t for t in g["tensors"] if t["name"] == name)


@pytest.mark.parametrize("where", ["per-tensor", "per-axis"])
def test_quantization_offset_outside_int32_is_malformed(env, corpus, system, where):
    """Found by the fuzzer: a stored quantization offset beyond int32_t (Qnn_ScaleOffset_t.offset)
    passed the metadata checks, and systemContextGetBinaryInfo then failed writing it with
    QNN_COMMON_ERROR_GENERAL.  Every loader now refuses it as inconsistent metadata."""
    def edit(meta):
        if where == "per-tensor":
            _tensor(meta, "quant", "qy")["quant"]["offset"] = 2**31
        else:
            offsets = np.array([0, 2**31, 0], np.int64)
            _tensor(meta, "quant", "qw")["quant"]["offset"] = binary._enc(offsets)
    mutant = with_metadata(corpus.blob, edit)
    outcome, code = check_mutant(env, corpus.blob, mutant, corpus.outputs)
    assert (outcome, code) == ("QNNEMU-binary-metadata", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY), \
        f"{where} offset 2**31: refused as inconsistent metadata, got {outcome} / {code}"
    assert any("offset" in m and "int32" in m for m in env.rec.errors()[-2:]), \
        "the log line says which value is out of range"
    check_system(system, mutant, code, outcome)


def test_foreign_binaries_are_refused_by_every_loader(env, corpus, system):
    """Whole foreign binaries (the vendor's libQnnHtp.so binary when it can be made, a vendor-like
    header, a qnnemu binary section, random bytes): QNNEMU-binary-magic with
    QNN_CONTEXT_ERROR_CREATE_FROM_BINARY from contextCreateFromBinary, contextValidateBinary and
    ListAsync's notification, QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY from the System library."""
    for i, blob in enumerate(corpus.foreign):
        what = f"foreign binary {i} ({len(blob)} bytes, starting {blob[:8].hex(' ')})"
        outcome, code = check_mutant(env, corpus.blob, blob, corpus.outputs)
        assert (outcome, code) == ("QNNEMU-binary-magic", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY), \
            f"{what}: contextCreateFromBinary refuses it as foreign, got {outcome} / {code}"
        check_system(system, blob, code, outcome)
        notes = Notifications()
        assert list_async(env, [blob], notes) == Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, \
            f"{what}: contextCreateFromBinaryListAsync returns the failure"
        assert [r[5] for r in notes.of(0, Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT)] == [code], \
            f"{what}: its context notification carries QNN_CONTEXT_ERROR_CREATE_FROM_BINARY"


@scaled(12)
@given(data=st.data())
def test_fuzz_create_validate_and_system_info(env, corpus, system, data):
    """Byte-level mutants through contextCreateFromBinary, contextValidateBinary and
    systemContextGetBinaryInfo."""
    mutant, how = data.draw(mutated_binaries(corpus), label="mutant")
    note(how)
    outcome, code = check_mutant(env, corpus.blob, mutant, corpus.outputs)
    check_system(system, mutant, code, outcome)
    event(outcome)


# ------------------------------------------------------------------ metadata values (past the CRCs)
def _leaves(node, path=()):
    """Paths to the values of the metadata tree (scalars, and lists of scalars such as dims)."""
    if not isinstance(node, (dict, list)) or (
            isinstance(node, list) and not any(isinstance(v, (dict, list)) for v in node)):
        yield path
    if isinstance(node, dict):
        for k in sorted(node):
            yield from _leaves(node[k], path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, path + (i,))


_any_json = st.one_of(
    st.none(), st.booleans(), st.integers(-2**63, 2**64), st.sampled_from([0, 1, 2, 3, 64, 2**31, 2**32 - 1, -1]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6), st.lists(st.integers(-2, 70), max_size=5),
    st.sampled_from([{"$f": "nan"}, {"$f": "inf"}, {"$nd": ["<f4", [2], "AAAAAAAAAAA="]}, {"$np": ["<u4", "AQAAAA=="]},
                     {"$nd": ["<i8", [99999999], ""]}, {"$x": 1}, {}]))


def _near(old):
    """Mostly a value of the same kind close to ``old`` (so the mutant passes the schema and
    reaches tensor creation, graphAddNode and finalize), sometimes any JSON value."""
    if isinstance(old, bool) or old is None:
        near = st.sampled_from([True, False, None, 0, 1])
    elif isinstance(old, int):
        near = st.integers(old - 3, old + 3) | st.sampled_from([0, 1, -1, 2 * old + 1, 0x7FFFFFFF])
    elif isinstance(old, float):
        near = st.sampled_from([0.0, -old, old / 2, 1e-30, 1e30, 5e-324])
    elif isinstance(old, str):
        near = st.sampled_from(["", "x", "y", "qx", "W", "Relu", "Conv2d", "MatMul", "qti.aisw", old + "_", "<f4",
                                "|u1", "AAAA"])
    elif isinstance(old, list):
        near = st.sampled_from([[], old[:-1], old + old[-1:], old[::-1], [0] * len(old)]) if old else st.just([1])
    else:
        near = st.just({})
    return st.one_of(near, near, near, near, near, _any_json)


def _all_paths(node, path=()):
    """Paths to every value of the metadata tree, objects and lists included."""
    yield path
    if isinstance(node, dict):
        for k in sorted(node):
            yield from _all_paths(node[k], path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _all_paths(v, path + (i,))


@st.composite
def metadata_mutants(draw, corpus: Corpus) -> tuple[bytes, str]:
    """The corpus binary with 1-3 metadata values (mostly scalars, sometimes whole objects or
    lists) replaced and, sometimes, the graph count changed; re-assembled (consistent sizes and
    CRCs)."""
    blob = corpus.blob
    h = binary.parse_header(blob)
    meta = json.loads(blob[h.metadata_offset:h.metadata_offset + h.metadata_size])
    data = blob[h.data_offset:h.data_offset + h.data_size]
    leaves = [p for p in _leaves(meta) if p]
    every = [p for p in _all_paths(meta) if p]
    hows = []
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(leaves) if draw(st.integers(0, 4)) else st.sampled_from(every),
                    label="metadata path")
        parent = meta
        try:
            for k in path[:-1]:
                parent = parent[k]
            parent[path[-1]] = value = draw(_near(parent[path[-1]]), label="value")
        except (KeyError, IndexError, TypeError):
            continue  # an earlier replacement removed an enclosing container
        hows.append(f"{'.'.join(map(str, path))}={value!r:.40}")
    count = draw(st.sampled_from([h.graph_count] * 8 + [0, h.graph_count + 1]))
    header = binary.Header(**{**h.__dict__, "graph_count": count})
    return binary.assemble(header, meta, data), "; ".join(hows)


@scaled(5)
@given(data=st.data())
def test_fuzz_metadata_values(env, corpus, system, data):
    """Metadata values replaced (sizes and CRCs consistent): the schema checks, tensor creation,
    graphAddNode's rules and finalize of the loader, through the C ABI."""
    mutant, how = data.draw(metadata_mutants(corpus), label="mutant")
    note(how)
    outcome, code = check_mutant(env, corpus.blob, mutant, corpus.outputs)
    check_system(system, mutant, code, outcome)
    event(outcome)


# ------------------------------------------------------------------ contextCreateFromBinaryListAsync
class Notifications:
    """A QnnContext_createFromBinaryNotifyFn_t recording (context, graph, name, type, param, status)."""

    def __init__(self):
        self.records: list[tuple[int, int, str | None, int, int, int]] = []
        self.callback = ffi.callback("QnnContext_createFromBinaryNotifyFn_t", self._on)
        _CALLBACKS.append(self.callback)

    def _on(self, context, graph, name, kind, param, status):
        self.records.append((abi.hval(context), abi.hval(graph), None if name == NULL else ffi.string(name).decode(),
                             int(kind), abi.hval(param), int(status)))

    def of(self, entry: int, kind: int) -> list:
        return [r for r in self.records if r[4] == 0x1000 + entry and r[3] == kind]


def list_async(env: Env, blobs: list[bytes], notes: Notifications) -> int:
    keep: list = []
    ptrs = []
    for i, blob in enumerate(blobs):
        buf = ffi.new("char[]", blob or b"\0")
        p = ffi.new("QnnContext_Params_t *")
        p.version = Q.QNN_CONTEXT_PARAMS_VERSION_1
        p.v1 = {"config": NULL, "binaryBuffer": buf, "binaryBufferSize": len(blob), "profile": NULL,
                "notifyFunc": notes.callback, "notifyParam": ffi.cast("void *", 0x1000 + i)}
        keep += [buf, p]
        ptrs.append(p)
    return abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL,
                    abi.null_terminated("QnnContext_Params_t", ptrs, keep), NULL, NULL)


@scaled(2)
@given(data=st.data())
def test_fuzz_list_async(env, corpus, data):
    """A mutant between two intact binaries through contextCreateFromBinaryListAsync: the mutant's
    context notification carries the code contextCreateFromBinary gives it, the others load and
    their notified graphs execute, the call returns the mutant's failure, nothing leaks."""
    mutant, how = data.draw(st.one_of(mutated_binaries(corpus), metadata_mutants(corpus)),
                            label="mutant")
    note(how)
    if not mutant:
        mutant = b"\0"  # an empty entry is an argument error of the whole call, not a per-binary failure
    before = live_counts()
    single, handle = load(env, mutant)
    if single == OK:
        assert abi.call("contextFree", vp(handle), NULL) == OK, "contextFree of the single load"
    notes = Notifications()
    mark = len(env.rec.records)
    code = list_async(env, [corpus.blob, mutant, corpus.blob], notes)
    ctx_notes = [notes.of(i, Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT) for i in range(3)]
    assert all(len(n) == 1 for n in ctx_notes), f"one context notification per binary: {ctx_notes}"
    statuses = [n[0][5] for n in ctx_notes]
    assert statuses == [OK, single, OK], \
        f"context notifications: the intact binaries load, the mutant gets contextCreateFromBinary's code " \
        f"{single}: {statuses}"
    try:
        if single == OK:
            assert code == OK, f"every binary loaded, the call returned {code}"
        else:
            rule = assert_refusal(env, mark, code, CONTEXT_CODES, "contextCreateFromBinaryListAsync", "mutant")
            assert code == single, f"the call returns the failed binary's code {single}, got {code} ({rule})"
            assert any("contextParams[1]" in m for m in env.errors_since(mark)), "the log names the failed entry"
            assert ctx_notes[1][0][0] == 0, "the failed binary's notification carries no context handle"
            for _, gh, *_ in notes.of(1, Q.QNN_CONTEXT_NOTIFY_TYPE_GRAPH_INIT):
                assert HANDLES.lookup(gh) is None, "graph handles announced for a failed binary are invalid"
        for i in (0, 2):
            ctx_handle = ctx_notes[i][0][0]
            assert isinstance(HANDLES.lookup(ctx_handle), Context), f"binary {i}: a live context handle is notified"
            graphs = notes.of(i, Q.QNN_CONTEXT_NOTIFY_TYPE_GRAPH_INIT)
            assert [r[2] for r in graphs] == list(corpus.outputs), f"binary {i}: one notification per graph, in order"
            for _, gh, name, *_ in graphs:
                got = execute(gh, binary.inspect(corpus.blob).graph(name))
                assert got == (OK, corpus.outputs[name]), \
                    f"binary {i}: notified graph '{name}' computes as the original"
    finally:
        for n in ctx_notes:
            if n[0][5] == OK:
                assert abi.call("contextFree", vp(n[0][0]), NULL) == OK, "contextFree of a ListAsync context"
    assert live_counts() == before, f"ListAsync leaves nothing behind once its contexts are freed: " \
                                    f"{before} -> {live_counts()}"
    event("mutant loaded" if single == OK else f"mutant refused: {rules_in(env.errors_since(mark))[:1]}")


# ================================================================================== binary sections
SECTION_TYPES = (Q.QNN_CONTEXT_SECTION_UPDATABLE, Q.QNN_CONTEXT_SECTION_UPDATABLE_WEIGHTS,
                 Q.QNN_CONTEXT_SECTION_UPDATABLE_QUANT_PARAMS)
# Section header (docs/binary-sections.md): name -> (offset, struct format).
SECTION_FIELDS = {
    "magic": (0, "8s"), "version": (8, "I"), "header_size": (12, "I"), "section": (16, "I"), "flags": (20, "I"),
    "total_size": (24, "Q"), "metadata_size": (32, "Q"), "data_offset": (40, "Q"), "data_size": (48, "Q"),
    "crc32": (56, "I"), "reserved": (60, "I"),
}


def reseal_section(blob: bytes) -> bytes:
    """``blob`` with its CRC32 recomputed (over the section with the CRC field zeroed)."""
    if len(blob) < sections.HEADER_SIZE:
        return blob
    b = bytearray(blob)
    b[56:60] = bytes(4)
    struct.pack_into("<I", b, 56, zlib.crc32(b))
    return bytes(b)


def section_bytes(ctx: int, g: int | None, kind: int) -> bytes:
    size = ffi.new("Qnn_ContextBinarySize_t *")
    assert abi.call("contextGetBinarySectionSize", vp(ctx), vp(g), kind, size) == OK, "contextGetBinarySectionSize"
    buf = ffi.new("char[]", max(1, int(size[0])))
    cb = ffi.new("QnnContext_Buffer_t *")
    cb.version = Q.QNN_CONTEXT_BUFFER_VERSION_1
    cb.v1.memType = Q.QNN_CONTEXTMEMTYPE_RAW
    cb.v1.binaryBuf.data = buf
    cb.v1.binaryBuf.dataSize = int(size[0])
    written = ffi.new("Qnn_ContextBinarySize_t *")
    assert abi.call("contextGetBinarySection", vp(ctx), vp(g), kind, cb, written, NULL, NULL) == OK, \
        "contextGetBinarySection"
    return bytes(ffi.buffer(buf, int(written[0])))


def apply_section(ctx: int, g: int | None, kind: int, blob: bytes) -> int:
    buf = ffi.new("char[]", blob or b"\0")
    cb = ffi.new("QnnContext_Buffer_t *")
    cb.version = Q.QNN_CONTEXT_BUFFER_VERSION_1
    cb.v1.memType = Q.QNN_CONTEXTMEMTYPE_RAW
    cb.v1.binaryBuf.data = buf
    cb.v1.binaryBuf.dataSize = len(blob)
    return abi.call("contextApplyBinarySection", vp(ctx), vp(g), kind, cb, NULL, NULL)


class SectionTarget:
    """A context loaded from the corpus binary, its graphs' handles, its own whole-context
    section (to restore it) and valid sections of an adapter context (other weights) to mutate."""

    def __init__(self, env: Env, corpus: Corpus):
        code, self.ctx = load(env, corpus.blob)
        assert code == OK, "setup: the target context loads"
        self.info = binary.inspect(corpus.blob)
        self.graphs = {g.name: retrieve(self.ctx, g.name) for g in self.info.graphs}
        self.restore = section_bytes(self.ctx, None, Q.QNN_CONTEXT_SECTION_UPDATABLE)
        adapter = build_rich_context(env, seed=23, keep=[])
        self.sources = [(None, kind, section_bytes(adapter, None, kind)) for kind in SECTION_TYPES]
        for name in ("lora", "quant"):
            g = retrieve(adapter, name)
            self.sources += [(name, kind, section_bytes(adapter, g, kind)) for kind in SECTION_TYPES]
        assert abi.call("contextFree", vp(adapter), NULL) == OK, "setup: contextFree of the adapter"
        self.baseline = self.outputs()

    def outputs(self) -> dict:
        out = {}
        for g in self.info.graphs:
            code, results = execute(self.graphs[g.name], g)
            assert code == OK, f"graphExecute of '{g.name}' of the section target returned {code}"
            out[g.name] = results
        return out

    def __repr__(self) -> str:
        return f"SectionTarget({len(self.sources)} source sections)"


@pytest.fixture(scope="module")
def section_target(env, corpus):
    t = SectionTarget(env, corpus)
    yield t
    assert abi.call("contextFree", vp(t.ctx), NULL) == OK, "teardown: contextFree of the section target"


@st.composite
def mutated_sections(draw, blob: bytes, foreign: list[bytes]) -> tuple[bytes, str]:
    """(mutant, how): byte mutations, header fields at boundary values or metadata values of a
    valid section; usually re-sealed so that they get past the CRC."""
    out = bytearray(blob)
    kind = draw(st.sampled_from(["flip", "byte", "insert", "delete", "truncate", "splice", "field", "field",
                                 "metadata", "metadata", "metadata", "none"]))
    how = kind
    meta_size = struct.unpack_from("<Q", blob, 32)[0]
    if kind == "flip":
        pos = draw(st.integers(0, len(out) - 1))
        out[pos] ^= 1 << draw(st.integers(0, 7))
    elif kind == "byte":
        out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
    elif kind == "insert":
        pos = draw(st.integers(0, len(out)))
        out[pos:pos] = draw(st.binary(min_size=1, max_size=70))
    elif kind == "delete":
        pos = draw(st.integers(0, len(out) - 1))
        del out[pos:pos + draw(st.integers(1, 70))]
    elif kind == "truncate":
        del out[draw(st.sampled_from([0, 8, 63, 64, 64 + meta_size, len(out) - 1]) | st.integers(0, len(out))):]
    elif kind == "splice":
        src = draw(st.sampled_from(foreign))
        chunk = src[:draw(st.integers(1, 256))]
        pos = draw(st.sampled_from([0, 64]) | st.integers(0, len(out)))
        out[pos:pos + len(chunk)] = chunk
    elif kind == "field":
        name = draw(st.sampled_from(sorted(SECTION_FIELDS)), label="section header field")
        off, fmt = SECTION_FIELDS[name]
        old = struct.unpack_from("<" + fmt, out, off)[0]
        value = draw(boundary_values(fmt, old if isinstance(old, int) else 0, len(out)))
        struct.pack_into("<" + fmt, out, off, value)
        how = f"{name}={value!r:.40}"
    elif kind == "metadata":
        meta = json.loads(blob[64:64 + meta_size])
        paths = [p for p in _leaves(meta) if p]
        path = draw(st.sampled_from(paths), label="metadata path")
        parent = meta
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = value = draw(_near(parent[path[-1]]), label="value")
        how = f"{'.'.join(map(str, path))}={value!r:.40}"
        raw = json.dumps(meta).encode()
        data_off, data_size = struct.unpack_from("<QQ", blob, 40)
        new_off = (64 + len(raw) + 63) // 64 * 64
        out = bytearray(new_off + data_size)
        out[:64] = blob[:64]
        out[64:64 + len(raw)] = raw
        out[new_off:] = blob[data_off:data_off + data_size]
        struct.pack_into("<QQQQ", out, 24, len(out), len(raw), new_off, data_size)
    sealed = kind in ("metadata", "none") or draw(st.sampled_from([True, True, True, False]))
    return (reseal_section(bytes(out)) if sealed else bytes(out)), how + (" (resealed)" if sealed else "")


@scaled(8)
@given(data=st.data())
def test_fuzz_apply_binary_section(env, corpus, section_target, data):
    """Mutated sections through contextApplyBinarySection, for the whole context or one graph and
    any section type: refused with a documented code and a logged rule id, leaving every graph
    computing bit-identically; or applied, after which the graphs execute and the context's own
    section restores the original results exactly."""
    t = section_target
    owner, kind, source = data.draw(st.sampled_from(t.sources), label="source section")
    mutant, how = data.draw(mutated_sections(source, corpus.foreign), label="mutant")
    # Mostly the arguments the section was made for, so that the mutation is what gets checked.
    target = data.draw(st.sampled_from([owner] * 6 + [None, "lora", "quant", "dense_a"]), label="graph argument")
    section = data.draw(st.sampled_from([kind] * 12 + [*SECTION_TYPES, 0, 4]), label="section argument")
    note(f"{how}; section of {owner or 'the context'} (type {kind}) applied to {target or 'the context'} as {section}")
    before = live_counts()
    mark = len(env.rec.records)
    code = apply_section(t.ctx, None if target is None else t.graphs[target], section, mutant)
    assert live_counts() == before, "contextApplyBinarySection creates no contexts or graphs"
    if code != OK:
        rule = assert_refusal(env, mark, code, SECTION_CODES, "contextApplyBinarySection", "mutated section")
        assert t.outputs() == t.baseline, \
            f"a refused section ({rule}) leaves every graph computing exactly as before"
        event(f"refused: {rule}")
        return
    event("applied")
    t.outputs()   # every graph still executes with the new values
    restored = apply_section(t.ctx, None, Q.QNN_CONTEXT_SECTION_UPDATABLE, t.restore)
    assert restored == OK, f"the context's own section applies again after an applied mutant: {restored}"
    assert t.outputs() == t.baseline, "the context's own section restores the original results exactly"


@scaled(10)
@given(data=st.data())
def test_fuzz_section_parser(section_target, corpus, data):
    """The section parser alone (fast, so many more cases): every mutant parses or raises a
    QnnError with a ``QNNEMU-section-*`` rule and a documented code -- nothing else escapes."""
    _, _, source = data.draw(st.sampled_from(section_target.sources), label="source section")
    mutant, how = data.draw(mutated_sections(source, corpus.foreign), label="mutant")
    note(how)
    try:
        sections.parse_section(mutant, "contextApplyBinarySection")
    except QnnError as e:
        assert e.rule and e.rule.startswith("QNNEMU-section-"), f"a section rule id, got {e.rule}: {e}"
        assert e.code in SECTION_CODES, f"a documented code, got {e.code}: {e}"
        event(e.rule)
    else:
        event("parsed")
