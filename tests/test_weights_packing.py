"""QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING in context binaries (QNN HTP backend documentation,
"QNN HTP Graph Config Options": "8-bit weights that are in the 4-bit range [are] stored in the
context binary as packed 4-bit"; qnnemu/core/binary.py ``PACKINGS`` / ``packing_of`` /
``pack_codes`` / ``unpack_codes``; docs/context-binary.md "Packed weights" and "Versions and
compatibility").

A packing graph's STATIC 8-bit tensors whose codes lie in the 4-bit range are stored as nibbles
and unpacked on load to the exact original bytes: the binary shrinks by the layout's exact
amount, outputs stay bit-identical, serialization stays deterministic, and malformed markers are
refused as QNNEMU-binary-metadata.  Core-level contexts come from the context-binary builders
(tests/helpers/binary_builders.py), the ABI round trip from the context Env
(tests/helpers/context_env.py).
"""
from __future__ import annotations

import dataclasses
import functools
import zlib

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.binary_builders import (
    APP_READ,
    APP_WRITE,
    NATIVE,
    S8,
    S32,
    STATIC,
    U8,
    GraphBuilder,
    assert_same_outputs,
    desc,
    load,
    loaded_graph,
    new_context,
    run,
    split,
    with_meta,
)
from helpers.context_env import Env as ContextEnv
from hypothesis import given, settings, strategies as st

from qnnemu.core import binary
from qnnemu.core.tensor import Tensor
from qnnemu.errors import QnnError
from qnnemu.headers import Q
from qnnemu.htp import packing as weights_packing

PACKING_OPTION = "QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING"
UPDATEABLE = Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC
ALIGN = 64


@pytest.fixture(autouse=True)
def _version_2_layout(monkeypatch):
    """These tests pin the packed layout of format version 2 (blobs at multiples of 64, one data
    section); serialize writes the version it reads at call time.  Version 3 adds the recorded
    plan, 4 KiB data sections and padded HMX weights (tests/test_binary_fidelity.py), and packs
    the same way."""
    monkeypatch.setattr(binary.format, "FORMAT_VERSION", 2)


def packing_configs(on: bool | None) -> dict:
    """Graph configs as graphCreate stores them; ``None``: no WEIGHTS_PACKING config at all."""
    if on is None:
        return {}
    return {"htp": {PACKING_OPTION: {"option": Q.QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING, "weightsPacking": on}}}


def conv_codes(seed: int = 3) -> np.ndarray:
    """27 int8 codes (odd: exercises the padding nibble) covering [-8, 7] end to end."""
    codes = np.random.default_rng(seed).integers(-8, 8, 27).astype(np.int8)
    codes[:2] = (-8, 7)
    return codes.reshape(3, 3, 1, 3)


def fc_codes(seed: int = 4) -> np.ndarray:
    """5 x 108 uint8 codes in [0, 15], both ends present."""
    codes = np.random.default_rng(seed).integers(0, 16, 540).astype(np.uint8)
    codes[:2] = (0, 15)
    return codes.reshape(5, 108)


