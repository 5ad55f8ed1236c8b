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
- ``graphFinalize`` (:func:`check_finalize`): a node the HTP cannot create on the device
  (``QNNEMU-htp-op-finalize``), what the vendor's one-node graph failed on -- code
  QNN_GRAPH_ERROR_FINALIZE_FAILED;
- ``tensorCreateGraphTensor`` (:func:`check_tensor`): a data type the HTP does not hold
  (``QNNEMU-htp-tensor-dtype``), the vendor's code.

``graphAddNode`` checks nothing more: the vendor's takes what its validation refuses (it
computes a UINT_32 ElementWiseAdd, for one) and leaves the rest to finalize.

The device is the graph's (``qnnemu.htp.settings.device_model``); for backendValidateOpConfig,
which has no graph, the newest device created (the vendor's SoC setting is process-wide too),
else the default device. An arch without data of its own uses the newest measured arch below it
(v85: v81's).

Escape hatch: ``QNNEMU_OP_SUPPORT=all`` (environment, read at every check) turns every check
here off, for the emulator's own reference runs of ops or data types the HTP does not take;
the default ``htp`` applies them.
"""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ..core import dtypes
from ..errors import QnnError
from ..headers import Q

DATA_PATH = Path(__file__).with_name("op_support.json")
ENV = "QNNEMU_OP_SUPPORT"
MODES = ("htp", "all")

VALIDATION_FAILURE = int(Q.QNN_OP_PACKAGE_ERROR_VALIDATION_FAILURE)
FINALIZE_FAILED = int(Q.QNN_GRAPH_ERROR_FINALIZE_FAILED)


def enabled() -> bool:
    """The checks apply (``QNNEMU_OP_SUPPORT`` unset or ``htp``); ``all`` turns them off."""
    mode = os.environ.get(ENV, "htp").strip().lower() or "htp"
    if mode not in MODES:
        raise QnnError(Q.QNN_COMMON_ERROR_INVALID_ARGUMENT,
                       f"{ENV}='{mode}': must be one of {', '.join(MODES)}", rule="QNNEMU-env-op-support")
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
        # No configuration taken, every refusal "no such op": the HTP has no implementation.
        self.unknown_op = not self.accepted and kinds == {"unknown-op"}
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


@functools.lru_cache(maxsize=None)
def measured_archs() -> tuple[int, ...]:
    return tuple(sorted(int(a) for a in data()["archs"]))


def data_arch(arch: int) -> int:
    """The measured arch whose data stands for ``arch``: itself, else the newest below it, else
    the oldest measured."""
    archs = measured_archs()
    below = [a for a in archs if a <= int(arch)]
    return below[-1] if below else archs[0]


@functools.lru_cache(maxsize=None)
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


def describe_sets(sets: list, sig) -> str:
    """What the HTP takes, told at the first position where the node's type is taken by no set."""
    if not sets:
        return "no data type set"
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


def check_validate(op_type: str, params: dict, inputs: Sequence, outputs: Sequence, arch: int,
                   func: str, where: str) -> None:
    """backendValidateOpConfig: raises the QnnError the vendor's validation refusal maps to, or
    returns. ``where``: the node, for messages (``node 'n' (Op)``)."""
    if not enabled():
        return
    name, key, sup = _entry(op_type, params, inputs, arch)
    if sup is None:
        return
    sig = signature(inputs, outputs)
    text, rank = sig_text(sig), node_rank(inputs, outputs)
    measured = f"the HTP on v{arch} (measured: docs/op-support.md)"
    path = "opConfig.v1.typeName"
    if sup.unknown_op:
        raise QnnError(VALIDATION_FAILURE,
                       f"{func}: {where}: {path}: {name} is not implemented by {measured}; no data type "
                       f"or rank of it is taken", rule="QNNEMU-htp-op-unsupported")
    kind = sup.validate.get(text, {}).get(rank)
    if kind is None and rank in sup.accepted.get(text, ()):
        return
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
        raise QnnError(VALIDATION_FAILURE,
                       f"{func}: {where}: opConfig.v1.inputTensors: rank {rank} is not taken by {op_type} on "
                       f"{measured}; it takes {describe_ranks(sup.ranks_accepted)}", rule="QNNEMU-htp-op-rank")
    if key is not None and (kind == "variant" or support(op_type, arch) is None):
        taken = describe_types({t for s in sup.accepted for t in parse_sig(s)[0] if t != "-"})
        raise QnnError(VALIDATION_FAILURE,
                       f"{func}: {where}: opConfig.v1.params: {op_type} with {key} is not taken for "
                       f"{text} by {measured}; with {key} it takes {taken}", rule="QNNEMU-htp-op-variant")
    raise QnnError(VALIDATION_FAILURE,
                   f"{func}: {where}: opConfig.v1.inputTensors: {name} does not take the data types {text} "
                   f"on {measured}; {describe_sets(sup.taken_sets(), sig)}", rule="QNNEMU-htp-op-dtype")


def check_finalize(op_type: str, params: dict, inputs: Sequence, outputs: Sequence, arch: int,
                   func: str, where: str) -> None:
    """graphFinalize: raises when the vendor's one-node graph of this node failed to finalize on
    the arch (the exact data type set and rank measured, a rank no measured node of the op
    finalized at, or an op none of whose measured nodes finalized)."""
    if not enabled():
        return
    name, key, sup = _entry(op_type, params, inputs, arch)
    if sup is None:
        return
    sig = signature(inputs, outputs)
    text, rank = sig_text(sig), node_rank(inputs, outputs)
    kind = "unknown-op" if sup.unknown_op else sup.finalize.get(text, {}).get(rank)
    if kind is None and rank in sup.finalized.get(text, ()):
        return
    if kind is None and rank in sup.finalize_ranks_failed:
        kind = "rank"
    if kind is None and sup.never_finalized:
        kind = "create"
    if kind is None or kind in ("add", "crash"):
        return
    why = {"unknown-op": f"{name} is not implemented by the HTP" if sup.unknown_op else
                         f"{name} with the data types {text} at rank {rank} has no HTP implementation",
           "rank": f"{name} of rank {rank} cannot be created by the HTP",
           }.get(kind, f"{name} with the data types {text} at rank {rank} cannot be created by the HTP")
    raise QnnError(FINALIZE_FAILED,
                   f"{func}: {where}: {why} on v{arch} (measured: docs/op-support.md; the vendor's graphFinalize "
                   f"fails the same way)", rule="QNNEMU-htp-op-finalize")


def check_tensor(dtype: int, tensor_type: int, arch: int, func: str, path: str) -> None:
    """tensorCreateGraphTensor: a data type the HTP does not hold on the arch (the vendor's code)."""
    if not enabled():
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
    raise QnnError(code, f"{func}: {path}: {name} tensors are not held by the HTP on v{arch} (measured: "
                         f"docs/op-support.md); it holds {describe_types(held)}",
                   rule="QNNEMU-htp-tensor-dtype")


def dtypes_type_name(tensor_type: int) -> str:
    names = {int(Q.QNN_TENSOR_TYPE_APP_WRITE): "APP_WRITE", int(Q.QNN_TENSOR_TYPE_APP_READ): "APP_READ",
             int(Q.QNN_TENSOR_TYPE_NATIVE): "NATIVE", int(Q.QNN_TENSOR_TYPE_STATIC): "STATIC"}
    return names.get(int(tensor_type), "")


__all__ = ["variant_key", "entry_name", "signature", "sig_text", "parse_sig", "set_matches", "node_rank",
           "enabled", "ENV", "DATA_PATH", "check_validate", "check_finalize", "check_tensor", "support",
           "data", "data_arch", "describe_types", "Support"]
