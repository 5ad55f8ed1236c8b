"""The HTP's op support by arch and data type (QNN HTP backend documentation, "QNN HTP
Supported Operations"; QnnBackend_validateOpConfig, QnnGraph_addNode, QnnGraph_finalize,
QnnTensor_createGraphTensor): what the vendor's HTP backend refuses, qnnemu refuses too.

The data, ``op_support.json`` beside this module, is measured: tools/probe_op_support.py builds
every registered op (tools/op_support_cases.py) in every data type at every rank on every arch
on the vendor's x86-64 libQnnHtp.so (docs/op-support.md). Per op (or per *variant*, an op with a
parameter value the HTP treats apart, e.g. ``ScatterElements[reduction=3]``) and arch it holds
the data type sets the HTP lists and takes, the sweep's verdicts at validation and at graph
finalize, and per data type what tensor creation refuses.

The checks, each an error rule (qnnemu/rules.py's principle: refuse what the vendor refuses,
with a better message):

- ``backendValidateOpConfig`` (:func:`check_validate`): an op the HTP has no implementation of
  (``QNNEMU-htp-op-unsupported``), a data type set it does not take
  (``QNNEMU-htp-op-dtype``), a rank it does not take (``QNNEMU-htp-op-rank``), a parameter
  value it does not take (``QNNEMU-htp-op-variant``) -- code
  QNN_OP_PACKAGE_ERROR_VALIDATION_FAILURE, as the vendor's;
- ``graphAddNode`` (:func:`check_add`): what the vendor's graphAddNode refuses (16-bit activations
  with 16-bit weights before v73, ...) (``QNNEMU-htp-op-add``) -- QNN_GRAPH_ERROR_INVALID_OP_CONFIG;
- ``graphFinalize`` (:func:`check_finalize`): a node the HTP cannot create on the device
  (``QNNEMU-htp-op-finalize``), what the vendor's one-node graph failed on in every shape the probe
  built it in (a data type set validation takes: only when it failed at every rank validation
  took it at, or no kernel exists for it) -- code QNN_GRAPH_ERROR_FINALIZE_FAILED;
- ``tensorCreateGraphTensor`` (:func:`check_tensor`): a data type the HTP does not hold
  (``QNNEMU-htp-tensor-dtype``), the vendor's code.

``graphAddNode`` checks nothing else: the vendor's takes what its validation refuses (it
computes a UINT_32 ElementWiseAdd, for one) and leaves the rest to finalize.

The device is the graph's (``qnnemu.htp.settings.device_model``); for backendValidateOpConfig,
which has no graph, the newest live device (the vendor's SoC setting is process-wide too, and
outlives its device), else the default device. An arch without data of its own uses the newest measured arch below it
(v85: v81's).

Escape hatch: ``QNNEMU_OP_SUPPORT=all`` (environment, read at every check) turns every check
here off, for the emulator's own reference runs of ops or data types the HTP does not take;
the default ``htp`` applies them.
"""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..headers import Q
from ..location import Location
from ..rules import fail
from ..spec import dtypes

DATA_PATH = Path(__file__).with_name("op_support.json")
ENV = "QNNEMU_OP_SUPPORT"
MODES = ("htp", "all")

VALIDATION_FAILURE = int(Q.QNN_OP_PACKAGE_ERROR_VALIDATION_FAILURE)
FINALIZE_FAILED = int(Q.QNN_GRAPH_ERROR_FINALIZE_FAILED)
ADD_REFUSED = int(Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG)


def enabled(func: str = "") -> bool:
    """The checks apply (``QNNEMU_OP_SUPPORT`` unset or ``htp``); ``all`` turns them off. Any
    other value fails the calling function (``func``) with rule QNNEMU-env-op-support."""
    mode = os.environ.get(ENV, "htp").strip().lower() or "htp"
    if mode not in MODES:
        fail(Location(func).field(ENV), "QNNEMU-env-op-support",
             f"'{mode}' is not one of {', '.join(MODES)} (htp: refuse what the HTP "
             f"refuses; all: the emulator's reference runs)", code=Q.QNN_COMMON_ERROR_INVALID_ARGUMENT)
    return mode == "htp"


