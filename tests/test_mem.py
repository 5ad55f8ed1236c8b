"""QnnMem.h through the C ABI: memRegister / memDeRegister of rpcmem (libcdsprpc.so), memfd and
imported buffers, graphExecute with QNN_TENSORMEMTYPE_MEMHANDLE inputs and outputs (zero-copy),
multi-tensor buffers at offsets, contextFree releasing registrations, and one negative case per
rule id of qnnemu/core/mem.py (``mem.RULES``).
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import abi
import cffi
import numpy as np
import pytest
from abi import NULL, ffi, vp

import qnnemu
from qnnemu.core import mem
from qnnemu.headers import Q

pytestmark = pytest.mark.usefixtures("qnn_abi")

F32 = Q.QNN_DATATYPE_FLOAT_32
MEMHANDLE = Q.QNN_TENSORMEMTYPE_MEMHANDLE
BOGUS = 0x7654321
RULE_RE = abi.RULE_ID
RPCMEM_PATH = Path(qnnemu.library_dir()) / "libcdsprpc.so"
FASTRPC_ATTR_IMPORT_BUFFER = 256
SHAPE = (2, 3)
NBYTES = 24  # 2 x 3 float32

# ------------------------------------------------------------------------------ libcdsprpc
rffi = cffi.FFI()
rffi.cdef("""
void rpcmem_init(void);
void rpcmem_deinit(void);
void *rpcmem_alloc(int heapid, uint32_t flags, int size);
void *rpcmem_alloc2(int heapid, uint32_t flags, size_t size);
void rpcmem_free(void *po);
int rpcmem_to_fd(void *po);
void remote_register_buf_attr2(void *buf, size_t size, int fd, int attr);
int qnnemu_rpcmem_live(void);
""")


@pytest.fixture(scope="module")
def rpc():
    abi.table()  # the backend first: its getProviders loads libcdsprpc.so
    return rffi.dlopen(str(RPCMEM_PATH))


def addr(p) -> int:
    return int(rffi.cast("uintptr_t", p))


def rview(p, nbytes: int, shape=SHAPE) -> np.ndarray:
    """A float32 numpy view of rpcmem memory (the app's pointer)."""
    return np.frombuffer(rffi.buffer(p, nbytes), np.float32).reshape(shape)


# ------------------------------------------------------------------------------ environment
class Env:
    """logger (recording) -> backend -> context with graph 'g': y = a + b, all (2, 3) float32."""

    def __init__(self):
        self.rec = abi.LogRecorder()
        self.keep: list = []
        self.fds: list[int] = []
        code, self.log = abi.create("logCreate", self.rec.callback, Q.QNN_LOG_LEVEL_DEBUG)
        assert code == Q.QNN_SUCCESS, "setup: logCreate"
        code, self.be = abi.create("backendCreate", vp(self.log), NULL)
        assert code == Q.QNN_SUCCESS, "setup: backendCreate"
        self.ctx = self.context()
        self.g, self.a, self.b, self.y = self.add_graph(self.ctx)
        self.rec.clear()

    def context(self) -> int:
        code, ctx = abi.create("contextCreate", vp(self.be), NULL, NULL)
        assert code == Q.QNN_SUCCESS, "setup: contextCreate"
        return ctx

    def add_graph(self, ctx: int, name: str = "g"):
        code, g = abi.create("graphCreate", vp(ctx), abi.cstr(name, self.keep), NULL)
        assert code == Q.QNN_SUCCESS, "setup: graphCreate"
        a = abi.tensor("a", SHAPE)
        b = abi.tensor("b", SHAPE)
        y = abi.tensor("y", SHAPE, type_=Q.QNN_TENSOR_TYPE_APP_READ)
        for t in (a, b, y):
            assert abi.call("tensorCreateGraphTensor", vp(g), t.ptr) == Q.QNN_SUCCESS, "setup: tensor"
        self.keep += [a, b, y]
        assert abi.call("graphAddNode", vp(g), abi.op_config("add", "ElementWiseAdd", [a, b], [y])) == 0
        assert abi.call("graphFinalize", vp(g), NULL, NULL) == Q.QNN_SUCCESS, "setup: graphFinalize"
        return g, a, b, y

    def close(self):
        for fd in self.fds:
            os.close(fd)
        assert abi.call("backendFree", vp(self.be)) == Q.QNN_SUCCESS, "teardown: backendFree"
        assert abi.call("logFree", vp(self.log)) == Q.QNN_SUCCESS, "teardown: logFree"

    # ---- descriptors ----------------------------------------------------------------------
    def shared(self, fd: int, offset: int = 0, size: int = NBYTES, dims=SHAPE, dtype=F32,
               htp_type=Q.QNN_HTP_MEM_SHARED_BUFFER) -> dict:
        return dict(mem_type=Q.QNN_MEM_TYPE_CUSTOM, dims=dims, dtype=dtype,
                    custom=dict(type=htp_type, size=size, fd=fd, offset=offset))

    def ion(self, fd: int, dims=SHAPE, dtype=F32) -> dict:
        return dict(mem_type=Q.QNN_MEM_TYPE_ION, dims=dims, dtype=dtype, fd=fd)

    def dmabuf(self, fd: int, data: int, dims=SHAPE, dtype=F32) -> dict:
        return dict(mem_type=Q.QNN_MEM_TYPE_DMA_BUF, dims=dims, dtype=dtype, fd=fd, data=data)

    def descriptors(self, specs: list[dict]):
        arr = ffi.new("Qnn_MemDescriptor_t[]", max(len(specs), 1))
        self.keep.append(arr)
        for d, s in zip(arr, specs):
            dims = s.get("dims")
            d.memShape.numDim = s.get("num_dim", len(dims) if dims is not None else 0)
            if dims is None:
                d.memShape.dimSize = NULL
            else:
                d.memShape.dimSize = self.own(ffi.new("uint32_t[]", list(dims) or [0]))
            d.memShape.shapeConfig = NULL
            d.dataType = s["dtype"]
            d.memType = s["mem_type"]
            if "custom" in s:
                c = s["custom"]
                if c is None:
                    d.customInfo = NULL
                else:
                    h = self.own(ffi.new("QnnMemHtp_Descriptor_t *"))
                    h.type, h.size = c["type"], c["size"]
                    h.sharedBufferConfig.fd, h.sharedBufferConfig.offset = c["fd"], c["offset"]
                    d.customInfo = h
            elif "data" in s:
                d.dmaBufInfo.fd = s["fd"]
                d.dmaBufInfo.data = ffi.cast("void *", s["data"])
            else:
                d.ionInfo.fd = s.get("fd", -1)
        return arr

    def register(self, specs: list[dict], ctx: int | None = None) -> tuple[int, list[int]]:
        arr = self.descriptors(specs)
        out = ffi.new("Qnn_MemHandle_t[]", max(len(specs), 1))
        code = abi.call("memRegister", vp(self.ctx if ctx is None else ctx), arr, len(specs), out)
        return code, [abi.hval(out[i]) for i in range(len(specs))]

    def registered(self, specs: list[dict], ctx: int | None = None) -> list[int]:
        code, handles = self.register(specs, ctx)
        assert code == Q.QNN_SUCCESS, f"memRegister returned {code}: {self.rec.errors()}"
        assert all(handles) and len(set(handles)) == len(handles), f"distinct non-NULL handles: {handles}"
        return handles

    def deregister(self, handles: list[int]) -> int:
        arr = ffi.new("Qnn_MemHandle_t[]", [vp(h) for h in handles] or [NULL])
        return abi.call("memDeRegister", arr, len(handles))

    # ---- execute --------------------------------------------------------------------------
    def io(self, t: abi.Struct, handle: int | None = None, array: np.ndarray | None = None,
           version: int = 2) -> abi.Struct:
        """An execute argument for created tensor ``t``: MEMHANDLE ``handle`` or RAW ``array``."""
        c = abi.tensor(None, SHAPE, type_=int(t.v.type), tensor_id=t.id, version=version,
                       mem_type=MEMHANDLE if handle is not None else Q.QNN_TENSORMEMTYPE_RAW)
        if handle is not None:
            c.v.memHandle = vp(handle)
        else:
            abi.set_buffer(c, array)
        return c

    def execute(self, inputs, outputs, g: int | None = None) -> int:
        return abi.call("graphExecute", vp(self.g if g is None else g), abi.tensor_array(inputs, self.keep),
                        len(inputs), abi.tensor_array(outputs, self.keep), len(outputs), NULL, NULL)

    # ---- memory ----------------------------------------------------------------------------
    def memfd(self, size: int = 4096) -> int:
        fd = os.memfd_create("qnnemu-test")
        os.ftruncate(fd, size)
        self.fds.append(fd)
        return fd

    def own(self, cdata):
        self.keep.append(cdata)
        return cdata

    def messages_for(self, rule: str) -> list[str]:
        return [m for _, m in self.rec.records if f"[{rule}]" in m]

    def rules_logged(self) -> set[str]:
        return {r for _, m in self.rec.records for r in RULE_RE.findall(m)}


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def mappings_of(fd: int) -> int:
    """How many mappings of fd's file this process has (/proc/self/maps, by inode)."""
    ino = os.fstat(fd).st_ino
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if len(line.split()) >= 5 and line.split()[4] == str(ino))


