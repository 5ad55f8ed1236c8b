"""Qnn_DataType_t (QnnTypes.h): kept importable here for the abi, tools and client layers;
the table lives in :mod:`qnnemu.spec.dtypes` (the spec layer shared by ops, htp and core).

``qnnemu.core.dtypes`` IS that module (one object, so monkeypatching either name is the same).
"""
from __future__ import annotations

import sys

from ..spec import dtypes as _spec_dtypes

sys.modules[__name__] = _spec_dtypes