def quant_graph(ctx, name: str = "g", packing: bool | None = True, w=None, fw=None, fw_type=STATIC, shared_fw=None):
    """uint8 x[1,6,6,1] -> Conv2d(SFIXED_POINT_8 w[3,3,1,3], per channel) -> Reshape ->
    FullyConnected(UFIXED_POINT_8 fw[5,108], offset -8) -> uint8 out[1,5]."""
    w = conv_codes() if w is None else w
    fw = fc_codes() if fw is None else fw
    rng = np.random.default_rng(9)
    b = GraphBuilder(ctx, name, packing_configs(packing))
    x = b.tensor("qx", (1, 6, 6, 1), U8, APP_WRITE, quant=(0.05, -128))
    scales = np.array([0.1, 0.2, 0.05], np.float32)
    qw = b.tensor("qw", (3, 3, 1, 3), S8, STATIC, w, quant={"axis": 3, "scales": scales})
    qb = b.tensor("qb", (3,), S32, STATIC, rng.integers(-500, 500, 3, dtype=np.int32),
                  quant={"axis": 0, "scales": scales * np.float32(0.05)})
    y = b.tensor("qy", (1, 6, 6, 3), U8, NATIVE, quant=(0.04, -100))
    b.node("Conv2d", "qconv", [x, qw, qb], [y], pad_amount=[[1, 1], [1, 1]])
    flat = b.tensor("flat", (1, 108), U8, NATIVE, quant=(0.04, -100))
    b.node("Reshape", "reshape", [y], [flat])
    fwt = shared_fw if shared_fw is not None else b.tensor("fw", (5, 108), U8, fw_type, fw, quant=(0.02, -8))
    fb = b.tensor("fb", (5,), S32, STATIC, rng.integers(-500, 500, 5, dtype=np.int32), quant=(0.04 * 0.02, 0))
    out = b.tensor("out", (1, 5), U8, APP_READ, quant=(0.1, -128))
    b.node("FullyConnected", "fc", [flat, fwt, fb], [out])
    b.graph.finalize()
    return b


def feeds(seed: int = 1) -> dict:
    return {"qx": np.random.default_rng(seed).integers(0, 256, (1, 6, 6, 1), dtype=np.uint8)}


def binary_of(**kw) -> tuple[bytes, GraphBuilder]:
    ctx = new_context()
    b = quant_graph(ctx, **kw)
    return binary.serialize(ctx), b


def tensors_json(blob: bytes, graph: int = 0) -> dict[str, dict]:
    _, meta, _ = split(blob)
    return {t["name"]: t for t in meta["graphs"][graph]["tensors"]}


def data_section_size(blob_sizes: list[int]) -> int:
    """The documented layout: each blob at the next multiple of 64, the section ends at the last blob."""
    rel = end = 0
    for size in blob_sizes:
        end = rel + size
        rel = (end + ALIGN - 1) // ALIGN * ALIGN
    return end


def binary_size(metadata_size: int, blob_sizes: list[int]) -> int:
    data_offset = (binary.HEADER_SIZE + metadata_size + ALIGN - 1) // ALIGN * ALIGN
    return data_offset + data_section_size(blob_sizes)


def reference_nibbles(codes: np.ndarray) -> bytes:
    """The documented packing, written out independently of binary.pack_codes: code 2k in the
    low nibble of byte k, code 2k+1 in the high one, a 0 nibble after an odd count."""
    flat = [int(c) & 0xF for c in codes.reshape(-1)] + [0]
    return bytes(flat[i] | (flat[i + 1] << 4) for i in range(0, codes.size, 2))


def expected_packed(plain: bytes, packed_codes: dict[str, tuple[np.ndarray, str]], graph: int = 0) -> bytes:
    """What the packed binary must be, derived from the unpacked one (same graph, WEIGHTS_PACKING
    false): the config flag true, a "packing" marker on each named tensor, its blob replaced by
    the nibbles (size, CRC-32) and the blobs laid out again at multiples of 64."""
    h, meta, data = split(plain)
    meta["graphs"][graph]["configs"]["htp"][PACKING_OPTION]["weightsPacking"] = True
    contents = [data[b["offset"]:b["offset"] + b["size"]] for b in meta["blobs"]]
    for t in meta["graphs"][graph]["tensors"]:
        if t["name"] in packed_codes:
            codes, packing = packed_codes[t["name"]]
            assert contents[t["blob"]] == codes.tobytes(), f"setup: {t['name']} holds the codes unpacked"
            t["packing"] = packing
            contents[t["blob"]] = reference_nibbles(codes)
    out, rel = bytearray(), 0
    for b, raw in zip(meta["blobs"], contents):
        out += bytes(rel - len(out)) + raw
        b.update(offset=rel, size=len(raw), crc32=zlib.crc32(raw))
        rel = (len(out) + ALIGN - 1) // ALIGN * ALIGN
    return binary.assemble(h, meta, bytes(out))


