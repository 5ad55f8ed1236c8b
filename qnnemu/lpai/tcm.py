"""The TCM pool of ADSP direct mode (QNN LPAI Memory Management, "TCM Memory Support in
LPAIBackendExtensions (ADSP Direct Mode)": "Allocation Details", "Invalid mem_type
Configuration", "Testing TCM Memory Support", "Limitations and Error Behavior").

In ADSP direct mode the backend extensions allocate the I/O tensor buffers and the model binary
in the memory type ``lpai_graph.execute.mem_type`` names: DDR (the default) or TCM.  The TCM
model here:

- one pool of at most ``MAX_POOL_BYTES`` (2,035,712) bytes, no resizing; the combined size of
  the buffers is what counts (the document's limit), each buffer starting on the LPAI start
  alignment (the padding between buffers is not charged: the backing store has room for it);
- at most ``MAX_ALLOCATIONS`` (32) buffers.  The document calls a 33rd a "system fatal error";
  the emulator refuses it with an error (``QNNEMU-lpai-tcm-alloc-count``), never a crash;
- the debug messages of the document: ``TCM pool current size: <current> max_size: <max>``
  once, when the pool is registered at the first allocation (current: the bytes allocated so
  far, 0), and ``Allocate size <N> from tcm pool 0`` for every allocation;
- a buffer that does not fit logs ``TCM memory allocation failure: required size: <N>`` at
  error level and fails (``QNNEMU-lpai-tcm-alloc-failure``): no fallback to DDR;
- an unknown ``mem_type`` resolves to QNN_LPAI_MEM_TYPE_UNDEFINED (the config parser logs
  ``Invalid memory type``); allocating with it logs ``Memory type only supports DDR & TCM`` and
  fails (``QNNEMU-lpai-tcm-mem-type``);
- TCM outside ADSP direct mode (ARM or x86 simulation) is refused
  (``QNNEMU-lpai-tcm-direct-mode``).

Failures raise ``QnnError`` with QNN_COMMON_ERROR_MEM_ALLOC (what an allocation returning NULL
makes of the initialization); the tools report them and exit with status 1.  Scratch and
persistent memory never come from here: they are always in DDR.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..headers import Q
from ..location import Location
from ..rules import fail
from . import device

MAX_POOL_BYTES = 2_035_712
MAX_ALLOCATIONS = 32
MEM_TYPES = {"ddr": Q.QNN_LPAI_MEM_TYPE_DDR, "tcm": Q.QNN_LPAI_MEM_TYPE_TCM}
UNDEFINED = Q.QNN_LPAI_MEM_TYPE_UNDEFINED
FUNC = "tcmAllocate"   # the allocator of the backend extensions, as rule locations name it


def parse_mem_type(value, log: logging.Logger) -> int:
    """``lpai_graph.execute.mem_type``: "ddr" or "tcm" (any case); anything else logs
    ``Invalid memory type`` and resolves to QNN_LPAI_MEM_TYPE_UNDEFINED."""
    if isinstance(value, str) and value.lower() in MEM_TYPES:
        return MEM_TYPES[value.lower()]
    log.error("Invalid memory type")
    log.debug("lpai_graph.execute.mem_type %r is not \"ddr\" or \"tcm\"", value)
    return UNDEFINED


def _aligned(nbytes: int, alignment: int = device.START_ADDR_ALIGNMENT) -> np.ndarray:
    """``nbytes`` zero bytes starting on ``alignment``."""
    raw = np.zeros(nbytes + alignment, np.uint8)
    skip = (-raw.ctypes.data) % alignment
    return raw[skip:skip + nbytes]


class TcmPool:
    """The ADSP's TCM pool (pool 0): one backing store, buffers handed out in order."""

    def __init__(self, log: logging.Logger, max_bytes: int = MAX_POOL_BYTES,
                 max_allocations: int = MAX_ALLOCATIONS):
        self.log = log
        self.max_bytes = max_bytes
        self.max_allocations = max_allocations
        self.used = 0                # bytes of the buffers handed out (what the limit counts)
        self.allocations = 0
        self.registered = False
        self._store: np.ndarray | None = None
        self._cursor = 0

    def allocate(self, nbytes: int, what: str) -> np.ndarray:
        """A buffer of ``nbytes`` from the pool (``what`` names it in errors)."""
        nbytes = int(nbytes)
        if not self.registered:
            # Registered at the first allocation; the store has room for the alignment padding.
            self._store = _aligned(self.max_bytes + self.max_allocations * device.START_ADDR_ALIGNMENT)
            self.registered = True
            self.log.debug("TCM pool current size: %d max_size: %d", self.used, self.max_bytes)
        if self.allocations >= self.max_allocations:
            fail(Location(FUNC).path(what), "QNNEMU-lpai-tcm-alloc-count",
                 f"allocation {self.allocations + 1} refused: the TCM allocator supports at most "
                 f"{self.max_allocations} buffers (the document's \"system fatal error\"; reduce the "
                 f"number of tensor buffers or use mem_type \"ddr\")", code=Q.QNN_COMMON_ERROR_MEM_ALLOC)
        if self.used + nbytes > self.max_bytes:
            self.log.error("TCM memory allocation failure: required size: %d", nbytes)
            fail(Location(FUNC).path(what), "QNNEMU-lpai-tcm-alloc-failure",
                 f"{nbytes} bytes do not fit: {self.used} of {self.max_bytes} TCM bytes are in use "
                 f"(no fallback to DDR; reduce the model or tensor sizes, or use mem_type \"ddr\")",
                 code=Q.QNN_COMMON_ERROR_MEM_ALLOC)
        assert self._store is not None
        start = self._cursor
        buf = self._store[start:start + nbytes]
        self._cursor = start + device.align_up(nbytes, device.START_ADDR_ALIGNMENT)
        self.used += nbytes
        self.allocations += 1
        self.log.debug("Allocate size %d from tcm pool 0", nbytes)
        return buf


