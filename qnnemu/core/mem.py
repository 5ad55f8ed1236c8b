"""QnnMem.h / HTP/QnnHtpMem.h: application memory registered with a context (memRegister).

A registration describes one tensor's memory: a shape and data type (``memShape``,
``dataType``) at an offset of a file descriptor the app shares with the backend:

- ``QNN_MEM_TYPE_ION`` (``ionInfo.fd``) and ``QNN_MEM_TYPE_DMA_BUF`` (``dmaBufInfo.fd``): the
  tensor starts at offset 0 of the fd;
- ``QNN_MEM_TYPE_CUSTOM`` with a ``QnnMemHtp_Descriptor_t`` of type
  ``QNN_HTP_MEM_SHARED_BUFFER``: a buffer of ``size`` bytes (``sharedBufferConfig.fd``) holding
  the tensor at ``sharedBufferConfig.offset``; several tensors may share one buffer at
  different offsets ("multi-tensor" buffers, as ONNX Runtime's HTP shared-memory allocator
  registers them).

The backend reaches the memory by mapping the fd itself (``MAP_SHARED``, from the page holding
the tensor's first byte): the same pages the app writes through its own pointer (rpcmem, memfd,
dma-buf), so inputs are read and outputs written with no copies. Buffers imported with
``remote_register_buf_attr2(..., FASTRPC_ATTR_IMPORT_BUFFER)`` (our libcdsprpc.so) are resolved
to the app's own address instead (their fd is a placeholder).

Rules (checked per descriptor, all before anything is registered), each with a rule id
``QNNEMU-memRegister-<rule>``; see ``RULES``.
"""
from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import stat
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import QnnError
from ..headers import Q, library_dir
from ..htp import runtime as htp_runtime
from ..location import Location
from ..rules import error, fail
from ..spec import dtypes
from .handles import HANDLES
from .tensor import Tensor

FUNC = "memRegister"
MAX_RANK = 64

# rule id -> QnnMem_Error_t it returns (documentation and tests use this table).
RULES = {
    "QNNEMU-memRegister-context": Q.QNN_MEM_ERROR_INVALID_HANDLE,
    "QNNEMU-memRegister-descriptors-null": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-handles-null": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-count": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-mem-type": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-dtype": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-shape-rank": Q.QNN_MEM_ERROR_INVALID_SHAPE,
    "QNNEMU-memRegister-shape-null": Q.QNN_MEM_ERROR_INVALID_SHAPE,
    "QNNEMU-memRegister-shape-zero": Q.QNN_MEM_ERROR_INVALID_SHAPE,
    "QNNEMU-memRegister-custom-null": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-custom-type": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-custom-unsupported": Q.QNN_MEM_ERROR_UNSUPPORTED_MEMTYPE,
    "QNNEMU-memRegister-custom-size": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-custom-range": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-dmabuf-data": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-fd": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-fd-bad": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-fd-type": Q.QNN_MEM_ERROR_MAPPING,
    "QNNEMU-memRegister-fd-range": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memRegister-already-registered": Q.QNN_MEM_ERROR_ALREADY_REGISTERED,
    "QNNEMU-memRegister-mmap": Q.QNN_MEM_ERROR_MAPPING,
    "QNNEMU-memRegister-session-full": Q.QNN_MEM_ERROR_MAPPING,
    "QNNEMU-memDeRegister-handles-null": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memDeRegister-count": Q.QNN_MEM_ERROR_INVALID_ARGUMENT,
    "QNNEMU-memDeRegister-handle": Q.QNN_MEM_ERROR_INVALID_HANDLE,
    "QNNEMU-memDeRegister-handle-duplicate": Q.QNN_MEM_ERROR_INVALID_HANDLE,
    # graphExecute with QNN_TENSORMEMTYPE_MEMHANDLE tensors
    "QNNEMU-graphExecute-memhandle": Q.QNN_GRAPH_ERROR_INVALID_TENSOR,
    "QNNEMU-graphExecute-memhandle-context": Q.QNN_GRAPH_ERROR_INVALID_TENSOR,
    "QNNEMU-graphExecute-memhandle-dtype": Q.QNN_GRAPH_ERROR_INVALID_TENSOR,
    "QNNEMU-graphExecute-memhandle-size": Q.QNN_GRAPH_ERROR_INVALID_TENSOR,
    "QNNEMU-graphExecute-memhandle-readonly": Q.QNN_GRAPH_ERROR_INVALID_TENSOR,
}