# --------------------------------------------------------------------------- libcdsprpc.so
def test_rpcmem_alloc_to_fd_free(rpc):
    live = rpc.qnnemu_rpcmem_live()
    rpc.rpcmem_init()
    p = rpc.rpcmem_alloc(25, 1, 100)
    assert p != rffi.NULL and addr(p) % 4096 == 0, "rpcmem_alloc returns page-aligned memory"
    fd = rpc.rpcmem_to_fd(p)
    assert fd >= 0 and rpc.rpcmem_to_fd(rffi.cast("char *", p) + 50) == fd, "rpcmem_to_fd of an inner address"
    st = os.fstat(fd)
    assert st.st_size >= 100, f"the fd holds the allocation: size {st.st_size}"
    assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:qnnemu-rpcmem"), "rpcmem memory is a memfd"
    assert bytes(rffi.buffer(p, 100)) == b"\0" * 100, "rpcmem memory starts zeroed"
    q = rpc.rpcmem_alloc2(25, 1, 5000)
    assert q != rffi.NULL and rpc.rpcmem_to_fd(q) not in (-1, fd), "rpcmem_alloc2: another buffer, another fd"
    assert rpc.qnnemu_rpcmem_live() == live + 2, "two live allocations"
    assert rpc.rpcmem_alloc(25, 1, 0) == rffi.NULL and rpc.rpcmem_alloc(25, 1, -5) == rffi.NULL, \
        "rpcmem_alloc of size <= 0 fails"
    rpc.rpcmem_free(p)
    rpc.rpcmem_free(q)
    rpc.rpcmem_free(rffi.NULL)
    rpc.rpcmem_free(rffi.cast("void *", 0x1000))  # unknown pointers are ignored, as rpcmem does
    assert rpc.qnnemu_rpcmem_live() == live, "rpcmem_free releases"
    assert rpc.rpcmem_to_fd(p) == -1, "rpcmem_to_fd of freed memory is -1"
    rpc.rpcmem_deinit()


