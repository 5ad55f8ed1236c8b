"""The context binary's container (docs/context-binary.md "Layout"): the fixed 160-byte header
(magic, format version, sizes, API versions, build id, the SoC/HTP arch the context was prepared
for, flags, CRC32s, section offsets), the sanity limits for values read from a binary, and the
error plumbing every reader shares (``_guard``, ``_abort``).

``assemble``/``reseal`` write the container around a metadata section and a data section;
``parse_header`` checks one (lengths before anything is read, CRC32s) without reading further.
"""
from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import QnnError
from ...headers import Q
from ...htp import soc as socs
from ...location import Location
from ...rules import error, fail

# ------------------------------------------------------------------------------ format constants
MAGIC = b"QNNEMUCB"
FORMAT_VERSION = 3          # what serialize writes and the newest deserialize reads
MIN_FORMAT_VERSION = 1      # the oldest deserialize reads (older: QNN_CONTEXT_ERROR_BINARY_VERSION)
PACKING_FORMAT_VERSION = 2  # the first version whose tensors may carry "packing" (WEIGHTS_PACKING)
PLAN_FORMAT_VERSION = 3     # the first version with the prepared plan, data sections, 4 KiB alignment
HEADER_SIZE = 160
ALIGN = 64                  # file alignment of every blob (and of the data section before version 3)
# Version 3: the data section (and each of its data sections) starts on a 4 KiB page, so that a
# loader can read it with direct I/O at its file offset (QNN HTP backend documentation,
# "QnnContext_createFromBinaryWithCallback API": "the main data section is 4KB-aligned relative
# to the file start, enabling efficient offset-based reads").
DATA_ALIGN = 4096
# Version 3: constants are laid out like the prepared plan's DDR blocks: each blob starts on the
# plan's Plain block granule and reserves the bytes its prepared format takes (docs/context-binary.md
# "Constant padding").
CONSTANT_ALIGN = 256
FORMAT_NAME = "qnnemu.context-binary"

FLAG_WEIGHT_SHARING = 0x1   # the context had QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED
KNOWN_FLAGS = FLAG_WEIGHT_SHARING

# Little-endian, no padding; the offsets of magic (0) and format version (8) never change.
_HEADER = struct.Struct("<8sIIQII3H3HIIIQQQQ32sII28sI")
assert _HEADER.size == HEADER_SIZE
_HEADER_CRC_OFFSET = HEADER_SIZE - 4

# Sanity limits for values read from a binary (a corrupted length must never drive an allocation).
MAX_RANK = 32
MAX_DIM = 0xFFFFFFFF
MAX_TENSOR_BYTES = 1 << 32  # any tensor (the HTP addresses 32 bits; static ones are also bounded by their blob)
MAX_ID = 0xFFFFFFFF
_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1  # quantization offsets (int32_t in Qnn_QuantizeParams_t)

STRICT = "strict"
PERMISSIVE = "permissive"

def _align(n: int, granule: int = ALIGN) -> int:
    return (n + granule - 1) // granule * granule


def data_alignment(version: int) -> int:
    """The file alignment of the data section in format ``version``."""
    return DATA_ALIGN if version >= PLAN_FORMAT_VERSION else ALIGN


# ------------------------------------------------------------------------------ public records
@dataclass(frozen=True)
class Header:
    """The fixed header (docs/context-binary.md "Header")."""

    format_version: int
    header_size: int
    total_size: int
    flags: int
    payload_crc32: int
    core_api: tuple[int, int, int]
    backend_api: tuple[int, int, int]
    soc_model: int
    htp_arch: int
    vtcm_mb: int
    metadata_offset: int
    metadata_size: int
    data_offset: int
    data_size: int
    build_id: str
    graph_count: int
    metadata_crc32: int = 0
    header_crc32: int = 0

    @property
    def weight_sharing(self) -> bool:
        return bool(self.flags & FLAG_WEIGHT_SHARING)