def make_tensor(dtype: int, codes: np.ndarray, type_: int = STATIC) -> Tensor:
    return Tensor(1, "t", type_, dtype, tuple(codes.shape), None, codes)


# ------------------------------------------------------------------------------ the packing table
ROWS = [(p.name, d) for p in binary.PACKINGS.values() for d in sorted(p.dtypes)]


@pytest.mark.parametrize("packing,dtype", ROWS)
def test_packing_table_row(packing, dtype):
    """Each row of PACKINGS: the whole 4-bit range packs and unpacks to the same bytes; one code
    just outside either end keeps the tensor unpacked."""
    p = binary.PACKINGS[packing]
    npdt = np.int8 if p.signed else np.uint8
    codes = np.arange(p.lo, p.hi + 1).astype(npdt)
    assert binary.packing_of(make_tensor(dtype, codes), True) is p, f"{packing}: codes {p.lo}..{p.hi} pack"
    raw = binary.pack_codes(codes)
    assert len(raw) == 8, f"{packing}: 16 codes take 8 bytes"
    assert binary.unpack_codes(raw, 16, p) == codes.tobytes(), f"{packing}: exact bytes back"
    info = np.iinfo(npdt)
    for outside in (p.lo - 1, p.hi + 1):
        if info.min <= outside <= info.max:
            bad = np.append(codes, outside).astype(npdt)
            assert binary.packing_of(make_tensor(dtype, bad), True) is None, f"{packing}: code {outside} is not packed"
    assert binary.packing_of(make_tensor(dtype, codes), False) is None, f"{packing}: WEIGHTS_PACKING off"
    assert binary.packing_of(make_tensor(dtype, codes, UPDATEABLE), True) is None, \
        f"{packing}: UPDATEABLE_STATIC is never packed"
    assert binary.packing_of(make_tensor(dtype, codes[:1]), True) is None, f"{packing}: one code saves nothing"


@pytest.mark.parametrize("dtype,codes", [
    (Q.QNN_DATATYPE_SFIXED_POINT_16, np.zeros(4, np.int16)),
    (Q.QNN_DATATYPE_UFIXED_POINT_16, np.zeros(4, np.uint16)),
    (Q.QNN_DATATYPE_SFIXED_POINT_32, np.zeros(4, np.int32)),
    (Q.QNN_DATATYPE_FLOAT_32, np.zeros(4, np.float32)),
    (Q.QNN_DATATYPE_BOOL_8, np.zeros(4, np.uint8)),
])
def test_other_types_are_not_packed(dtype, codes):
    assert binary.packing_of(make_tensor(dtype, codes), True) is None, f"{dtype}: only the 8-bit integer types pack"


def test_nibble_order():
    """Code 2k in the low nibble of byte k, 2k+1 in the high nibble, an odd tail padded with 0."""
    assert binary.pack_codes(np.array([1, 2, -1], np.int8)) == bytes([0x21, 0x0F]), "documented nibble order"
    assert binary.unpack_codes(bytes([0x21, 0xFF]), 3, binary.PACKINGS["int4"]) == bytes([1, 2, 0xFF]), \
        "the padding nibble is ignored"