_MEM_TYPES = {Q.QNN_MEM_TYPE_ION: "QNN_MEM_TYPE_ION", Q.QNN_MEM_TYPE_CUSTOM: "QNN_MEM_TYPE_CUSTOM",
              Q.QNN_MEM_TYPE_DMA_BUF: "QNN_MEM_TYPE_DMA_BUF"}
_HTP_UNSUPPORTED = {Q.QNN_HTP_MEM_QURT: "QNN_HTP_MEM_QURT (a DSP address; there is no DSP here)",
                    Q.QNN_HTP_MEM_WEIGHTS_BUFFER: "QNN_HTP_MEM_WEIGHTS_BUFFER (needs context binaries)",
                    Q.QNN_HTP_MEM_SHARED_SPILLFILL_BUFFER:
                        "QNN_HTP_MEM_SHARED_SPILLFILL_BUFFER (needs context binaries)"}


@dataclass
class MemDesc:
    """A Qnn_MemDescriptor_t as the app passed it, copied by the ABI layer (pointer checks done)."""

    path: str                     # "memDescriptors[i]"
    mem_type: int
    dtype: int
    dims: tuple[int, ...]
    fd: int = -1
    offset: int = 0               # the tensor's first byte in the fd
    size: int | None = None       # CUSTOM: the buffer's total size (from offset 0 of the fd)
    custom_type: int | None = None
    fd_path: str = ""             # where the fd was given, e.g. "memDescriptors[0].ionInfo.fd"


# ------------------------------------------------------------------- imported app buffers
_rpcmem_lock = threading.Lock()
_rpcmem: list = []


def _rpcmem_lib():
    """The libcdsprpc.so the process uses (found by soname, wherever it was loaded from: the
    backend's loader loads ours on its first getProviders unless the app loaded one), if it is
    ours; else None."""
    with _rpcmem_lock:
        if not _rpcmem:
            lib = None
            for name, mode in (("libcdsprpc.so", os.RTLD_NOLOAD | os.RTLD_NOW),
                               (os.path.join(library_dir(), "libcdsprpc.so"), os.RTLD_NOW)):
                try:
                    lib = ctypes.CDLL(name, mode=mode)
                    break
                except OSError:
                    continue
            try:
                fn = lib.qnnemu_rpcmem_imported if lib is not None else None
            except AttributeError:  # another vendor's library: its fds are real, mappable memory
                fn = None
            if fn is not None:
                fn.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64)]
                fn.restype = ctypes.c_int
            _rpcmem.append(fn)
        return _rpcmem[0]


def imported_buffer(fd: int) -> tuple[int, int] | None:
    """(address, size) if ``fd`` is the placeholder of a buffer imported into our libcdsprpc."""
    imported = _rpcmem_lib()
    if imported is None:
        return None
    addr, size = ctypes.c_uint64(), ctypes.c_uint64()
    if imported(fd, ctypes.byref(addr), ctypes.byref(size)):
        return addr.value, size.value
    return None


