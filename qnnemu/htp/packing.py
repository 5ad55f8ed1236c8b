"""QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING: 8-bit weights in the 4-bit range stored as
packed 4-bit (QNN HTP backend documentation; docs/context-binary.md "Packed weights").

One rule for both users: the context binary stores a tensor packed exactly when ``packing_of``
says so (qnnemu/core/binary), and QNN_HTP_CONTEXT_GET_PROP_WEIGHTS_BUFFER_SIZE counts it packed
(qnnemu/htp/settings.py ``packed_weight_bytes``), so the property and the binary agree.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..headers import Q


@dataclass(frozen=True)
class Packing:
    """One way QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING stores 8-bit codes as 4-bit nibbles
    (QNN HTP backend documentation, the graph config's description: "8-bit weights that are in
    the 4-bit range ... stored in the context binary as packed 4-bit"; docs/context-binary.md
    "Packed weights").  A tensor is packed when every
    stored code lies in [lo, hi]; a nibble holds ``code & 0xF`` and reads back as ``nibble``
    (unsigned) or ``nibble - 16`` when it is 8 or more (signed: two's complement int4)."""

    name: str                     # the tensor's "packing" value in the metadata
    dtypes: frozenset[int]        # the 8-bit Qnn_DataType_t it applies to
    lo: int
    hi: int

    @property
    def signed(self) -> bool:
        return self.lo < 0


PACKINGS = {p.name: p for p in (
    Packing("int4", frozenset({Q.QNN_DATATYPE_INT_8, Q.QNN_DATATYPE_SFIXED_POINT_8}), -8, 7),
    Packing("uint4", frozenset({Q.QNN_DATATYPE_UINT_8, Q.QNN_DATATYPE_UFIXED_POINT_8}), 0, 15),
)}
_PACKING_OF_DTYPE = {d: p for p in PACKINGS.values() for d in p.dtypes}


def packing_of(tensor, enabled: bool) -> Packing | None:
    """How serialize stores ``tensor`` of a graph whose WEIGHTS_PACKING is ``enabled``: a
    Packing for a STATIC flat-buffer tensor of an 8-bit type with at least two elements whose
    codes all lie in that packing's range, else None (stored as is).  UPDATEABLE_STATIC tensors
    are never packed: an update may bring codes outside the 4-bit range, and binary sections
    replace their bytes one for one (docs/context-binary.md "Packed weights")."""
    if not enabled or tensor.type != Q.QNN_TENSOR_TYPE_STATIC or tensor.data is None:
        return None
    if getattr(tensor, "data_format", Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER) != Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER:
        return None
    p = _PACKING_OF_DTYPE.get(tensor.dtype)
    codes = tensor.data
    # One code per byte: packing two per byte saves something from two elements on.
    if p is None or codes.size < 2 or codes.dtype.itemsize != 1:
        return None
    if int(codes.min()) < p.lo or int(codes.max()) > p.hi:
        return None
    return p


def pack_codes(codes: np.ndarray) -> bytes:
    """8-bit codes (C order) -> nibbles, two per byte: code 2k in the low nibble of byte k,
    code 2k+1 in its high nibble; an odd count leaves the last high nibble 0."""
    nib = (np.ascontiguousarray(codes).reshape(-1).view(np.uint8) & 0xF).astype(np.uint8)
    if nib.size % 2:
        nib = np.append(nib, np.uint8(0))
    return (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8).tobytes()


def unpack_codes(raw, count: int, packing: Packing) -> bytes:
    """The exact bytes of ``count`` 8-bit codes packed by ``pack_codes`` (the padding nibble is
    ignored)."""
    b = np.frombuffer(raw, dtype=np.uint8)
    nib = np.empty(b.size * 2, np.uint8)
    nib[0::2] = b & 0xF
    nib[1::2] = b >> 4
    nib = nib[:count]
    if packing.signed:
        # Sign extension in uint8 arithmetic (no wider temporary): nibbles 8..15 get 0xF0 set,
        # which is the two's complement byte of -8..-1.
        nib |= (nib >> 3) * np.uint8(0xF0)
    return nib.tobytes()
