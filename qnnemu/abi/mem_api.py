"""QnnMem.h entries (memRegister, memDeRegister) and graphExecute's QNN_TENSORMEMTYPE_MEMHANDLE
tensors; the rules live in qnnemu/core/mem.py (``mem.RULES``).

Imported by entry.py so that the ``@entry`` functions fill their table slots.
"""
from __future__ import annotations

import numpy as np

from ..core import mem
from ..core.context import Context
from ..core.handles import HANDLES
from ..errors import QnnError
from ..headers import Q
from ..location import Location
from ..rules import error, fail
from .library import entry, ffi, hval as _hval

MAX_COUNT = 1 << 16  # descriptors/handles per call; a larger count is a garbage value


def _read(d, i: int) -> mem.MemDesc:
    """Copies memDescriptors[i] (pointer-level checks here, the rest in core.mem.validate)."""
    path = f"memDescriptors[{i}]"
    rank = int(d.memShape.numDim)
    if rank > mem.MAX_RANK:
        fail(Location(mem.FUNC).field(f"{path}.memShape.numDim"), "QNNEMU-memRegister-shape-rank",
             f"{rank} dimensions (at most {mem.MAX_RANK})", code=Q.QNN_MEM_ERROR_INVALID_SHAPE)
    if rank and d.memShape.dimSize == ffi.NULL:
        fail(Location(mem.FUNC).field(f"{path}.memShape.dimSize"), "QNNEMU-memRegister-shape-null",
             f"is NULL but numDim is {rank}", code=Q.QNN_MEM_ERROR_INVALID_SHAPE)
    dims = tuple(int(d.memShape.dimSize[k]) for k in range(rank))
    desc = mem.MemDesc(path, int(d.memType), int(d.dataType), dims)
    if desc.mem_type == Q.QNN_MEM_TYPE_ION:
        desc.fd, desc.fd_path = int(d.ionInfo.fd), f"{path}.ionInfo.fd"
    elif desc.mem_type == Q.QNN_MEM_TYPE_DMA_BUF:
        if d.dmaBufInfo.data == ffi.NULL:
            fail(Location(mem.FUNC).field(f"{path}.dmaBufInfo.data"), "QNNEMU-memRegister-dmabuf-data",
                 "is NULL (the app's mapping of the DMA-BUF)", code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
        desc.fd, desc.fd_path = int(d.dmaBufInfo.fd), f"{path}.dmaBufInfo.fd"
    elif desc.mem_type == Q.QNN_MEM_TYPE_CUSTOM:
        if d.customInfo == ffi.NULL:
            fail(Location(mem.FUNC).field(f"{path}.customInfo"), "QNNEMU-memRegister-custom-null",
                 "is NULL (a QnnMemHtp_Descriptor_t * is required)", code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
        htp = ffi.cast("QnnMemHtp_Descriptor_t *", d.customInfo)
        desc.custom_type = int(htp.type)
        desc.size = int(htp.size)
        if desc.custom_type == Q.QNN_HTP_MEM_SHARED_BUFFER:
            desc.fd, desc.fd_path = int(htp.sharedBufferConfig.fd), f"{path}.customInfo.sharedBufferConfig.fd"
            desc.offset = int(htp.sharedBufferConfig.offset)
    return desc


@entry
def memRegister(context, memDescriptors, numDescriptors, memHandles):
    try:
        ctx = HANDLES.get(_hval(context), Context, Q.QNN_MEM_ERROR_INVALID_HANDLE, "context")
    except QnnError as e:
        raise error(Location(mem.FUNC), "QNNEMU-memRegister-context", e.detail, code=e.code) from None
    if memDescriptors == ffi.NULL:
        fail(Location(mem.FUNC).path("memDescriptors"), "QNNEMU-memRegister-descriptors-null", "is NULL",
             code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
    if memHandles == ffi.NULL:
        fail(Location(mem.FUNC).path("memHandles"), "QNNEMU-memRegister-handles-null", "is NULL",
             code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
    n = int(numDescriptors)
    if not 0 < n <= MAX_COUNT:
        fail(Location(mem.FUNC).path("numDescriptors"), "QNNEMU-memRegister-count", f"{n} (must be 1..{MAX_COUNT})",
             code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
    handles = mem.register(ctx, [_read(memDescriptors[i], i) for i in range(n)])
    for i, h in enumerate(handles):
        memHandles[i] = ffi.cast("Qnn_MemHandle_t", h)


@entry
def memDeRegister(memHandles, numHandles):
    func = "memDeRegister"
    if memHandles == ffi.NULL:
        fail(Location(func).path("memHandles"), "QNNEMU-memDeRegister-handles-null", "is NULL",
             code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
    n = int(numHandles)
    if not 0 < n <= MAX_COUNT:
        fail(Location(func).path("numHandles"), "QNNEMU-memDeRegister-count", f"{n} (must be 1..{MAX_COUNT})",
             code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
    found: list[tuple[int, mem.MemRegistration]] = []
    for i in range(n):  # every handle is checked before any is deregistered
        h = _hval(memHandles[i])
        if any(h == seen for seen, _ in found):
            fail(Location(func).field(f"memHandles[{i}]"), "QNNEMU-memDeRegister-handle-duplicate",
                 f"0x{h:x} appears twice in this call", code=Q.QNN_MEM_ERROR_INVALID_HANDLE)
        try:
            found.append((h, HANDLES.get(h, mem.MemRegistration, Q.QNN_MEM_ERROR_INVALID_HANDLE, f"memHandles[{i}]")))
        except QnnError as e:
            raise error(Location(func), "QNNEMU-memDeRegister-handle",
                        f"{e.detail} (not a handle returned by memRegister, or deregistered already)",
                        code=e.code) from None
    mem.deregister(found)


def tensor_view(graph, t, mem_handle, path: str, writable: bool) -> np.ndarray:
    """graphExecute: the memory a MEMHANDLE input/output tensor was registered with (no copy)."""
    try:
        reg = HANDLES.get(_hval(mem_handle), mem.MemRegistration, Q.QNN_GRAPH_ERROR_INVALID_TENSOR, path)
    except QnnError as e:
        raise error(Location("graphExecute"), "QNNEMU-graphExecute-memhandle",
                    f"{e.detail} (QNN_TENSORMEMTYPE_MEMHANDLE tensors carry a handle returned by memRegister)",
                    code=e.code) from None
    return mem.resolve(reg, graph, t, path, writable)