def test_rpcmem_is_thread_safe(rpc):
    import threading
    live = rpc.qnnemu_rpcmem_live()
    errors: list[str] = []

    def worker(k: int):
        for i in range(100):
            p = rpc.rpcmem_alloc(25, 1, 64 + i)
            fd = rpc.rpcmem_to_fd(p)
            rffi.buffer(p, 4)[:] = bytes([k, i % 256, 0, 1])
            if fd < 0 or bytes(rffi.buffer(p, 4)) != bytes([k, i % 256, 0, 1]):
                errors.append(f"thread {k} allocation {i}: fd {fd}")
            rpc.rpcmem_free(p)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and rpc.qnnemu_rpcmem_live() == live, errors


def test_bare_soname_dlopen_finds_our_library(rpc):
    """ONNX Runtime dlopens "libcdsprpc.so" by bare name: once the backend has answered
    QnnInterface_getProviders that works, because its loader dlopens our libcdsprpc.so (beside
    it or in the package) -- without a DT_NEEDED, so that the backend can be copied and renamed."""
    lib = ctypes.CDLL("libcdsprpc.so")
    own = ctypes.CDLL(str(RPCMEM_PATH))
    assert ctypes.cast(lib.qnnemu_rpcmem_live, ctypes.c_void_p).value == \
        ctypes.cast(own.qnnemu_rpcmem_live, ctypes.c_void_p).value, "bare name resolves to qnnemu's libcdsprpc.so"
    if shutil.which("readelf"):
        out = subprocess.run(["readelf", "-d", qnnemu.backend_library_path()], capture_output=True, text=True).stdout
        assert "Shared library: [libcdsprpc.so]" not in out, f"no DT_NEEDED on libcdsprpc.so: {out}"


