"""Shared hypothesis strategies for the C-ABI conformance tests.

- ``shapes``/``float32_arrays``: tensor dimensions and matching finite float32 data;
- ``valid_dtypes``/``invalid_dtypes``: ``Qnn_DataType_t`` values the emulator accepts for a plain
  (unquantized) tensor, and values that are no data type at all;
- ``valid_log_levels``/``invalid_log_levels``: ``QnnLog_Level_t``;
- ``garbage_handles``: pointer-sized values that can never be a handle of the library (handles
  are 16-byte aligned values counted up from ``HANDLE_BASE``, see qnnemu/core/handles.py);
- ``BAD_HANDLE_KINDS``: how a handle argument is made invalid in the lifecycle state machine:
  NULL, garbage, a freed handle, a live handle of the wrong kind;
- ``tensor_names``/``graph_names``: short names from a tiny alphabet, so duplicates are common.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qnnemu.core import dtypes
from qnnemu.core.handles import FIRST_HANDLE
from qnnemu.headers import Q

HANDLE_BASE = FIRST_HANDLE    # qnnemu.core.handles.HandleTable's first handle
HANDLE_WINDOW = 1 << 32       # far more handles than any test run issues

# ---------------------------------------------------------------------------- tensors


def shapes(min_rank: int = 1, max_rank: int = 4, max_side: int = 5):
    return hnp.array_shapes(min_dims=min_rank, max_dims=max_rank, min_side=1, max_side=max_side)


def float32_arrays(shape):
    """Finite float32 arrays of ``shape`` (a tuple or a strategy of tuples)."""
    return hnp.arrays(np.float32, shape,
                      elements=st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32))


_PLAIN = sorted(v for v in (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_INT_32,
                            Q.QNN_DATATYPE_UINT_8, Q.QNN_DATATYPE_INT_8, Q.QNN_DATATYPE_BOOL_8,
                            Q.QNN_DATATYPE_UINT_32, Q.QNN_DATATYPE_INT_64, Q.QNN_DATATYPE_FLOAT_64)
                if dtypes.is_known(v))
valid_dtypes = st.sampled_from(_PLAIN)
invalid_dtypes = st.integers(0, 2**32 - 1).filter(lambda v: not dtypes.is_known(v))

tensor_types = st.sampled_from([Q.QNN_TENSOR_TYPE_APP_WRITE, Q.QNN_TENSOR_TYPE_NATIVE,
                                Q.QNN_TENSOR_TYPE_STATIC])
tensor_versions = st.sampled_from([1, 2])
tensor_names = st.text(alphabet="ab", min_size=1, max_size=2)
graph_names = st.text(alphabet="gh", min_size=1, max_size=2)

# -------------------------------------------------------------------------------- logs
_LEVELS = [Q.QNN_LOG_LEVEL_ERROR, Q.QNN_LOG_LEVEL_WARN, Q.QNN_LOG_LEVEL_INFO,
           Q.QNN_LOG_LEVEL_VERBOSE, Q.QNN_LOG_LEVEL_DEBUG]
valid_log_levels = st.sampled_from(_LEVELS)
invalid_log_levels = st.one_of(st.just(0), st.integers(max(_LEVELS) + 1, 2**31 - 1))

# ----------------------------------------------------------------------------- handles


def _not_a_handle(v: int) -> bool:
    return v % 16 != 0 or not HANDLE_BASE <= v < HANDLE_BASE + HANDLE_WINDOW


garbage_handles = st.one_of(
    st.integers(1, 2**64 - 1),
    st.integers(HANDLE_BASE - 64, HANDLE_BASE + 4096),   # near real handles: mostly unaligned
    st.sampled_from([1, 0xDEADBEEF, 0xFFFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFF0]),
).filter(_not_a_handle)

BAD_HANDLE_KINDS = ("null", "garbage", "freed", "wrong_kind")
bad_handle_kinds = st.sampled_from(BAD_HANDLE_KINDS)
