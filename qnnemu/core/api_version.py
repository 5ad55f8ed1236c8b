"""QnnBackend.h backendGetBuildId and QnnInterface.h's core API version: what this backend
says it is.  Read by the backend (qnnemu/core/backend.py), the context binary's header
(qnnemu/core/binary) and binary sections (qnnemu/core/sections.py).
"""
from __future__ import annotations

import os

from .._version import __version__
from ..errors import QnnError
from ..headers import Q

# The QNN SDK release whose ABI our headers reproduce; the build id a client parses
# ("vMAJOR.MINOR.PATCH.BUILD").
SDK_VERSION = (2, 50, 0)
# BUILD: the package version's digits (0.1.0 -> 010), so the id changes with every release.
BUILD_ID = "v{}.{}.{}.{}".format(*SDK_VERSION, "".join(ch for ch in __version__ if ch.isdigit()) or "0")

DEFAULT_CORE_API = (2, 40, 0)
MIN_CORE_API_MINOR = 32


def core_api_version() -> tuple[int, int, int]:
    """Core API version advertised to clients; QNNEMU_CORE_API_VERSION=2.NN[.P] overrides it.

    Clients built against newer headers accept a provider only if its minor version is at
    least theirs (ONNX Runtime's QNN EP was built against 2.40).
    """
    text = os.environ.get("QNNEMU_CORE_API_VERSION")
    if not text:
        return DEFAULT_CORE_API
    parts = text.strip().split(".")
    def refused(why: str) -> QnnError:
        return QnnError(Q.QNN_COMMON_ERROR_INVALID_ARGUMENT, f"QNNEMU_CORE_API_VERSION='{text}'{why}",
                        rule="QNNEMU-env-core-api")
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        raise refused(" is not MAJOR.MINOR[.PATCH]") from None
    if len(nums) not in (2, 3) or nums[0] != 2 or not MIN_CORE_API_MINOR <= nums[1] <= 99:
        raise refused(f": must be 2.{MIN_CORE_API_MINOR} or later")
    return (nums[0], nums[1], nums[2] if len(nums) == 3 else 0)