# ----------------------------------------------------------------------- execute, zero-copy
def test_rpcmem_buffers_are_read_and_written_in_place(env, rpc):
    bufs = [rpc.rpcmem_alloc(25, 1, NBYTES) for _ in range(3)]
    try:
        a, b, y = (rview(p, NBYTES) for p in bufs)
        handles = env.registered([env.shared(rpc.rpcmem_to_fd(p)) for p in bufs])
        ins = [env.io(env.a, handles[0]), env.io(env.b, handles[1])]
        outs = [env.io(env.y, handles[2])]
        for k in range(3):  # the app writes through its own pointers only; no re-registration
            a[...] = np.arange(6, dtype=np.float32).reshape(SHAPE) * (k + 1)
            b[...] = 0.5 + k
            assert env.execute(ins, outs) == Q.QNN_SUCCESS, f"graphExecute: {env.rec.errors()}"
            np.testing.assert_array_equal(y, a + b, err_msg=f"execute {k}: y written into the app's rpcmem buffer")
        assert env.deregister(handles) == Q.QNN_SUCCESS, "memDeRegister"
    finally:
        for p in bufs:
            rpc.rpcmem_free(p)


def test_multi_tensor_buffer_at_offsets(env, rpc):
    """Three tensors in one rpcmem buffer (one fd), at offsets on and off page boundaries."""
    size = 3 * 4096
    p = rpc.rpcmem_alloc(25, 1, size)
    try:
        fd = rpc.rpcmem_to_fd(p)
        offsets = [40, 4096 + 8, 2 * 4096]
        views = [np.frombuffer(rffi.buffer(p, size), np.float32, 6, o).reshape(SHAPE) for o in offsets]
        handles = env.registered([env.shared(fd, o, size) for o in offsets])
        views[0][...] = np.float32([[1, 2, 3], [4, 5, 6]])
        views[1][...] = 10
        code = env.execute([env.io(env.a, handles[0]), env.io(env.b, handles[1])], [env.io(env.y, handles[2])])
        assert code == Q.QNN_SUCCESS, f"graphExecute: {env.rec.errors()}"
        np.testing.assert_array_equal(views[2], views[0] + 10, err_msg="y at offset 8192 of the shared buffer")
        raw = np.frombuffer(rffi.buffer(p, size), np.uint8)
        assert not raw[:40].any() and not raw[64:4096 + 8].any(), "nothing outside the tensors was written"
        # An output may also alias an input of the same buffer (in-place add).
        code = env.execute([env.io(env.a, handles[0]), env.io(env.b, handles[1])], [env.io(env.y, handles[0])])
        assert code == Q.QNN_SUCCESS and views[0][0, 0] == 11, "output written over its own input"
        assert env.deregister(handles) == Q.QNN_SUCCESS, "memDeRegister of all three at once"
    finally:
        rpc.rpcmem_free(p)


def test_ion_and_dma_buf_memfd_mixed_with_raw(env):
    """QNN_MEM_TYPE_ION and _DMA_BUF descriptors over plain memfds, next to a RAW input, v1 tensors."""
    import mmap
    fa, fy = env.memfd(), env.memfd()
    ma = mmap.mmap(fa, 4096)
    my = mmap.mmap(fy, 4096)
    a = np.frombuffer(ma, np.float32, 6).reshape(SHAPE)
    y = np.frombuffer(my, np.float32, 6).reshape(SHAPE)
    ptr_y = ctypes.addressof(ctypes.c_char.from_buffer(my))
    handles = env.registered([env.ion(fa), env.dmabuf(fy, ptr_y)])
    a[...] = -3
    b = np.full(SHAPE, 7, np.float32)
    code = env.execute([env.io(env.a, handles[0], version=1), env.io(env.b, array=b, version=1)],
                       [env.io(env.y, handles[1], version=1)])
    assert code == Q.QNN_SUCCESS, f"graphExecute: {env.rec.errors()}"
    np.testing.assert_array_equal(y, np.full(SHAPE, 4, np.float32), err_msg="y in the DMA-BUF memfd")
    assert env.deregister(handles) == Q.QNN_SUCCESS
    del a, y


