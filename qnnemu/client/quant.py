"""Quantization encodings in qnnemu.client and qnnemu.system_client: the one converter between
``Qnn_QuantizeParams_t`` (QnnTypes.h) and the JSON form of an encoding.

The JSON form (what ``Tensor.quant`` holds, what ``qnnemu.system_client`` returns and graph JSON
descriptions carry; ``qnnemu.spec.quant.spec_from_dict`` makes a QuantSpec of it)::

    {"encoding": SCALE_OFFSET, "scale": 0.1, "offset": -128}
    {"encoding": BW_SCALE_OFFSET, "scale": 0.1, "offset": -8, "bitwidth": 4}
    {"encoding": AXIS_SCALE_OFFSET, "axis": 3, "scales": [...], "offsets": [...]}
    {"encoding": BW_AXIS_SCALE_OFFSET, "axis": 3, "scales": [...], "offsets": [...], "bitwidth": 4}

``Graph`` methods also take the short argument forms ``(scale, offset)``, ``(scale, offset,
bitwidth)`` and ``{"axis", "scales"[, "offsets"][, "bitwidth"]}`` (:func:`quant_json`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..headers import Q

_PER_TENSOR = (Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET, Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET)
_PER_AXIS = (Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET, Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET)


def quant_json(quant: Any) -> dict | None:
    """The JSON form of a ``Graph`` quant argument (None: not quantized); a JSON-form dict
    comes back normalized (float32 scales, int offsets).  ValueError for an encoding the
    client cannot pass (blockwise, or none at all)."""
    if quant is None:
        return None
    if not isinstance(quant, dict):
        bitwidth = quant[2] if len(quant) > 2 else None
        quant = {"scale": quant[0], "offset": quant[1], "bitwidth": bitwidth}
    bitwidth = quant.get("bitwidth")
    if "scales" in quant:
        scales = [float(np.float32(x)) for x in quant["scales"]]
        out = {"encoding": _PER_AXIS[1] if bitwidth else _PER_AXIS[0],
               "axis": int(quant["axis"]), "scales": scales,
               "offsets": [int(x) for x in quant.get("offsets", [0] * len(scales))]}
    elif "scale" in quant:
        out = {"encoding": _PER_TENSOR[1] if bitwidth else _PER_TENSOR[0],
               "scale": float(np.float32(quant["scale"])), "offset": int(quant["offset"])}
    else:
        enc = quant.get("encoding")
        raise ValueError(f"quantization encoding {enc} ({Q.enum('QNN_QUANTIZATION_ENCODING_').get(enc)}) "
                         f"is not supported for graph inputs/outputs by qnnemu.client")
    if bitwidth:
        out["bitwidth"] = int(bitwidth)
    return out


def write_quant(the_ffi, qp, quant: dict | None, keep: list) -> None:
    """Fills ``qp`` (a ``Qnn_QuantizeParams_t`` of ``the_ffi``) from the JSON form (None:
    undefined); the arrays it points to are appended to ``keep``."""
    if quant is None:
        qp.encodingDefinition = Q.QNN_DEFINITION_UNDEFINED
        qp.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_UNDEFINED
        return
    qp.encodingDefinition = Q.QNN_DEFINITION_DEFINED
    enc = qp.quantizationEncoding = int(quant["encoding"])
    if enc == Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET:
        qp.scaleOffsetEncoding.scale, qp.scaleOffsetEncoding.offset = quant["scale"], quant["offset"]
    elif enc == Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET:
        b = qp.bwScaleOffsetEncoding
        b.bitwidth, b.scale, b.offset = int(quant["bitwidth"]), quant["scale"], quant["offset"]
    elif enc == Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET:
        scales = the_ffi.new("float[]", quant["scales"])
        offsets = the_ffi.new("int32_t[]", quant["offsets"])
        keep += [scales, offsets]
        b = qp.bwAxisScaleOffsetEncoding
        b.bitwidth, b.axis, b.numElements, b.scales, b.offsets = (
            int(quant["bitwidth"]), int(quant["axis"]), len(quant["scales"]), scales, offsets)
    elif enc == Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET:
        pairs = the_ffi.new("Qnn_ScaleOffset_t[]", list(zip(quant["scales"], quant["offsets"])))
        keep.append(pairs)
        a = qp.axisScaleOffsetEncoding
        a.axis, a.numScaleOffsets, a.scaleOffset = int(quant["axis"]), len(quant["scales"]), pairs
    else:
        raise ValueError(f"quantization encoding {enc} cannot be written by qnnemu.client")


def _any_count(n: int, what: str) -> int:
    return int(n)


def read_quant(the_ffi, qp, count: Callable[[int, str], int] = _any_count) -> dict | None:
    """``Qnn_QuantizeParams_t`` (of ``the_ffi``) -> None or the JSON form (``{"encoding"}``
    alone for encodings it does not spell out).  ``count`` checks each array length read from
    the struct (a library's reply) before it is walked."""
    if int(qp.encodingDefinition) != Q.QNN_DEFINITION_DEFINED:
        return None
    enc = int(qp.quantizationEncoding)
    if enc == Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET:
        so = qp.scaleOffsetEncoding
        return {"encoding": enc, "scale": float(so.scale), "offset": int(so.offset)}
    if enc == Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET:
        b = qp.bwScaleOffsetEncoding
        return {"encoding": enc, "scale": float(b.scale), "offset": int(b.offset),
                "bitwidth": int(b.bitwidth)}
    if enc == Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET:
        a = qp.axisScaleOffsetEncoding
        n = count(a.numScaleOffsets, "scale/offset")
        pairs = [a.scaleOffset[i] for i in range(n)] if a.scaleOffset != the_ffi.NULL and n else []
        return {"encoding": enc, "axis": int(a.axis), "scales": [float(p.scale) for p in pairs],
                "offsets": [int(p.offset) for p in pairs]}
    if enc == Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET:
        b = qp.bwAxisScaleOffsetEncoding
        n = count(b.numElements, "scale")
        scales = [float(b.scales[i]) for i in range(n)] if b.scales != the_ffi.NULL else []
        offsets = ([int(b.offsets[i]) for i in range(n)] if b.offsets != the_ffi.NULL
                   else [0] * len(scales))  # NULL offsets: symmetric, all zero
        return {"encoding": enc, "axis": int(b.axis), "scales": scales, "offsets": offsets,
                "bitwidth": int(b.bitwidth)}
    return {"encoding": enc}


__all__ = ["quant_json", "write_quant", "read_quant"]