# ------------------------------------------------------------------------------ serialize / load
def test_packed_binary_is_smaller_by_the_layout_amount_and_runs_bit_identically():
    packed, b_on = binary_of(packing=True)
    plain, b_off = binary_of(packing=False)
    on, off = tensors_json(packed), tensors_json(plain)
    assert (on["qw"].get("packing"), on["fw"].get("packing")) == ("int4", "uint4"), "both weights packed"
    assert all("packing" not in t for n, t in on.items() if n not in ("qw", "fw")), "nothing else is packed"
    assert all("packing" not in t for t in off.values()), "packing off: no marker"
    h_on, meta_on, _ = split(packed)
    h_off, meta_off, _ = split(plain)
    assert h_on.format_version == h_off.format_version == 2, "written as version 2"
    sizes_on = [b["size"] for b in meta_on["blobs"]]
    sizes_off = [b["size"] for b in meta_off["blobs"]]
    # qw 27 codes -> 14 bytes, qb 3 x int32, fw 540 codes -> 270 bytes, fb 5 x int32
    assert sizes_off == [27, 12, 540, 20] and sizes_on == [14, 12, 270, 20], "blob sizes: 8-bit codes halved"
    assert sum(sizes_off) - sum(sizes_on) == 283, "567 weight bytes stored in 284"
    assert packed == expected_packed(plain, {"qw": (conv_codes(), "int4"), "fw": (fc_codes(), "uint4")}), \
        "the packed binary is the unpacked one with exactly the documented changes"
    assert len(packed) == binary_size(h_on.metadata_size, sizes_on), "packed binary size from the layout"
    assert len(plain) == binary_size(h_off.metadata_size, sizes_off), "unpacked binary size from the layout"
    # Metadata: a ',"packing":"int4"' and a ',"packing":"uint4"' key, "true" instead of "false",
    # and the blob sizes / CRC-32s (same number of digits here: 27 -> 14, 540 -> 270).
    marker_bytes = len(',"packing":"int4"') + len(',"packing":"uint4"') + len("true") - len("false")
    crc_digits = (sum(len(str(b["crc32"])) for b in meta_on["blobs"])
                  - sum(len(str(b["crc32"])) for b in meta_off["blobs"]))
    assert h_on.metadata_size - h_off.metadata_size == marker_bytes + crc_digits, "metadata grows by the markers"
    # Data section: 724 bytes unpacked (qw@0, qb@64, fw@128, fb@704), 468 packed (fb@448).
    assert (h_off.data_size, h_on.data_size) == (724, 468), "data sections"
    assert len(plain) - len(packed) == (binary_size(h_off.metadata_size, sizes_off)
                                        - binary_size(h_on.metadata_size, sizes_on)) == 256, \
        "the packed binary is 256 bytes smaller (283 bytes of weights saved, less the 64-byte alignment)"
    want = run(b_off.graph, feeds())
    assert len(set(want["out"].ravel().tolist()) - {0, 255}) >= 3, f"(control) unsaturated outputs: {want}"
    assert_same_outputs(want, run(b_on.graph, feeds()), "packing changes nothing before saving")
    for blob, what in ((packed, "packed"), (plain, "unpacked")):
        ctx = load(blob)
        try:
            g = loaded_graph(ctx, "g")
            assert g.tensors[g.by_name["qw"]].data.tobytes() == conv_codes().tobytes(), f"{what}: exact int8 codes"
            assert g.tensors[g.by_name["fw"]].data.tobytes() == fc_codes().tobytes(), f"{what}: exact uint8 codes"
            assert_same_outputs(want, run(g, feeds()), f"{what} binary after loading")
        finally:
            ctx.free()


@pytest.mark.parametrize("qw_code,fw_code", [(8, 3), (-9, 3), (127, 3), (0, 16), (0, 255)],
                         ids=["int8 8", "int8 -9", "int8 127", "uint8 16", "uint8 255"])
def test_weights_outside_the_4bit_range_are_not_packed(qw_code, fw_code):
    w, fw = conv_codes(), fc_codes()
    w.flat[5], fw.flat[7] = qw_code, fw_code
    packed, _ = binary_of(packing=True, w=w, fw=fw)
    plain, _ = binary_of(packing=False, w=w, fw=fw)
    t = tensors_json(packed)
    assert ("packing" in t["qw"]) == (-8 <= qw_code <= 7), f"qw with code {qw_code}: packed only in range"
    assert ("packing" in t["fw"]) == (0 <= fw_code <= 15), f"fw with code {fw_code}: packed only in range"
    _, meta, data = split(packed)
    outside = [(n, c) for n, c in (("qw", w), ("fw", fw)) if "packing" not in t[n]]
    assert len(outside) == 1, "each case puts exactly one tensor outside its range"
    for name, codes in outside:
        blob = meta["blobs"][t[name]["blob"]]
        assert data[blob["offset"]:blob["offset"] + blob["size"]] == codes.tobytes(), \
            f"{name}: stored as its own 8-bit bytes"
    assert tensors_json(plain)[outside[0][0]] == t[outside[0][0]], "the unpacked tensor's metadata as with packing off"
    ctx = load(packed)
    try:
        g = loaded_graph(ctx, "g")
        assert g.tensors[g.by_name["qw"]].data.tobytes() == w.tobytes(), "qw loads exactly"
        assert g.tensors[g.by_name["fw"]].data.tobytes() == fw.tobytes(), "fw loads exactly"
    finally:
        ctx.free()


