"""Context groups that share one spill-fill buffer (QNN HTP backend documentation, "QNN HTP Context
Config Options": QnnHtpContext_CustomConfig_t
``QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS`` and
``..._REGISTER_CONCURRENT_RESOURCE_SHARING``, struct QnnHtpContext_GroupRegistration_t).

The first context of a group registers with ``firstGroupHandle`` NULL and the group's maximum
spill-fill buffer size (> 0); later contexts pass the first context's handle (and the same
size, or 0).  The buffer is sized by the first registration: a later, different size is logged
and ignored.  A concurrent group additionally shares the VTCM backup buffer, needs an HTP v81
device, and all its contexts (and their graphs) keep one priority.

A registration is parsed by ``_context_configs`` (qnnemu/abi/context_lifecycle_api.py) into the context's
``configs["htp_group"]`` = ``{"kind", "first", "max_spill_fill"}``; the group itself lives
here, created at the first registration that names it, so it outlives its first context.
Registrations name contexts by handle (``firstGroupHandle``): the object model tells this module
which contexts are live under which handle (``context_opened`` / ``context_closed``, called by
qnnemu/core/backend.py), so nothing here reaches into the handle table.  Nothing here imports cffi.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ..headers import Q

MULTI_CONTEXTS = "multi_contexts"        # REGISTER_MULTI_CONTEXTS: contexts run in sequence
CONCURRENT = "concurrent"                # REGISTER_CONCURRENT_RESOURCE_SHARING: per priority

# option name -> (group kind, union member of QnnHtpContext_CustomConfig_t)
REGISTRATION_OPTIONS = {
    "QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS": (MULTI_CONTEXTS, "groupRegistration"),
    "QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_CONCURRENT_RESOURCE_SHARING": (CONCURRENT, "concurrentGroupRegistration"),
}


@dataclass
class ContextGroup:
    kind: str
    first: int                 # handle of the context that opened the group
    spill_fill_bytes: int      # the shared buffer, sized by the first registration
    priority: int | None = None  # concurrent groups: the one priority of its contexts


_lock = threading.Lock()
_groups: dict[int, ContextGroup] = {}   # first context handle -> group
_live: dict[int, Any] = {}           # handle -> live context, oldest first


def context_opened(handle: int, ctx) -> None:
    """A context got ``handle`` (contextCreate, or a context loaded from a binary)."""
    with _lock:
        _live[handle] = ctx


def context_closed(handle: int) -> None:
    with _lock:
        _live.pop(handle, None)


def live_context(handle: int):
    """The live context with ``handle``, else None."""
    return _live.get(handle)


def _handle_of(ctx) -> int | None:
    return next((handle for handle, obj in list(_live.items()) if obj is ctx), None)


def context_priority(configs: dict) -> int:
    return int(configs.get("priority", Q.QNN_PRIORITY_DEFAULT))


def group_for_first(first: int) -> ContextGroup | None:
    """The group opened by the context with handle ``first`` (created on first use from that
    context's registration; None when that context opened no group)."""
    with _lock:
        group = _groups.get(first)
        if group is not None:
            return group
        configs = getattr(_live.get(first), "configs", None) or {}
        reg = configs.get("htp_group")
        if not reg or reg.get("first"):
            return None
        group = ContextGroup(reg["kind"], first, int(reg["max_spill_fill"]),
                             context_priority(configs) if reg["kind"] == CONCURRENT else None)
        _groups[first] = group
        return group


def group_of(ctx) -> ContextGroup | None:
    """The group ``ctx`` registered with (None: not in a group)."""
    reg = (getattr(ctx, "configs", None) or {}).get("htp_group")
    if not reg:
        return None
    first = reg.get("first") or _handle_of(ctx)
    return group_for_first(first) if first else None


def members(group: ContextGroup) -> list:
    """The live contexts of ``group`` (its first context while alive, then the others)."""
    out = []
    for handle, obj in list(_live.items()):
        reg = (getattr(obj, "configs", None) or {}).get("htp_group")
        if reg and reg.get("kind") == group.kind and (reg.get("first") or handle) == group.first:
            out.append(obj)
    return out


def forget(first: int) -> None:
    """Drops a group whose contexts are all gone (tests; the registry otherwise keeps sizes)."""
    with _lock:
        _groups.pop(first, None)