class Allocator:
    """The backend extensions' allocator of I/O tensor buffers and the model binary: every
    buffer in the one memory type ``mem_type`` (never mixed), on the LPAI start alignment."""

    def __init__(self, mem_type: int, direct_mode: bool, log: logging.Logger,
                 pool_factory: Callable[[logging.Logger], TcmPool] = TcmPool):
        self.mem_type = mem_type
        self.log = log
        if mem_type == Q.QNN_LPAI_MEM_TYPE_TCM and not direct_mode:
            fail(Location(FUNC).path("lpai_graph.execute.mem_type"), "QNNEMU-lpai-tcm-direct-mode",
                 "\"tcm\": TCM memory is available in ADSP direct mode only (--direct_mode adsp); "
                 "ARM and x86 simulation do not support it", code=Q.QNN_COMMON_ERROR_MEM_ALLOC)
        self.pool = pool_factory(log) if mem_type == Q.QNN_LPAI_MEM_TYPE_TCM else None
        self.buffers: list[np.ndarray] = []   # kept until the run ends (the binary must persist)

    def allocate(self, nbytes: int, what: str) -> np.ndarray:
        if self.mem_type == Q.QNN_LPAI_MEM_TYPE_DDR:
            buf = _aligned(int(nbytes))
        elif self.pool is not None:
            buf = self.pool.allocate(nbytes, what)
        else:
            self.log.error("Memory type only supports DDR & TCM")
            fail(Location(FUNC).path(what), "QNNEMU-lpai-tcm-mem-type",
                 "the memory type is QNN_LPAI_MEM_TYPE_UNDEFINED (lpai_graph.execute.mem_type is not "
                 "\"ddr\" or \"tcm\"): no buffer allocated", code=Q.QNN_COMMON_ERROR_MEM_ALLOC)
        self.buffers.append(buf)
        return buf