def test_updateable_and_context_tensors_are_not_packed():
    ctx = new_context()
    shared = ctx.create_tensor(desc("shared_fw", (5, 108), U8, STATIC, fc_codes(), quant=(0.02, -8)))
    quant_graph(ctx, "ctx_w", shared_fw=shared)
    quant_graph(ctx, "upd_w", fw_type=UPDATEABLE)
    blob = binary.serialize(ctx)
    _, meta, _ = split(blob)
    assert "packing" not in meta["context"]["tensors"][0], "a context tensor is never packed"
    assert "packing" not in tensors_json(blob, 1)["fw"], "an UPDATEABLE_STATIC tensor is never packed"
    assert tensors_json(blob, 0)["qw"]["packing"] == "int4" and tensors_json(blob, 1)["qw"]["packing"] == "int4", \
        "the graphs' STATIC weights are"
    ctx.free()


def test_packing_off_leaves_the_bytes_unchanged(monkeypatch):
    """WEIGHTS_PACKING false (or absent) stores every tensor as before: same tensors and data
    section as without the config, the same bytes as a serializer that never packs."""
    off, _ = binary_of(packing=False)
    absent, _ = binary_of(packing=None)
    assert tensors_json(off) == tensors_json(absent), "tensor metadata as without the config"
    assert split(off)[2] == split(absent)[2], "data section as without the config"
    monkeypatch.setattr(weights_packing, "packing_of", lambda tensor, enabled: None)
    never, _ = binary_of(packing=False)
    assert never == off, "packing off: byte for byte what a never-packing serializer writes"
    still_plain, _ = binary_of(packing=True)
    assert split(still_plain)[2] == split(off)[2], "(control) with packing_of disabled nothing is packed"


def test_determinism_and_reserialization():
    first, _ = binary_of(packing=True)
    second, _ = binary_of(packing=True)
    assert first == second, "the same graph gives the same bytes"
    for defer in (False, True):
        ctx = load(first, defer_graphs=defer)
        try:
            assert binary.serialize(ctx) == first, f"a loaded packed context (defer={defer}) serializes to its bytes"
        finally:
            ctx.free()


def test_weight_sharing_shares_packed_blobs():
    sharing = {"htp": {"QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED": {"option": 1,
                                                                              "weightSharingEnabled": True}}}
    ctx = new_context(sharing)
    quant_graph(ctx, "a")
    quant_graph(ctx, "b")
    quant_graph(ctx, "plain", packing=False)
    blob = binary.serialize(ctx)
    a, b, plain = (tensors_json(blob, i) for i in range(3))
    assert a["fw"]["blob"] == b["fw"]["blob"] and a["qw"]["blob"] == b["qw"]["blob"], "packed weights stored once"
    assert plain["fw"]["blob"] != a["fw"]["blob"], "an unpacked copy of the same weights is another blob"
    assert plain["fb"]["blob"] == a["fb"]["blob"], "(control) unpacked biases are shared as before"
    loaded = load(blob)
    try:
        ga, gb = loaded_graph(loaded, "a"), loaded_graph(loaded, "b")
        wa, wb = ga.tensors[ga.by_name["fw"]].data, gb.tensors[gb.by_name["fw"]].data
        assert np.shares_memory(wa, wb), "graphs sharing a packed blob share one unpacked array"
        assert wa.tobytes() == fc_codes().tobytes(), "exact codes"
        assert_same_outputs(run(ga, feeds()), run(loaded_graph(loaded, "plain"), feeds()), "packed vs unpacked graph")
    finally:
        loaded.free()
        ctx.free()