def test_imported_app_buffer(env, rpc):
    """remote_register_buf_attr2(..., FASTRPC_ATTR_IMPORT_BUFFER) then rpcmem_to_fd, as ONNX
    Runtime does for memory rpcmem did not allocate: the backend uses the app's own pages."""
    arrays = [np.full(SHAPE, 2, np.float32), np.full(SHAPE, 3, np.float32), np.zeros(SHAPE, np.float32)]
    ptrs = [rffi.cast("void *", x.ctypes.data) for x in arrays]
    for p in ptrs:
        rpc.remote_register_buf_attr2(p, NBYTES, 0, FASTRPC_ATTR_IMPORT_BUFFER)
    fds = [rpc.rpcmem_to_fd(p) for p in ptrs]
    assert all(fd >= 0 for fd in fds), f"imported buffers have fds: {fds}"
    handles = env.registered([env.shared(fd) for fd in fds])
    code = env.execute([env.io(env.a, handles[0]), env.io(env.b, handles[1])], [env.io(env.y, handles[2])])
    assert code == Q.QNN_SUCCESS, f"graphExecute: {env.rec.errors()}"
    np.testing.assert_array_equal(arrays[2], np.full(SHAPE, 5, np.float32), err_msg="written into the app array")
    assert env.deregister(handles) == Q.QNN_SUCCESS
    for p in ptrs:
        rpc.remote_register_buf_attr2(p, NBYTES, -1, 0)
    assert [rpc.rpcmem_to_fd(p) for p in ptrs] == [-1] * 3, "deregistered imports have no fd"


def test_deregister_unmaps_and_context_free_releases(env, rpc):
    p = rpc.rpcmem_alloc(25, 1, NBYTES)
    try:
        fd = rpc.rpcmem_to_fd(p)
        before = mappings_of(fd)
        (h,) = env.registered([env.shared(fd)])
        assert mappings_of(fd) == before + 1, "memRegister maps the fd"
        assert env.deregister([h]) == Q.QNN_SUCCESS and mappings_of(fd) == before, "memDeRegister unmaps it"
        (h2,) = env.registered([env.shared(fd)])  # the same fd/offset is free again
        assert env.register([env.shared(fd)])[0] == Q.QNN_MEM_ERROR_ALREADY_REGISTERED, "but only once per context"
        ctx2 = env.context()
        (h3,) = env.registered([env.shared(fd)], ctx=ctx2)  # another context may register it too
        assert mappings_of(fd) == before + 2
        assert abi.call("contextFree", vp(ctx2), NULL) == Q.QNN_SUCCESS
        assert mappings_of(fd) == before + 1, "contextFree deregisters the context's memory"
        env.rec.clear()
        assert env.deregister([h3]) == Q.QNN_MEM_ERROR_INVALID_HANDLE, "handles die with their context"
        assert env.messages_for("QNNEMU-memDeRegister-handle"), env.rec.records
        assert env.deregister([h2]) == Q.QNN_SUCCESS
    finally:
        rpc.rpcmem_free(p)


def test_registration_outlives_app_free(env, rpc):
    """The backend's own mapping keeps the pages: executing after rpcmem_free cannot crash."""
    p = rpc.rpcmem_alloc(25, 1, NBYTES)
    q = rpc.rpcmem_alloc(25, 1, NBYTES)
    handles = env.registered([env.shared(rpc.rpcmem_to_fd(p)), env.shared(rpc.rpcmem_to_fd(q))])
    rpc.rpcmem_free(p)
    code = env.execute([env.io(env.a, handles[0]), env.io(env.b, array=np.ones(SHAPE, np.float32))],
                       [env.io(env.y, handles[1])])
    assert code == Q.QNN_SUCCESS and rview(q, NBYTES).tolist() == [[1.0] * 3] * 2
    assert env.deregister(handles) == Q.QNN_SUCCESS
    rpc.rpcmem_free(q)


# ------------------------------------------------------------------------------ rule cases
@dataclass
class Case:
    rule: str
    func: str
    path: str
    trigger: Callable[[Env], int]


CASES: list = []


def case(rule: str, func: str, path: str):
    def deco(fn):
        CASES.append(pytest.param(Case(rule, func, path, fn), id=rule))
        return fn
    return deco


R = "memRegister"


def reg(e: Env, spec: dict) -> int:
    return e.register([spec])[0]


case("QNNEMU-memRegister-context", R, "context")(
    lambda e: abi.call("memRegister", vp(0xDEAD0008), e.descriptors([e.ion(e.memfd())]), 1,
                       ffi.new("Qnn_MemHandle_t[1]")))
