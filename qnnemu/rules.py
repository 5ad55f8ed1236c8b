"""Warning rules: what qnnemu tolerates the way the vendor's HTP backend does (QnnLog.h,
``QNN_LOG_LEVEL_WARN``; docs/validation.md).

The validation layer's principle is "accept what the vendor accepts": an input the vendor's
libQnnHtp.so accepts is never refused; what it tolerates (clips, ignores, wraps, coerces) qnnemu
tolerates the same way and says so through a *warning rule*; what it refuses, qnnemu refuses
through an *error rule* (a ``QnnError`` whose ``rule`` is the id, qnnemu/errors.py).

Every warning rule has a stable id in ``WARNING_RULES`` and is logged with :func:`warn` as::

    [QNNEMU-<id>] <function>: <parameter path>: <message>

at ``QNN_LOG_LEVEL_WARN`` through the application's QnnLog logger of the API call that is
running (the ABI entry wrapper sets it with :func:`use_logger`), or through the ``qnnemu``
Python logger outside an API call.  The call itself then succeeds.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging

# id -> what is tolerated and how (one line; docs/validation.md has the table).
WARNING_RULES: dict[str, str] = {
    "QNNEMU-graph-hvx-threads-clipped":
        "NUM_HVX_THREADS 0 or above the SoC's maximum: the SoC's maximum is used",
    "QNNEMU-graph-dlbc-soc-ignored":
        "ENABLE_DLBC / ENABLE_DLBC_WEIGHTS on a SoC without DLBC: recorded, no effect",
    "QNNEMU-graph-slc-soc-ignored":
        "ENABLE_SLC_ALLOCATOR on a SoC without the SLC allocator: recorded, no effect",
    "QNNEMU-graph-optimization-flag-default":
        "FINALIZE_OPTIMIZATION_FLAG other than 1, 2 or 3: the default level 2 is used",
    "QNNEMU-graph-optimization-value-coerced":
        "an on/off optimization (DLBC, DLBC weights, sparse weights, SLC) with a value other than "
        "0 or >= 1: on when it truncates to a non-zero integer, off otherwise (NaN: off)",
    "QNNEMU-graph-schedule-threshold-ignored":
        "SCHEDULE_THRESHOLD negative or NaN: ignored (no threshold)",
    "QNNEMU-graph-precision-ignored":
        "PRECISION neither FLOAT32 nor FLOAT16: the default (FLOAT32) is used",
    "QNNEMU-graph-vtcm-clipped":
        "a VTCM request above the SoC's VTCM: recorded, the SoC's VTCM is the budget",
    "QNNEMU-graph-vtcm-bytes-adjusted":
        "VTCM_SIZE_IN_BYTES before v81 or not a multiple of 64 KiB: rounded up to 64 KiB and used",
    "QNNEMU-graph-vtcm-max-default":
        "VTCM MAX (0) without a SoC configured: the default device's VTCM is used",
    "QNNEMU-graph-num-cores-clipped":
        "NUM_CORES 0: one core is used",
    "QNNEMU-graph-config-option-ignored":
        "an HTP graph custom option this backend version does not define (not UNKNOWN): ignored",
    "QNNEMU-context-config-option-ignored":
        "an HTP context custom option this backend version does not define (not UNKNOWN): ignored",
    "QNNEMU-priority-level-mapped":
        "a Qnn_Priority_t in 0..500 without a row in the HTP thread priority table: the row of "
        "the nearest documented level below it is used",
    "QNNEMU-tensor-static-size-larger":
        "a STATIC tensor whose clientBuf.dataSize exceeds what its dimensions need: the first "
        "bytes are used",
    "QNNEMU-index-static-out-of-range":
        "a STATIC index tensor of a Gather/Scatter op holds an index the op does not take: "
        "accepted at graphAddNode; graphExecute handles it as the vendor does",
    "QNNEMU-index-negative-wrapped":
        "a negative Gather / GatherNd index in [-dim, -1]: counted from the end (numpy-style)",
    "QNNEMU-index-invalid-zeroed":
        "a GatherElements index outside [0, dim-1]: the element reads 0",
    "QNNEMU-index-invalid-skipped":
        "a ScatterElements / ScatterNd index outside [0, dim-1]: that update is skipped",
}

_PY_LOGGER = logging.getLogger("qnnemu")
_CURRENT: contextvars.ContextVar = contextvars.ContextVar("qnnemu_current_logger", default=None)


@contextlib.contextmanager
def use_logger(logger):
    """Warnings raised inside go to ``logger`` (anything with ``warn(text)``): the ABI entry
    wrapper sets the app logger of the call."""
    token = _CURRENT.set(logger)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def warn(rule: str, func: str, path: str, message: str, logger=None) -> str:
    """Logs warning rule ``rule`` (a ``WARNING_RULES`` id) at WARN; returns the text."""
    if rule not in WARNING_RULES:
        raise KeyError(f"{rule} is not a registered warning rule (qnnemu/rules.py WARNING_RULES)")
    text = f"[{rule}] {func}: {path}: {message}"
    target = logger if logger is not None else _CURRENT.get()
    if target is not None:
        target.warn(text)
    else:
        _PY_LOGGER.warning("%s", text)
    return text


__all__ = ["WARNING_RULES", "warn", "use_logger"]