# ------------------------------------------------------------------------------ versions
def as_version_1(blob: bytes, edit=None) -> bytes:
    h, meta, data = split(blob)
    meta["version"] = 1
    if edit is not None:
        edit(meta)
    return binary.assemble(dataclasses.replace(h, format_version=1), meta, data)


def test_version_1_binaries_still_load():
    plain, b = binary_of(packing=False)
    old = as_version_1(plain)
    assert binary.parse_header(old).format_version == 1, "a format-1 binary"
    ctx = load(old)
    try:
        assert_same_outputs(run(b.graph, feeds()), run(loaded_graph(ctx, "g"), feeds()), "format-1 binary")
    finally:
        ctx.free()
    with pytest.raises(QnnError) as e:
        load(old, compatibility="strict")
    assert (e.value.code, e.value.rule) == (Q.QNN_CONTEXT_ERROR_BINARY_SUBOPTIMAL,
                                            "QNNEMU-binary-suboptimal-version"), \
        "STRICT: a format-1 binary is older than the current version (suboptimal)"


def test_a_version_1_reader_refuses_packed_binaries(monkeypatch):
    packed, _ = binary_of(packing=True)
    monkeypatch.setattr(binary.format, "FORMAT_VERSION", 1)  # what parse_header reads
    with pytest.raises(QnnError) as e:
        load(packed)
    assert (e.value.code, e.value.rule) == (Q.QNN_CONTEXT_ERROR_BINARY_VERSION, "QNNEMU-binary-version-future"), \
        "a reader of version 1 refuses a version-2 binary instead of misreading its nibbles"


# ------------------------------------------------------------------------------ malformed markers
def _set(name: str, key: str, value):
    def edit(meta):
        t = next(t for t in meta["graphs"][0]["tensors"] if t["name"] == name)
        if value is _DROP:
            del t[key]
        else:
            t[key] = value
    return edit


_DROP = object()
TENSOR_INDEX = {"qx": 0, "qw": 1, "qb": 2, "fw": 5}

BAD_MARKERS = {
    "unknown packing": (True, _set("qw", "packing", "int3"), "qw", "packing"),
    "packing not a string": (True, _set("qw", "packing", 4), "qw", "packing"),
    "signed marker on uint8": (True, _set("fw", "packing", "int4"), "fw", "packing"),
    "unsigned marker on int8": (True, _set("qw", "packing", "uint4"), "qw", "packing"),
    "marker on an int32 bias": (True, _set("qb", "packing", "int4"), "qb", "packing"),
    "marker on a graph input": (True, _set("qx", "packing", "uint4"), "qx", "packing"),
    "marker dropped": (True, _set("qw", "packing", _DROP), "qw", "blob"),
    "marker on an unpacked blob": (False, _set("qw", "packing", "int4"), "qw", "blob"),
}


@pytest.mark.parametrize("case", list(BAD_MARKERS))
def test_malformed_packing_marker_is_refused(case):
    packed, edit, tensor, _ = BAD_MARKERS[case]
    blob = with_meta(binary_of(packing=packed)[0], edit)
    path = f"graphs[0].tensors[{TENSOR_INDEX[tensor]}]"
    for call, func in ((lambda: load(blob), "contextCreateFromBinary"),
                       (lambda: binary.validate(blob), "contextValidateBinary")):
        with pytest.raises(QnnError) as e:
            call()
        assert e.value.code == Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, f"{case}: {func} error code"
        assert e.value.rule == "QNNEMU-binary-metadata", f"{case}: {func} rule id"
        assert e.value.detail.startswith(f"{func}:") and path in e.value.detail, \
            f"{case}: message names {func} and {path}: {e.value}"