# ---- variants: parameter values the HTP treats apart ------------------------------------------------
_POOLS = {"PoolAvg2d": 2, "PoolMax2d": 2, "PoolAvg3d": 3, "PoolMax3d": 3}


def _ceil_window_on_padding(shape, params, nsp: int) -> bool:
    """A CEIL pool whose last window would start past the input and its leading padding (ONNX
    drops that window; the HTP counts it and so takes no output shape without it)."""
    if int(params.get("rounding_mode") or 0) != int(Q.QNN_OP_POOL_MAX_2D_ROUNDING_MODE_CEIL):
        return False
    try:
        k = np.asarray(params["filter_size"], np.int64).reshape(-1)
        s = np.asarray(params["stride"], np.int64).reshape(-1)
        pad = np.asarray(params.get("pad_amount", np.zeros((nsp, 2))), np.int64).reshape(nsp, 2)
    except (KeyError, ValueError):
        return False
    for i in range(nsp):
        size = int(shape[1 + i])
        span = size + int(pad[i].sum()) - int(k[i])
        if span < 0 or s[i] < 1:
            continue
        out = -(-span // int(s[i])) + 1
        if (out - 1) * int(s[i]) >= size + int(pad[i][0]):
            return True
    return False


def variant_key(op_type: str, params: dict[str, Any], inputs: Sequence) -> str | None:
    """The variant of a node whose support the HTP decides apart from its op's (None: the
    op's own): ``params`` are the op's parsed parameter values, ``inputs`` its input specs."""
    if op_type in ("ElementWiseUnary", "ElementWiseBinary", "ElementWiseNeuron"):
        return f"operation={int(params.get('operation') or 0)}"
    if op_type in ("ScatterElements", "ScatterNd"):
        red = int(params.get("reduction") or 0)
        return f"reduction={red}" if red else None
    if op_type in _POOLS and inputs and inputs[0] is not None:
        if _ceil_window_on_padding(inputs[0].shape, params, _POOLS[op_type]):
            return "ceil-window-on-padding"
        return None
    if op_type == "StridedSlice" and int(params.get("new_axes_mask") or 0):
        return "new-axes"
    return None


_ENUMS = {"ElementWiseUnary": "QNN_OP_ELEMENT_WISE_UNARY_OPERATION_",
          "ElementWiseBinary": "QNN_OP_ELEMENT_WISE_BINARY_OPERATION_",
          "ElementWiseNeuron": "QNN_OP_ELEMENT_WISE_NEURON_OPERATION_",
          "ScatterElements": "QNN_OP_SCATTER_ELEMENTS_REDUCTION_", "ScatterNd": "QNN_OP_SCATTER_ND_REDUCTION_"}


def describe_variant(op_type: str, key: str) -> str:
    """A variant key in words (``reduction 3 (MAX)``)."""
    if key == "ceil-window-on-padding":
        return ("rounding_mode CEIL with a last window that starts on the padding (the HTP counts that "
                "window, ONNX drops it: the HTP's output is one longer than the dropped shape)")
    if key == "new-axes":
        return "a non-zero new_axes_mask"
    name, _, value = key.partition("=")
    label = Q.enum(_ENUMS.get(op_type, "-")).get(int(value), "") if value.isdigit() else ""
    return f"{name} {value}" + (f" ({label.removeprefix(_ENUMS[op_type])})" if label else "")


def entry_name(op_type: str, key: str | None) -> str:
    return f"{op_type}[{key}]" if key else op_type


# ---- signatures ----------------------------------------------------------------------------------
def short(dtype: int) -> str:
    return dtypes.name(dtype).removeprefix("QNN_DATATYPE_")


def signature(inputs: Sequence, outputs: Sequence) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The node's I/O data type set: each input's type by position (``-`` for an absent
    optional input; trailing absent inputs left off), each output's."""
    ins = ["-" if t is None else short(t.dtype) for t in inputs]
    while ins and ins[-1] == "-":
        ins.pop()
    return tuple(ins), tuple(short(t.dtype) for t in outputs)


def sig_text(sig) -> str:
    return ",".join(sig[0]) + "->" + ",".join(sig[1])


def normalized(text: str) -> str:
    """A signature text without trailing absent inputs (as :func:`signature` makes them)."""
    ins, outs = text.split("->")
    parts = ins.split(",") if ins else []
    while parts and parts[-1] == "-":
        parts.pop()
    return ",".join(parts) + "->" + outs


def parse_sig(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    ins, outs = text.split("->")
    return (tuple(ins.split(",")) if ins else (), tuple(outs.split(",")) if outs else ())


def set_matches(listed, sig) -> bool:
    """Whether a listed data type set takes the node's: every present input and every output
    has the listed type of its position (a variadic last input repeats its listed type)."""
    for got_all, want_all in ((sig[0], listed[0]), (sig[1], listed[1])):
        if not want_all and got_all:
            return False
        for k, got in enumerate(got_all):
            if got == "-":
                continue
            want = want_all[k] if k < len(want_all) else want_all[-1]
            if got != want:
                return False
    return True


def node_rank(inputs: Iterable, outputs: Iterable) -> int:
    return max((len(t.shape) for t in (*inputs, *outputs) if t is not None), default=0)


# ---- the measured data ---------------------------------------------------------------------------
class Support:
    """One entry (op or op variant) on one arch, compiled from the json."""

    def __init__(self, raw: dict):
        n = normalized
        self.sets = [parse_sig(t) for t in raw.get("sets", ())]
        self.accepted = {n(k): set(v) for k, v in raw.get("accepted", {}).items()}
        self.validate = {n(k): {int(r): kind for r, kind in v.items()} for k, v in raw.get("validate", {}).items()}
        self.finalize = {n(k): {int(r): kind for r, kind in v.items()} for k, v in raw.get("finalize", {}).items()}
        self.finalized = {n(k): set(v) for k, v in raw.get("finalized", {}).items()}
        self.ranks_measured = {r for v in self.validate.values() for r in v} | {
            r for v in self.accepted.values() for r in v}
        self.ranks_accepted = {r for v in self.accepted.values() for r in v}
        kinds = {kind for v in self.validate.values() for kind in v.values()}
        # No configuration taken and "no such op" among the refusals (the others: ranks beyond
        # any tensor): the HTP has no implementation.
        self.unknown_op = not self.accepted and "unknown-op" in kinds
        graph_ranks = {r for v in self.finalize.values() for r, k in v.items() if k != "add"} | {
            r for v in self.finalized.values() for r in v}
        self.finalize_ranks_failed = {r for r in graph_ranks
                                      if not any(r in v for v in self.finalized.values())}
        self.never_finalized = bool(self.finalize) and not self.finalized

    def taken_sets(self) -> list:
        """What the HTP takes: the listed sets, else the sweep's accepted signatures."""
        return self.sets or [parse_sig(t) for t in sorted(self.accepted)]


@functools.lru_cache(maxsize=1)
def data() -> dict:
    with open(DATA_PATH) as f:
        return json.load(f)


@functools.cache
def measured_archs() -> tuple[int, ...]:
    return tuple(sorted(int(a) for a in data()["archs"]))


def data_arch(arch: int) -> int:
    """The measured arch whose data stands for ``arch``: itself, else the newest below it, else
    the oldest measured."""
    archs = measured_archs()
    below = [a for a in archs if a <= int(arch)]
    return below[-1] if below else archs[0]


@functools.cache
def support(name: str, arch: int) -> Support | None:
    per_arch = data()["ops"].get(name)
    if not per_arch:
        return None
    raw = per_arch.get(str(data_arch(arch)))
    while isinstance(raw, str) and raw.startswith("="):   # the same entry as another arch's
        raw = per_arch.get(raw[1:])
    return Support(raw) if raw is not None else None


def vendor_build() -> str:
    return data().get("vendor", {}).get("build_id", "?")


# ---- describing what the HTP takes -----------------------------------------------------------------
_FAMILIES = (("FLOAT_32", "float32"), ("FLOAT_16", "float16"), ("BFLOAT_16", "bfloat16"),
             ("UFIXED_POINT_8", "8-bit fixed point"), ("SFIXED_POINT_8", "8-bit fixed point"),
             ("UFIXED_POINT_16", "16-bit fixed point"), ("SFIXED_POINT_16", "16-bit fixed point"),
             ("SFIXED_POINT_32", "32-bit fixed point"), ("UFIXED_POINT_32", "32-bit fixed point"))


def describe_types(names: Iterable[str]) -> str:
    """``float32/float16, 8/16-bit fixed point, INT_32`` for a collection of data type names."""
    names = set(names)
    floats = [label for n, label in _FAMILIES[:3] if n in names]
    bits = [b for b in ("8", "16", "32") if f"UFIXED_POINT_{b}" in names or f"SFIXED_POINT_{b}" in names]
    parts = []
    if floats:
        parts.append("/".join(floats))
    if bits:
        parts.append("/".join(bits) + "-bit fixed point")
    fam = {n for n, _ in _FAMILIES}
    parts += sorted(n for n in names if n not in fam and n != "-")
    return ", ".join(parts) or "nothing"


def held_types(arch: int) -> set[str]:
    """The data types tensors of the arch can have (tensor creation refuses the others)."""
    refused = data().get("tensors", {}).get(str(data_arch(arch)), {})
    return {d for d in data()["dtypes"] if d not in refused}


def describe_sets(sets: list, sig, arch: int) -> str:
    """What the HTP takes, told at the first position where the node's type is taken by no set
    (types the arch's tensors cannot have left out)."""
    held = held_types(arch) | {"-"}
    sets = [s for s in sets if all(t in held for t in (*s[0], *s[1]))]
    if not sets:
        return "it takes no data type set of the arch's tensor types"
    ins, outs = sig
    for role, got_all, idx in (("input", ins, 0), ("output", outs, 1)):
        for k, got in enumerate(got_all):
            if got == "-":
                continue
            allowed = {s[idx][k] if k < len(s[idx]) else s[idx][-1] for s in sets if s[idx]}
            if got not in allowed:
                return f"its {role} {k} takes {describe_types(allowed)}"
    examples = "; ".join(sig_text(s) for s in sets[:4])
    return f"its {len(sets)} data type sets combine them otherwise (e.g. {examples})"


def describe_ranks(ranks: Iterable[int]) -> str:
    ranks = sorted(ranks)
    if not ranks:
        return "no rank"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 1:
        return f"ranks {ranks[0]}..{ranks[-1]}"
    return "rank " + ", ".join(map(str, ranks))


# ---- the checks -------------------------------------------------------------------------------------
def _entry(op_type: str, params: dict, inputs: Sequence, arch: int) -> tuple[str, str | None, Support | None]:
    key = variant_key(op_type, params, inputs)
    name = entry_name(op_type, key)
    return name, key, support(name, arch)


def _measured(op_type: str, params: dict, inputs: Sequence, outputs: Sequence, arch: int, func: str):
    """(entry name, variant key, Support, data type signature, its text, rank) of a node whose
    op the measurements cover while ``func``'s checks are enabled; else None (nothing to check)."""
    if not enabled(func):
        return None
    name, key, sup = _entry(op_type, params, inputs, arch)
    if sup is None:
        return None
    sig = signature(inputs, outputs)
    return name, key, sup, sig, sig_text(sig), node_rank(inputs, outputs)


def check_validate(op_type: str, params: dict, inputs: Sequence, outputs: Sequence, arch: int,
                   func: str, where: str) -> None:
    """backendValidateOpConfig: raises the QnnError the vendor's validation refusal maps to, or
    returns. ``where``: the node, for messages (``node 'n' (Op)``)."""
    found = _measured(op_type, params, inputs, outputs, arch, func)
    if found is None:
        return
    name, key, sup, sig, text, rank = found
    measured = f"the HTP on v{arch} (measured: docs/op-support.md)"
    path = "opConfig.v1.typeName"
    if sup.unknown_op:
        fail(Location(func).field(where), "QNNEMU-htp-op-unsupported",
             f"{path}: {name} is not implemented by {measured}: no data type "
             f"or rank of it is supported", code=VALIDATION_FAILURE)
    if rank in sup.accepted.get(text, ()):
        return      # taken (where measured configurations differ in what the key leaves out: taken)
    kind = sup.validate.get(text, {}).get(rank)
    if kind is None and rank not in sup.ranks_measured:
        # A rank the sweep did not reach (variants and fixed-rank ops are measured at one rank):
        # the verdict the data type set had at every rank measured, when it had one.
        kinds = set(sup.validate.get(text, {}).values())
        if len(kinds) == 1 and text not in sup.accepted:
            kind = kinds.pop()
        elif text in sup.accepted and text not in sup.validate:
            return
    if kind is None and rank in sup.ranks_measured and rank not in sup.ranks_accepted:
        kind = "rank"
    if kind is None and sup.sets and not any(set_matches(s, sig) for s in sup.sets):
        kind = "dtype"
    if kind is None and key is not None and not sup.accepted and sup.validate:
        kind = "variant"
    if kind is None:
        return
    if kind == "rank":
        fail(Location(func).field(where), "QNNEMU-htp-op-rank",
             f"opConfig.v1.inputTensors: {op_type}: rank {rank} is not supported by "
             f"{measured}; it takes {describe_ranks(sup.ranks_accepted)}", code=VALIDATION_FAILURE)
    if key is not None and (kind == "variant" or _base_takes(op_type, sig, arch)):
        # The op takes these data types; with this parameter value the HTP does not.
        taken = sorted(s for s in sup.accepted)
        words = describe_variant(op_type, key)
        fail(Location(func).field(where), "QNNEMU-htp-op-variant",
             f"opConfig.v1.params: {op_type}: {words} is not supported for the data "
             f"types {text} by {measured}; "
             + (f"with it, it takes {'; '.join(taken)}" if taken else "it takes it with no data type"),
             code=VALIDATION_FAILURE)
    fail(Location(func).field(where), "QNNEMU-htp-op-dtype",
         f"opConfig.v1.inputTensors: {name}: the data types {text} are not supported "
         f"by {measured}; {describe_sets(sup.taken_sets(), sig, arch)}", code=VALIDATION_FAILURE)


def _base_takes(op_type: str, sig, arch: int) -> bool:
    """The op without its variant takes the data type set (listed or measured)."""
    base = support(op_type, arch)
    if base is None:
        return False
    return sig_text(sig) in base.accepted or any(set_matches(s, sig) for s in base.sets)


def check_add(op_type: str, params: dict, inputs: Sequence, outputs: Sequence, arch: int,
              func: str, where: str) -> None:
    """graphAddNode: raises for a node the vendor's graphAddNode refused on the arch (e.g. 16-bit
    activations with 16-bit weights before v73, a scalar into ExpandDims/Pack): the exact data
    type set at that rank, or at any rank when every measured rank of it was refused there."""
    found = _measured(op_type, params, inputs, outputs, arch, func)
    if found is None:
        return
    name, key, sup, sig, text, rank = found
    if rank in sup.finalized.get(text, ()):
        return
    kinds = sup.finalize.get(text, {})
    kind = kinds.get(rank)
    if kind is None and rank not in sup.ranks_measured and kinds and set(kinds.values()) == {"add"}:
        kind = "add"
    if kind != "add":
        return
    fail(Location(func).field(where), "QNNEMU-htp-op-add",
         f"opConfig.v1.inputTensors: {name} with the data types {text} at rank {rank} "
         f"is not taken by the HTP on v{arch}'s graphAddNode (measured: docs/op-support.md){_a16w16(sig, arch)}",
         code=ADD_REFUSED)


def _a16w16(sig, arch: int) -> str:
    ins = sig[0]
    sixteen = {"UFIXED_POINT_16", "SFIXED_POINT_16"}
    if len(ins) > 1 and ins[0] in sixteen and ins[1] in sixteen:
        return ("; 16-bit activations with 16-bit weights (A16W16) are enabled only on selected SoCs (QNN HTP "
                "backend documentation, A16W16): v73 and later take them")
    return ""


def check_finalize(op_type: str, params: dict, inputs: Sequence, outputs: Sequence, arch: int,
                   func: str, where: str) -> None:
    """graphFinalize: raises when the vendor's one-node graph of this node failed to finalize on
    the arch (the exact data type set and rank measured, a rank no measured node of the op
    finalized at, or an op none of whose measured nodes finalized)."""
    found = _measured(op_type, params, inputs, outputs, arch, func)
    if found is None:
        return
    name, key, sup, sig, text, rank = found
    if not sup.unknown_op and rank in sup.finalized.get(text, ()):
        return      # created (where measured configurations differ: created)
    kind = "unknown-op" if sup.unknown_op else sup.finalize.get(text, {}).get(rank)
    if kind not in ("unknown-op", "add", "crash") and rank in sup.finalize_ranks_failed:
        kind = "rank"        # no measured node of the op finalized at this rank
    if _lenient(sup, text, rank, kind):
        return
    if kind is None and sup.never_finalized:
        kind = "create"
    if kind is None or kind in ("add", "crash"):
        return
    why = {"unknown-op": f"{name} is not implemented by the HTP" if sup.unknown_op else
                         f"{name} with the data types {text} at rank {rank} has no HTP implementation",
           "rank": f"{name} of rank {rank} cannot be created by the HTP",
           }.get(kind, f"{name} with the data types {text} at rank {rank} cannot be created by the HTP")
    fail(Location(func).field(where), "QNNEMU-htp-op-finalize",
         f"{why} on v{arch} (measured: docs/op-support.md; the vendor's graphFinalize "
         f"fails the same way)", code=FINALIZE_FAILED)


def _lenient(sup: Support, text: str, rank: int, kind: str | None) -> bool:
    """A configuration validation takes whose one-node graph failed at this rank only: the
    failure may depend on shapes or parameters the data does not key (a rank-5 Gather
    finalizes on some axes, not on others), so graphFinalize takes it."""
    return kind in ("create", "other") and rank in sup.accepted.get(text, ()) and not _fails_at_every_rank(sup, text)


def finalize_taken_despite_failure(name: str, arch: int, text: str, rank: int) -> bool:
    """Whether graphFinalize deliberately takes a measured failure (:func:`_lenient`)."""
    sup = support(name, arch)
    return sup is not None and _lenient(sup, normalized(text), rank, sup.finalize.get(normalized(text), {}).get(rank))


def _fails_at_every_rank(sup: Support, text: str) -> bool:
    """Validation took ``text`` at some ranks and the one-node graph failed at every one of them
    (a data type set the HTP cannot create at all on the arch)."""
    ranks = sup.accepted.get(text, set())
    failed = {r for r, kind in sup.finalize.get(text, {}).items() if kind not in ("add", "crash")}
    return bool(ranks) and ranks <= failed


def check_tensor(dtype: int, tensor_type: int, arch: int, func: str, path: str) -> None:
    """tensorCreateGraphTensor: a data type the HTP does not hold on the arch (the vendor's code)."""
    if not enabled(func):
        return
    per_arch = data().get("tensors", {}).get(str(data_arch(arch)), {})
    name = short(dtype)
    refused = per_arch.get(name)
    if not refused:
        return
    tname = dtypes_type_name(tensor_type)
    code = refused.get(tname) or next(iter(refused.values()))
    if not isinstance(code, int):
        return
    held = sorted(d for d in data()["dtypes"] if d not in per_arch)
    fail(Location(func).field(path), "QNNEMU-htp-tensor-dtype",
         f"{name} tensors are not held by the HTP on v{arch} (measured: "
         f"docs/op-support.md); it holds {describe_types(held)}", code=code)


def dtypes_type_name(tensor_type: int) -> str:
    names = {int(Q.QNN_TENSOR_TYPE_APP_WRITE): "APP_WRITE", int(Q.QNN_TENSOR_TYPE_APP_READ): "APP_READ",
             int(Q.QNN_TENSOR_TYPE_NATIVE): "NATIVE", int(Q.QNN_TENSOR_TYPE_STATIC): "STATIC"}
    return names.get(int(tensor_type), "")


__all__ = ["variant_key", "entry_name", "signature", "sig_text", "parse_sig", "set_matches", "node_rank",
           "enabled", "ENV", "DATA_PATH", "check_validate", "check_add", "check_finalize", "check_tensor", "support",
           "data", "data_arch", "describe_types", "Support"]