# --------------------------------------------------------------------------- registration
class MemRegistration:
    """One registered tensor memory, mapped for as long as it is registered."""

    def __init__(self, context, d: MemDesc, key: tuple[int, int, int]):
        self.context = context
        self.mem_type = d.mem_type
        self.dtype = d.dtype
        self.dims = d.dims
        self.fd = d.fd            # as registered (the app may close it; our mapping stays)
        self.offset = d.offset
        self.size = d.size
        self.key = key            # (st_dev, st_ino, offset): one registration per context
        self.nbytes = nbytes_of(d.dims, d.dtype)
        self.readonly = False
        self._mm: mmap.mmap | None = None
        self._delta = 0
        self._address = 0         # imported buffers: the app's own address
        self._lock = threading.Lock()

    def describe(self) -> str:
        return (f"{_MEM_TYPES.get(self.mem_type, self.mem_type)} fd {self.fd} offset {self.offset}: "
                f"{list(self.dims)} x {dtypes.name(self.dtype)} ({self.nbytes} bytes)")

    def map(self, path: str) -> None:
        imported = imported_buffer(self.fd)
        if imported is not None:
            self._address = imported[0] + self.offset
            return
        page = mmap.ALLOCATIONGRANULARITY
        start = self.offset - self.offset % page
        self._delta = self.offset - start
        length = self._delta + self.nbytes
        try:
            self._mm = mmap.mmap(self.fd, length, flags=mmap.MAP_SHARED,
                                 prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
        except PermissionError:
            # A read-only fd (O_RDONLY): inputs can still be read from it.
            try:
                self._mm = mmap.mmap(self.fd, length, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=start)
                self.readonly = True
            except (OSError, ValueError) as e:
                raise error(Location(FUNC).field(path), "QNNEMU-memRegister-mmap",
                            f"mmap of fd {self.fd} (bytes {start}.."
                            f"{start + length}) failed: {e}", code=Q.QNN_MEM_ERROR_MAPPING) from None
        except (OSError, ValueError) as e:
            raise error(Location(FUNC).field(path), "QNNEMU-memRegister-mmap",
                        f"mmap of fd {self.fd} (bytes {start}..{start + length}) "
                        f"failed: {e}", code=Q.QNN_MEM_ERROR_MAPPING) from None

    def view(self, dtype: int, dims: tuple[int, ...], writable: bool) -> np.ndarray:
        """The registered memory as an array of ``dims`` x ``dtype`` (no copy)."""
        nbytes = nbytes_of(dims, dtype)
        np_dtype = dtypes.numpy_dtype(dtype)
        count = nbytes // np_dtype.itemsize
        with self._lock:
            if self._address:
                buf: Any = (ctypes.c_char * nbytes).from_address(self._address)   # (numpy's stubs lack ctypes arrays)
                arr = np.frombuffer(buf, dtype=np_dtype, count=count)
            elif self._mm is not None:
                arr = np.frombuffer(self._mm, dtype=np_dtype, count=count, offset=self._delta)
            else:
                fail(Location("graphExecute"), "QNNEMU-graphExecute-memhandle",
                     "memory handle was deregistered "
                     "during the call", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        arr = arr.reshape(dims)
        if not writable:
            arr.flags.writeable = False
        return arr

    def unmap(self) -> None:
        with self._lock:
            mm, self._mm, self._address = self._mm, None, 0
        if mm is not None:
            with contextlib.suppress(BufferError):   # an execute still holds a view: unmapped when the last view goes
                mm.close()


def nbytes_of(dims: tuple[int, ...], dtype: int) -> int:
    return int(np.prod(dims, dtype=np.int64)) * dtypes.itemsize(dtype)


def _check_fd(d: MemDesc) -> os.stat_result:
    path = d.fd_path or f"{d.path}.fd"
    if d.fd < 0:
        fail(Location(FUNC).field(path), "QNNEMU-memRegister-fd", f"{d.fd} is not a file descriptor",
             code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
    try:
        st = os.fstat(d.fd)
    except OSError as e:
        raise error(Location(FUNC).field(path), "QNNEMU-memRegister-fd-bad",
                    f"fd {d.fd} is not open in this process (fstat: {e.strerror})",
                    code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT) from None
    if not stat.S_ISREG(st.st_mode) and st.st_size == 0:
        fail(Location(FUNC).field(path), "QNNEMU-memRegister-fd-type",
             f"fd {d.fd} cannot be mapped (mode 0o{st.st_mode:o}, size 0): register memfd, "
             f"rpcmem (ION/DMA-BUF) or file memory", code=Q.QNN_MEM_ERROR_MAPPING)
    return st


def validate(d: MemDesc) -> tuple[os.stat_result, int]:
    """Checks one descriptor; returns (fstat of its fd, tensor bytes)."""
    path = d.path
    if d.mem_type not in _MEM_TYPES:
        fail(Location(FUNC).field(f"{path}.memType"), "QNNEMU-memRegister-mem-type",
             f"{d.mem_type} is not QNN_MEM_TYPE_ION (1), _CUSTOM (2) or _DMA_BUF (3)",
             code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
    if not dtypes.is_known(d.dtype):
        fail(Location(FUNC).field(f"{path}.dataType"), "QNNEMU-memRegister-dtype", f"{dtypes.name(d.dtype)}",
             code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
    for i, n in enumerate(d.dims):
        if n == 0:
            fail(Location(FUNC).field(f"{path}.memShape.dimSize[{i}]"), "QNNEMU-memRegister-shape-zero",
                 f"dimension is 0 (dimensions {list(d.dims)})", code=Q.QNN_MEM_ERROR_INVALID_SHAPE)
    nbytes = nbytes_of(d.dims, d.dtype)
    if d.mem_type == Q.QNN_MEM_TYPE_CUSTOM:
        where = f"{path}.customInfo"
        if d.custom_type in _HTP_UNSUPPORTED:
            fail(Location(FUNC).field(f"{where}.type"), "QNNEMU-memRegister-custom-unsupported",
                 f"{_HTP_UNSUPPORTED[d.custom_type]} is not supported by the emulator; "
                 f"use QNN_HTP_MEM_SHARED_BUFFER", code=Q.QNN_MEM_ERROR_UNSUPPORTED_MEMTYPE)
        if d.custom_type != Q.QNN_HTP_MEM_SHARED_BUFFER:
            fail(Location(FUNC).field(f"{where}.type"), "QNNEMU-memRegister-custom-type",
                 f"{d.custom_type} is not a QnnHtpMem_Type_t", code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
        if not d.size:
            fail(Location(FUNC).field(f"{where}.size"), "QNNEMU-memRegister-custom-size",
                 "is 0 (the shared buffer's total size)", code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
        if d.offset + nbytes > d.size:
            fail(Location(FUNC).field(f"{where}.sharedBufferConfig.offset"), "QNNEMU-memRegister-custom-range",
                 f"the tensor ({list(d.dims)} x {dtypes.name(d.dtype)} = {nbytes} bytes) at offset "
                 f"{d.offset} ends at byte {d.offset + nbytes}, beyond the buffer's size {d.size}",
                 code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
    st = _check_fd(d)
    end = (d.size or 0) if d.mem_type == Q.QNN_MEM_TYPE_CUSTOM else d.offset + nbytes   # (CUSTOM: size checked > 0)
    if end > st.st_size:
        what = "the buffer's size" if d.mem_type == Q.QNN_MEM_TYPE_CUSTOM else \
            f"the tensor ({list(d.dims)} x {dtypes.name(d.dtype)} = {nbytes} bytes)"
        fail(Location(FUNC).field(d.fd_path or f"{path}.fd"), "QNNEMU-memRegister-fd-range",
             f"{what} needs {end} bytes but fd {d.fd} holds only {st.st_size}", code=Q.QNN_MEM_ERROR_INVALID_ARGUMENT)
    return st, nbytes


def register(context, descs: list[MemDesc]) -> list[int]:
    """Validates every descriptor, maps them and hands out their handles (all or nothing)."""
    checked = [(d, validate(d)[0]) for d in descs]
    regs: list[MemRegistration] = []
    with context.lock:  # one check-and-insert: concurrent registrations of one fd/offset cannot both win
        taken = {r.key: r for r in context.mem_handles.values()}
        for d, st in checked:
            key = (st.st_dev, st.st_ino, d.offset)
            if key in taken:
                prior = taken[key]
                other = "an earlier descriptor of this call" if any(prior is r for r in regs) else \
                    f"a live registration ({prior.describe()})"
                fail(Location(FUNC).field(d.path), "QNNEMU-memRegister-already-registered",
                     f"fd {d.fd} offset {d.offset} is already registered in this context by {other}; "
                     f"deregister it first or reuse its handle", code=Q.QNN_MEM_ERROR_ALREADY_REGISTERED)
            reg = MemRegistration(context, d, key)
            taken[key] = reg
            regs.append(reg)
        try:
            for reg, (d, _) in zip(regs, checked):
                reg.map(d.path)
        except QnnError:
            for reg in regs:
                reg.unmap()
            raise
        _map_into_session(context, regs, checked)
        handles = [HANDLES.new(reg) for reg in regs]
        context.mem_handles.update(zip(handles, regs))
    return handles


def _map_into_session(context, regs: list[MemRegistration], checked) -> None:
    """Maps the buffers into the context's cDSP session (QNN HTP backend documentation, "I/O
    Buffer Registration Failure": "the I/O buffers specific to a context need to be mapped to the
    same session where that context is deserialized"); a context made by contextCreate enters
    the first session with room when it first registers memory.  All or nothing."""
    mapped: list[MemRegistration] = []
    try:
        context.enter_session(0)
        for reg in regs:
            context.session_pool.map_io(context, reg, reg.nbytes)
            mapped.append(reg)
    except htp_runtime.SessionError as exc:
        for reg in mapped:
            context.session_pool.unmap_io(reg)
        for reg in regs:
            reg.unmap()
        path = checked[len(mapped)][0].path if len(mapped) < len(checked) else "memDescriptors"
        fail(Location(FUNC).field(path), "QNNEMU-memRegister-session-full",
             f"{exc} (QNN HTP backend documentation, 'I/O Buffer Registration Failure': load the "
             f"context with QNN_HTP_CONTEXT_CONFIG_OPTION_IO_MEM_ESTIMATION, or register a dummy "
             f"buffer before loading the next context so that it goes to a new session)",
             code=Q.QNN_MEM_ERROR_MAPPING)


def deregister(handles: list[tuple[int, MemRegistration]]) -> None:
    for handle, reg in handles:
        if reg.context.session_pool is not None:
            reg.context.session_pool.unmap_io(reg)
        with reg.context.lock:
            reg.context.mem_handles.pop(handle, None)
        HANDLES.release(handle)
        reg.unmap()


def resolve(reg: MemRegistration, graph, t: Tensor, path: str, writable: bool) -> np.ndarray:
    """graphExecute: the registered memory of a MEMHANDLE tensor as an array of the graph tensor."""
    func = "graphExecute"
    if reg.context is not graph.context:
        fail(Location(func).field(path), "QNNEMU-graphExecute-memhandle-context",
             f"the memory handle was registered with another context than graph '{graph.name}''s",
             code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
    if reg.dtype != t.dtype:
        fail(Location(func).field(path), "QNNEMU-graphExecute-memhandle-dtype",
             f"tensor '{t.name}' is {dtypes.name(t.dtype)} but its memory was registered as "
             f"{reg.describe()}", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
    if reg.nbytes < t.nbytes:
        fail(Location(func).field(path), "QNNEMU-graphExecute-memhandle-size",
             f"tensor '{t.name}' needs {t.nbytes} bytes ({list(t.dims)} x {dtypes.name(t.dtype)}) but its "
             f"memory was registered as {reg.describe()}", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
    if writable and reg.readonly:
        fail(Location(func).field(path), "QNNEMU-graphExecute-memhandle-readonly",
             f"output tensor '{t.name}': registered memory (fd {reg.fd}) was opened read-only",
             code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
    # A registration at least as large as the tensor serves it even with other dimensions
    # (ONNX Runtime reuses one registration per address for any tensor that fits).
    return reg.view(t.dtype, t.dims, writable)