case("QNNEMU-memRegister-descriptors-null", R, "memDescriptors")(
    lambda e: abi.call("memRegister", vp(e.ctx), NULL, 1, ffi.new("Qnn_MemHandle_t[1]")))
case("QNNEMU-memRegister-handles-null", R, "memHandles")(
    lambda e: abi.call("memRegister", vp(e.ctx), e.descriptors([e.ion(e.memfd())]), 1, NULL))
case("QNNEMU-memRegister-count", R, "numDescriptors")(
    lambda e: abi.call("memRegister", vp(e.ctx), e.descriptors([e.ion(e.memfd())]), 0,
                       ffi.new("Qnn_MemHandle_t[1]")))
case("QNNEMU-memRegister-mem-type", R, "memDescriptors[0].memType")(
    lambda e: reg(e, dict(e.ion(e.memfd()), mem_type=BOGUS)))
case("QNNEMU-memRegister-dtype", R, "memDescriptors[0].dataType")(
    lambda e: reg(e, e.ion(e.memfd(), dtype=BOGUS)))
case("QNNEMU-memRegister-shape-rank", R, "memDescriptors[0].memShape.numDim")(
    lambda e: reg(e, dict(e.ion(e.memfd()), num_dim=1000)))
case("QNNEMU-memRegister-shape-null", R, "memDescriptors[0].memShape.dimSize")(
    lambda e: reg(e, dict(e.ion(e.memfd()), dims=None, num_dim=2)))
case("QNNEMU-memRegister-shape-zero", R, "memDescriptors[0].memShape.dimSize[1]")(
    lambda e: reg(e, e.ion(e.memfd(), dims=(2, 0))))
case("QNNEMU-memRegister-custom-null", R, "memDescriptors[0].customInfo")(
    lambda e: reg(e, dict(e.shared(e.memfd()), custom=None)))
case("QNNEMU-memRegister-custom-type", R, "memDescriptors[0].customInfo.type")(
    lambda e: reg(e, e.shared(e.memfd(), htp_type=BOGUS)))
case("QNNEMU-memRegister-custom-unsupported", R, "memDescriptors[0].customInfo.type")(
    lambda e: reg(e, e.shared(e.memfd(), htp_type=Q.QNN_HTP_MEM_QURT)))
case("QNNEMU-memRegister-custom-size", R, "memDescriptors[0].customInfo.size")(
    lambda e: reg(e, e.shared(e.memfd(), size=0)))
case("QNNEMU-memRegister-custom-range", R, "memDescriptors[0].customInfo.sharedBufferConfig.offset")(
    lambda e: reg(e, e.shared(e.memfd(), offset=4090, size=4096)))
case("QNNEMU-memRegister-dmabuf-data", R, "memDescriptors[0].dmaBufInfo.data")(
    lambda e: reg(e, e.dmabuf(e.memfd(), 0)))
case("QNNEMU-memRegister-fd", R, "memDescriptors[0].ionInfo.fd")(
    lambda e: reg(e, e.ion(-1)))
case("QNNEMU-memRegister-fd-bad", R, "memDescriptors[0].ionInfo.fd")(
    lambda e: reg(e, e.ion(1 << 30)))


@case("QNNEMU-memRegister-fd-type", R, "memDescriptors[0].ionInfo.fd")
def _(e):
    r, w = os.pipe()
    e.fds += [r, w]
    return reg(e, e.ion(r))


case("QNNEMU-memRegister-fd-range", R, "memDescriptors[0].customInfo.sharedBufferConfig.fd")(
    lambda e: reg(e, e.shared(e.memfd(4096), size=8192)))


@case("QNNEMU-memRegister-already-registered", R, "memDescriptors[1]")
def _(e):
    fd = e.memfd()
    e.fds.append(os.dup(fd))  # a dup is the same memory
    return e.register([e.shared(fd, 0, 4096), e.shared(e.fds[-1], 0, 4096)])[0]


@case("QNNEMU-memRegister-session-full", R, "memDescriptors[0]")
def _(e):
    # the context's cDSP session, scaled down to 16 bytes (15 usable), has no room for 24 bytes
    from qnnemu.htp import runtime as htp_runtime
    previous = htp_runtime.use_sessions(htp_runtime.SessionPool(va_bytes=16, limit=1))
    try:
        return reg(e, e.ion(e.memfd()))
    finally:
        htp_runtime.use_sessions(previous)