@dataclass
class ReadStats:
    """How the loader read a binary (QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET: "load
    the binary in chunks, instead of loading the entire binary to memory at once").
    ``chunk_bytes`` 0 reads each range at once; otherwise no read is larger than it."""

    chunk_bytes: int = 0
    chunks: int = 0            # reads made
    bytes_read: int = 0        # bytes read
    largest: int = 0           # the largest read

    def pieces(self, start: int, end: int):
        """[start, end) as the reads the budget allows, each counted."""
        step = self.chunk_bytes or max(end - start, 1)
        for a in range(start, end, step):
            b = min(end, a + step)
            self.chunks += 1
            self.bytes_read += b - a
            self.largest = max(self.largest, b - a)
            yield a, b

    def crc32(self, view: memoryview, start: int, end: int) -> int:
        crc = 0
        for a, b in self.pieces(start, end):
            crc = zlib.crc32(view[a:b], crc)
        return crc

    def copy(self, view: memoryview) -> bytes:
        """A copy of ``view`` made read by read (at most one read's bytes beyond the copy)."""
        if not self.chunk_bytes:
            self.chunks, self.bytes_read = self.chunks + 1, self.bytes_read + len(view)
            self.largest = max(self.largest, len(view))
            return bytes(view)
        out = bytearray(len(view))
        for a, b in self.pieces(0, len(view)):
            out[a:b] = view[a:b]
        return bytes(out)


# ------------------------------------------------------------------------------ errors
class _Bad(Exception):
    """A schema violation in the metadata; becomes QNNEMU-binary-metadata."""


class _Unencodable(Exception):
    """A value serialize cannot represent."""


def assemble(header: Header, meta: dict, data: bytes) -> bytes:
    """Header fields + metadata + data section -> a binary with consistent offsets, sizes and
    CRCs.  ``serialize`` uses it; tools and tests can re-assemble a modified binary with it.
    Only ``format_version``, ``flags``, the API versions, device fields, build id and graph
    count of ``header`` are taken; the rest is computed."""
    meta_bytes = json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                            allow_nan=False).encode("ascii")
    meta_off = HEADER_SIZE
    data_off = _align(meta_off + len(meta_bytes), data_alignment(header.format_version))
    total = data_off + len(data)
    out = bytearray(total)
    out[meta_off:meta_off + len(meta_bytes)] = meta_bytes
    out[data_off:total] = data
    payload_crc = zlib.crc32(memoryview(out)[HEADER_SIZE:])
    build = header.build_id.encode("ascii", errors="replace")[:32]
    fields = [MAGIC, header.format_version, HEADER_SIZE, total, header.flags, payload_crc,
              *header.core_api, *header.backend_api, header.soc_model, header.htp_arch, header.vtcm_mb,
              meta_off, len(meta_bytes), data_off, len(data), build, header.graph_count,
              zlib.crc32(meta_bytes), bytes(28), 0]
    out[:HEADER_SIZE] = _HEADER.pack(*fields)
    hcrc = zlib.crc32(memoryview(out)[:_HEADER_CRC_OFFSET])
    out[_HEADER_CRC_OFFSET:HEADER_SIZE] = struct.pack("<I", hcrc)
    return bytes(out)


def reseal(blob: bytes) -> bytes:
    """``blob`` with its metadata, payload and header CRC32s recomputed (for tools that patch
    the data section in place, e.g. binary-section updates; and for tests)."""
    out = bytearray(blob)
    if len(out) < HEADER_SIZE:
        return bytes(out)
    header_size = struct.unpack_from("<I", out, 12)[0]
    total = struct.unpack_from("<Q", out, 16)[0]
    end = min(total, len(out))
    start = min(max(header_size, HEADER_SIZE), end)
    meta_off, meta_size = struct.unpack_from("<QQ", out, 56)
    if meta_off + meta_size <= end:
        struct.pack_into("<I", out, 124, zlib.crc32(memoryview(out)[meta_off:meta_off + meta_size]))
    struct.pack_into("<I", out, 28, zlib.crc32(memoryview(out)[start:end]))
    struct.pack_into("<I", out, _HEADER_CRC_OFFSET, zlib.crc32(memoryview(out)[:_HEADER_CRC_OFFSET]))
    return bytes(out)