_MARKER_VALUES = st.one_of(st.sampled_from(["int4", "uint4", "", "INT4", "int8"]), st.none(), st.integers(-3, 300),
                           st.booleans(), st.lists(st.just("int4"), max_size=2), st.text(max_size=6))


@settings(max_examples=60, deadline=None)
@given(markers=st.dictionaries(st.sampled_from(sorted(TENSOR_INDEX) + ["qy", "flat", "fb", "out"]),
                               st.one_of(st.just(_DROP), _MARKER_VALUES), min_size=1, max_size=3))
def test_marker_fuzz_loads_exactly_or_is_refused(markers):
    """Any set of packing markers: the binary loads with the exact codes or is refused with a
    QnnContext error code -- never misread, never another exception."""
    packed = packed_blob_once()
    blob = packed
    for name, value in markers.items():
        if value is _DROP and "packing" not in tensors_json(blob)[name]:
            continue
        blob = with_meta(blob, _set(name, "packing", value))
    try:
        ctx = load(blob)
    except QnnError as e:
        assert e.code == Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, f"{markers}: {e}"
        return
    try:
        g = loaded_graph(ctx, "g")
        assert g.tensors[g.by_name["qw"]].data.tobytes() == conv_codes().tobytes(), f"{markers}: qw exact"
        assert g.tensors[g.by_name["fw"]].data.tobytes() == fc_codes().tobytes(), f"{markers}: fw exact"
    finally:
        ctx.free()


@functools.lru_cache(maxsize=1)
def packed_blob_once() -> bytes:
    return binary_of(packing=True)[0]