@case("QNNEMU-memRegister-mmap", R, "memDescriptors[0]")
def _(e):
    import tempfile
    with tempfile.NamedTemporaryFile() as f:
        f.truncate(4096)
        f.flush()
        fd = os.open(f.name, os.O_WRONLY)  # mmap needs read access
        e.fds.append(fd)
        return reg(e, e.ion(fd))


D = "memDeRegister"
case("QNNEMU-memDeRegister-handles-null", D, "memHandles")(lambda e: abi.call("memDeRegister", NULL, 1))
case("QNNEMU-memDeRegister-count", D, "numHandles")(
    lambda e: abi.call("memDeRegister", ffi.new("Qnn_MemHandle_t[1]"), 0))
case("QNNEMU-memDeRegister-handle", D, "memHandles[0]")(lambda e: e.deregister([0xDEAD0008]))


@case("QNNEMU-memDeRegister-handle-duplicate", D, "memHandles[1]")
def _(e):
    (h,) = e.registered([e.ion(e.memfd())])
    e.rec.clear()
    return e.deregister([h, h])


X = "graphExecute"


def _exec_with(e: Env, spec: dict, ctx: int | None = None, output: bool = False) -> int:
    (h,) = e.registered([spec], ctx=ctx)
    e.rec.clear()
    raw = np.zeros(SHAPE, np.float32)
    if output:
        return e.execute([e.io(e.a, array=raw), e.io(e.b, array=raw)], [e.io(e.y, h)])
    return e.execute([e.io(e.a, h), e.io(e.b, array=raw)], [e.io(e.y, array=raw)])


case("QNNEMU-graphExecute-memhandle", X, "inputs[0].v2.memHandle")(
    lambda e: e.execute([e.io(e.a, 0xDEAD0008), e.io(e.b, array=np.zeros(SHAPE, np.float32))],
                        [e.io(e.y, array=np.zeros(SHAPE, np.float32))]))
case("QNNEMU-graphExecute-memhandle-context", X, "inputs[0].v2.memHandle")(
    lambda e: _exec_with(e, e.ion(e.memfd()), ctx=e.context()))
case("QNNEMU-graphExecute-memhandle-dtype", X, "inputs[0].v2.memHandle")(
    lambda e: _exec_with(e, e.ion(e.memfd(), dims=(NBYTES,), dtype=Q.QNN_DATATYPE_UINT_8)))
case("QNNEMU-graphExecute-memhandle-size", X, "inputs[0].v2.memHandle")(
    lambda e: _exec_with(e, e.ion(e.memfd(), dims=(2, 2))))


@case("QNNEMU-graphExecute-memhandle-readonly", X, "outputs[0].v2.memHandle")
def _(e):
    import tempfile
    with tempfile.NamedTemporaryFile() as f:
        f.truncate(4096)
        f.flush()
        fd = os.open(f.name, os.O_RDONLY)
        e.fds.append(fd)
        return _exec_with(e, e.ion(fd), output=True)


@pytest.mark.parametrize("c", CASES)
def test_rule(env, c: Case):
    env.rec.assert_rule(c.trigger(env), mem.RULES[c.rule], c.rule, c.func, c.path)


def test_every_mem_rule_has_a_case():
    """Keeps the cases in step with the rule ids in core/mem.py and abi/mem_api.py."""
    root = Path(qnnemu.__file__).parent
    found = set()
    for path in (root / "core" / "mem.py", root / "abi" / "mem_api.py"):
        found |= set(re.findall(r'"(QNNEMU-[A-Za-z0-9_-]+)"', path.read_text()))
    covered = {p.values[0].rule for p in CASES}
    assert found == set(mem.RULES), f"rule ids used but not in mem.RULES: {sorted(found - set(mem.RULES))}"
    assert covered == set(mem.RULES), f"rules without a case: {sorted(set(mem.RULES) - covered)}"


def test_unknown_tensor_mem_type_still_unsupported(env):
    t = env.io(env.a, array=np.zeros(SHAPE, np.float32))
    t.v.memType = Q.QNN_TENSORMEMTYPE_RETRIEVE_RAW
    code = env.execute([t, env.io(env.b, array=np.zeros(SHAPE, np.float32))],
                       [env.io(env.y, array=np.zeros(SHAPE, np.float32))])
    assert code == Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE and env.messages_for("QNNEMU-graphExecute-memtype")