# ------------------------------------------------------------------------------ parsing
def _as_view(blob: Any, func: str) -> memoryview:
    if blob is None:
        fail(Location(func), "QNNEMU-binary-null", "binaryBuffer is NULL", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    try:
        view = memoryview(blob).cast("B")
    except (TypeError, ValueError):
        raise error(Location(func), "QNNEMU-binary-null", f"binaryBuffer is not a byte buffer ({type(blob).__name__})",
                    code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT) from None
    if len(view) == 0:
        fail(Location(func), "QNNEMU-binary-null", "binaryBufferSize is 0", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    return view


def _foreign(view: memoryview, func: str) -> QnnError:
    head = bytes(view[:8])
    return error(Location(func), "QNNEMU-binary-magic",
                 f"binaryBuffer: not a qnnemu context binary (starts with {head.hex(' ')}, expected "
                 f"the magic {MAGIC.decode()!r}); binaries prepared by another backend (for example "
                 f"the vendor's libQnnHtp.so) cannot be loaded by qnnemu -- prepare the graphs on "
                 f"qnnemu instead", code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)


def parse_header(blob: Any, func: str = "contextCreateFromBinary", *, external_data: bool = False,
                 read: ReadStats | None = None) -> Header:
    """Checks magic, version, sizes and both CRC32s; returns the header.

    ``external_data``: the data section comes from elsewhere (the data provider of
    contextCreateFromBinaryWithCallback): the buffer needs to reach only the end of the
    metadata, and the payload CRC (which covers the data section) is not checked -- the
    metadata CRC is, and the loader checks every blob's CRC.  ``read``: the payload is read (for
    its CRC) in the chunks it allows, and counted there."""
    view = _as_view(blob, func)
    n = len(view)
    if bytes(view[:min(n, 8)]) != MAGIC[:min(n, 8)]:
        raise _foreign(view, func)
    if n < 12:
        fail(Location(func), "QNNEMU-binary-truncated",
             f"binaryBuffer: {n} bytes is too short for a context binary header "
             f"({HEADER_SIZE} bytes)", code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    version = struct.unpack_from("<I", view, 8)[0]
    if version > FORMAT_VERSION:
        fail(Location(func), "QNNEMU-binary-version-future",
             f"binaryBuffer: format version {version} is newer than this qnnemu reads "
             f"({MIN_FORMAT_VERSION}..{FORMAT_VERSION}); load it with the qnnemu that made it "
             f"or a newer one", code=Q.QNN_CONTEXT_ERROR_BINARY_VERSION)
    if version < MIN_FORMAT_VERSION:
        fail(Location(func), "QNNEMU-binary-version-old",
             f"binaryBuffer: format version {version} is older than this qnnemu reads "
             f"({MIN_FORMAT_VERSION}..{FORMAT_VERSION}); prepare the graphs again",
             code=Q.QNN_CONTEXT_ERROR_BINARY_VERSION)
    if n < HEADER_SIZE:
        fail(Location(func), "QNNEMU-binary-truncated",
             f"binaryBuffer: {n} bytes is too short for the {HEADER_SIZE}-byte header",
             code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    f = _HEADER.unpack_from(view, 0)
    hcrc = zlib.crc32(view[:_HEADER_CRC_OFFSET])
    if hcrc != f[-1]:
        fail(Location(func), "QNNEMU-binary-header-crc",
             f"binaryBuffer: header CRC32 mismatch (stored 0x{f[-1]:08x}, computed 0x{hcrc:08x}): "
             f"the header is corrupted", code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    (_, version, header_size, total, flags, payload_crc, c0, c1, c2, b0, b1, b2, soc, arch, vtcm,
     meta_off, meta_size, data_off, data_size, build, graph_count, meta_crc, reserved, header_crc) = f
    bad = None
    if header_size != HEADER_SIZE:
        bad = f"header size {header_size} (format version {version} has {HEADER_SIZE})"
    elif total < HEADER_SIZE:
        bad = f"total size {total} is smaller than the header"
    elif flags & ~KNOWN_FLAGS:
        bad = f"unknown flags 0x{flags & ~KNOWN_FLAGS:x}"
    elif any(reserved):
        bad = "reserved header bytes are not zero"
    if bad is None and total > n and not external_data:
        fail(Location(func), "QNNEMU-binary-truncated",
             f"binaryBuffer: the binary is {total} bytes but only {n} were given "
             f"(binaryBufferSize too small or the file was cut)", code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    if bad is None:
        if meta_off < header_size or meta_off + meta_size > total:
            bad = f"metadata section [{meta_off}, +{meta_size}) outside the binary ({total} bytes)"
        elif data_off % data_alignment(version):
            bad = f"data section offset {data_off} is not a multiple of {data_alignment(version)}"
        elif data_off < meta_off + meta_size or data_off + data_size > total:
            bad = f"data section [{data_off}, +{data_size}) overlaps the metadata or leaves the binary"
    if bad is None:
        bad = _device_fields_out_of_range(soc, arch, vtcm)
    if bad is None:
        try:
            build_id = build.rstrip(b"\0").decode("ascii")
        except UnicodeDecodeError:
            bad = "build id is not ASCII text"
    if bad is not None:
        fail(Location(func), "QNNEMU-binary-header", f"binaryBuffer: inconsistent header: {bad}",
             code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    if external_data and meta_off + meta_size > n:
        fail(Location(func), "QNNEMU-binary-truncated",
             f"binaryBuffer: the header and metadata take {meta_off + meta_size} bytes but only {n} "
             f"were given", code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    if external_data:
        crc = payload_crc
    elif read is not None:
        crc = read.crc32(view, header_size, total)
    else:
        crc = zlib.crc32(view[header_size:total])
    if crc != payload_crc:
        fail(Location(func), "QNNEMU-binary-crc",
             f"binaryBuffer: CRC32 mismatch over bytes [{header_size}, {total}) (stored "
             f"0x{payload_crc:08x}, computed 0x{crc:08x}): the binary is corrupted",
             code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    mcrc = zlib.crc32(view[meta_off:meta_off + meta_size])
    if mcrc != meta_crc:
        fail(Location(func), "QNNEMU-binary-crc",
             f"binaryBuffer: metadata CRC32 mismatch (stored 0x{meta_crc:08x}, computed "
             f"0x{mcrc:08x}): the binary is corrupted", code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    return Header(version, header_size, total, flags, payload_crc, (c0, c1, c2), (b0, b1, b2), soc, arch,
                  vtcm, meta_off, meta_size, data_off, data_size, build_id, graph_count, meta_crc, header_crc)


def _device_fields_out_of_range(soc: int, arch: int, vtcm_mb: int) -> str | None:
    """What is wrong with the header's device fields, or None: the SoC model is 0 or one of the
    SoC table, the arch an HTP arch (a SoC and an arch that disagree are a binary for another
    device, which the compatibility rules handle), the VTCM size at least
    1 MiB and at most the largest VTCM of the table (docs/context-binary.md "Header": serialize
    writes nothing else, so anything else is corruption or a hand-made binary; refused under
    PERMISSIVE too, since PERMISSIVE tolerates another device, not an impossible one)."""
    if soc != Q.QNN_SOC_MODEL_UNKNOWN and soc not in socs.SOCS:
        return (f"soc_model {soc} is neither QNN_SOC_MODEL_UNKNOWN (0) nor a SoC model of the emulator's "
                f"SoC table")
    archs = sorted({*socs.HTP_ARCHS, *socs.ARCH_ONLY})
    if arch not in archs:
        return f"htp_arch {arch} is not an HTP arch ({', '.join(map(str, archs))})"
    largest = max(r.vtcm_mb for r in (*socs.SOCS.values(), *(socs.arch_only(a) for a in archs)))
    if not 1 <= vtcm_mb <= largest:
        return f"vtcm_mb {vtcm_mb} is outside 1..{largest} MiB (the largest VTCM of the SoC table)"
    return None


def _abort(check_abort, func: str) -> None:
    if check_abort is not None and check_abort():
        fail(Location(func), "QNNEMU-binary-aborted", "loading the context binary was cancelled",
             code=Q.QNN_CONTEXT_ERROR_ABORTED)


def _guard(func: str, body: Callable[[], Any]) -> Any:
    """Runs ``body``; anything but a QnnError becomes one (a loader never raises anything else)."""
    try:
        return body()
    except QnnError:
        raise
    except MemoryError:
        raise error(Location(func), "QNNEMU-binary-mem-alloc", "out of memory while reading the context binary",
                    code=Q.QNN_CONTEXT_ERROR_MEM_ALLOC) from None
    except Exception as e:
        raise error(Location(func), "QNNEMU-binary-internal",
                    f"the context binary could not be read ({type(e).__name__}: {str(e)[:200]})",
                    code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY) from e