def test_packing_marker_in_a_version_1_binary_is_refused():
    blob = as_version_1(binary_of(packing=True)[0])
    with pytest.raises(QnnError) as e:
        load(blob)
    assert (e.value.code, e.value.rule) == (Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-metadata"), \
        "format 1 has no packed tensors"
    assert "graphs[0].tensors[1].packing" in str(e.value) and "format version 1" in str(e.value), str(e.value)


# ------------------------------------------------------------------------------ through the C ABI
@pytest.fixture
def env(qnn_abi):
    e = ContextEnv()
    yield e
    e.close()


W_CODES = np.random.default_rng(5).integers(-8, 8, (8, 64)).astype(np.int8)   # 512 codes in [-8, 7]
B_CODES = np.random.default_rng(6).integers(-200, 200, 8).astype(np.int32)


def abi_graph(env, ctx: int, packing: bool) -> int:
    """graphCreate with QnnHtpGraph_CustomConfig_t WEIGHTS_PACKING; uint8 x[1,64] ->
    FullyConnected(SFIXED_POINT_8 w[8,64] in [-8,7], SFIXED_POINT_32 bias[8]) -> uint8 y[1,8]."""
    cc = ffi.new("QnnHtpGraph_CustomConfig_t *")
    cc.option = Q.QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING
    cc.weightsPacking = packing
    cfg = ffi.new("QnnGraph_Config_t *")
    cfg.option, cfg.customConfig = Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM, cc
    env.keep += [cc, cfg]
    code, g = abi.create("graphCreate", vp(ctx), abi.cstr("qfc", env.keep),
                         abi.null_terminated("QnnGraph_Config_t", [cfg], env.keep))
    assert code == OK, f"graphCreate with WEIGHTS_PACKING={packing}: {env.rec.errors()[-1:]}"
    x = env.create_tensor(g, abi.tensor("x", (1, 64), Q.QNN_DATATYPE_UFIXED_POINT_8, quant=(0.05, -128)))
    w = env.create_tensor(g, abi.tensor("w", (8, 64), S8, STATIC, data=W_CODES, quant=(0.1, 0)))
    bias = env.create_tensor(g, abi.tensor("b", (8,), S32, STATIC, data=B_CODES,
                                           quant=(0.005, 0)))
    y = env.create_tensor(g, abi.tensor("y", (1, 8), Q.QNN_DATATYPE_UFIXED_POINT_8, APP_READ, quant=(0.5, -128)))
    op = abi.op_config("fc", "FullyConnected", [x, w, bias], [y])
    env.keep.append(op)
    assert abi.call("graphAddNode", vp(g), op) == OK, "graphAddNode"
    assert abi.call("graphFinalize", vp(g), NULL, NULL) == OK, "graphFinalize"
    return g


OK = Q.QNN_SUCCESS
X_CODES = np.random.default_rng(7).integers(0, 256, (1, 64)).astype(np.uint8)


def abi_run(env, g: int) -> np.ndarray:
    inp = abi.tensor("x", (1, 64), Q.QNN_DATATYPE_UFIXED_POINT_8, quant=(0.05, -128))
    out = abi.tensor("y", (1, 8), Q.QNN_DATATYPE_UFIXED_POINT_8, APP_READ, quant=(0.5, -128))
    y = np.zeros((1, 8), np.uint8)
    abi.set_buffer(inp, X_CODES.copy())
    abi.set_buffer(out, y)
    code = abi.call("graphExecute", vp(g), abi.tensor_array([inp], env.keep), 1,
                    abi.tensor_array([out], env.keep), 1, NULL, NULL)
    assert code == OK, f"graphExecute: {env.rec.errors()[-1:]}"
    return y


def test_abi_round_trip(env):
    blobs, want = {}, {}
    for packing in (True, False):
        ctx = env.context()
        g = abi_graph(env, ctx, packing)
        want[packing] = abi_run(env, g)
        blobs[packing] = env.get_binary(ctx)   # contextGetBinarySize == writtenBufferSize checked there
        env.free_context(ctx)
    assert want[True].tobytes() == want[False].tobytes(), "packing does not change execution"
    assert len(set(want[True].ravel().tolist()) - {0, 255}) >= 4, f"(control) unsaturated outputs: {want[True]}"
    packed, plain = blobs[True], blobs[False]
    assert packed == expected_packed(plain, {"w": (W_CODES, "int4")}), \
        "the packed binary is the unpacked one with the documented changes (512 weight bytes -> 256)"
    h_on, h_off = binary.parse_header(packed), binary.parse_header(plain)
    # w at 0 (256 bytes packed / 512 unpacked), then the 32-byte bias: 288 vs 544 bytes of data.
    assert [b.size for b in binary.inspect(packed).blobs] == [256, 32], "packed w: 256 bytes"
    assert (h_on.data_size, h_off.data_size) == (288, 544), "data sections"
    assert len(packed) == binary_size(h_on.metadata_size, [256, 32]), "packed size from the layout"
    assert len(plain) - len(packed) == 256 + (h_off.data_offset - h_on.data_offset), \
        "contextGetBinarySize: smaller by the 256 weight bytes saved (and any metadata alignment change)"
    code, loaded = env.load(packed)
    assert code == OK, f"contextCreateFromBinary of the packed binary: {env.rec.errors()[-1:]}"
    got = abi_run(env, env.retrieve(loaded, "qfc"))
    assert got.tobytes() == want[True].tobytes(), "bit-identical after the ABI round trip"
    assert env.get_binary(loaded) == packed, "the loaded context gives the same bytes"
    env.free_context(loaded)
    from qnnemu.system_client import SystemLibrary
    with SystemLibrary() as system:
        info = {k: system.binary_info(blob, details=True) for k, blob in blobs.items()}
    for packing, blob in blobs.items():
        assert (info[packing]["context_blob_size"], info[packing]["binary_size"]) == (len(blob), len(blob)), \
            f"System library (packing={packing}): contextBlobSize is the binary's size"
    [g_on], [g_off] = info[True]["graphs"], info[False]["graphs"]
    assert (g_on["inputs"], g_on["outputs"]) == (g_off["inputs"], g_off["outputs"]), \
        "System library: graph inputs/outputs described the same with or without packing"
    assert [t["name"] for t in g_on["inputs"]] == ["x"] and g_on["outputs"][0]["dims"] == [1, 8], "(control) I/O"
