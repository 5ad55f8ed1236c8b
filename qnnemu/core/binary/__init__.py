"""QnnContext.h context binaries: qnnemu's own documented, versioned format (docs/context-binary.md).

- ``serialize(context)``: the bytes ``contextGetBinary`` returns for a context whose graphs are
  all finalized: a fixed 160-byte header (magic, format version, sizes, API versions, build id,
  the SoC/HTP arch the context was prepared for, flags, CRC32s, section offsets), a JSON
  metadata section (graphs, configs, tensors with quantization, nodes with params) and a data
  section with the static tensor data, every blob aligned to 64 bytes in the file so weights
  can be mapped in place.  Format version 3 also records each graph's prepared plan (its
  sequence of steps and data paging, ``plan_record``), starts the data section -- and, with
  weight sharing, the shared weights' section apart from the graphs' own -- on 4 KiB pages, and
  reserves HMX weights at their padded prepared size.  Identical blobs of one graph are stored once; with
  ``QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED`` identical blobs of all graphs of the
  context are.  A graph with ``QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING`` stores its STATIC
  8-bit tensors whose codes lie in the 4-bit range as nibbles, two per byte (``PACKINGS``;
  format version 2); the loader unpacks them to the exact original bytes.
  Deterministic: the same context gives the same bytes.
- ``inspect(blob)``: the checked header and graph/tensor descriptions without building anything
  (``contextValidateBinary``, the System library's ``systemContextGetBinaryInfo``).
- ``validate(blob, device, compatibility, backend=...)``: ``inspect``, the compatibility rules
  and the rebuild's checks on a throw-away context (what ``deserialize`` would refuse).
- ``deserialize(blob, backend, device, ...)``: a new ``Context`` with the same graphs, tensor ids
  and names, rebuilt through the normal ``Graph.add_node`` checks and finalized, so
  ``graphRetrieve`` + ``graphExecute`` give bit-identical results to the original.

Every failure is a ``QnnError`` with a ``QnnContext_Error_t`` code and a ``QNNEMU-binary-*``
rule id; nothing in a corrupted binary can make the loader crash, hang or allocate more than the
binary's own size (lengths are checked against the buffer before anything is read).

Modules: ``format`` (the header and container layout, shared error plumbing), ``metadata`` (the
records and the JSON metadata section, ``inspect``), ``writer`` (``serialize``), ``loader``
(compatibility, ``validate``, ``deserialize``); the packing of weights is the HTP's
(qnnemu/htp/packing.py).  Every public name is importable from here.
"""
from __future__ import annotations

from ...htp.packing import PACKINGS, Packing, pack_codes, packing_of, unpack_codes
from .format import (
    ALIGN,
    FORMAT_VERSION,
    HEADER_SIZE,
    MAGIC,
    MIN_FORMAT_VERSION,
    PACKING_FORMAT_VERSION,
    PERMISSIVE,
    PLAN_FORMAT_VERSION,
    STRICT,
    Header,
    ReadStats,
    assemble,
    parse_header,
    reseal,
)
from .loader import check_compatibility, compatibility_mode, deserialize, validate
from .metadata import (
    BinaryInfo,
    BlobInfo,
    DataSection,
    GraphInfo,
    NodeInfo,
    TensorInfo,
    inspect,
    weight_sharing_enabled,
    weights_packing_enabled,
)
from .writer import serialize

__all__ = ["MAGIC", "FORMAT_VERSION", "MIN_FORMAT_VERSION", "HEADER_SIZE", "ALIGN", "STRICT", "PERMISSIVE",
           "Header", "TensorInfo", "NodeInfo", "GraphInfo", "BlobInfo", "BinaryInfo",
           "serialize", "assemble", "reseal", "parse_header", "inspect", "validate", "deserialize",
           "compatibility_mode", "check_compatibility", "weight_sharing_enabled", "weights_packing_enabled",
           "Packing", "PACKINGS", "PACKING_FORMAT_VERSION", "packing_of", "pack_codes", "unpack_codes",
           "PLAN_FORMAT_VERSION", "ReadStats", "DataSection"]

# Private names kept importable from here for the binary sections (core/sections.py) and the
# binary tests that patch or call them.
from .format import _Bad  # noqa: F401
from .loader import _raw_quant, prepared_device  # noqa: F401
from .metadata import _enc, _quant_json  # noqa: F401
