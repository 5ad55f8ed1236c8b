"""qnnemu-context-binary-utility: a context binary's information as JSON, like the SDK's
qnn-context-binary-utility (``--context_binary X --json_file Y``).

The information comes from a System library (``--system_library``; default: qnnemu's
libQnnSystem.so; the vendor's reads vendor binaries) through systemContextGetBinaryInfo, read
by :class:`qnnemu.system_client.SystemLibrary` with ``details=True``: the BinaryInfo version,
backend id, build id, core/backend API versions, SoC model, HTP arch, socVersion, context blob
version and size, the context tensors, and per graph its name, input/output/updateable tensors
(id, name, type, data type, dims, quantization), spill-fill buffer size and, when the library
reports them, VTCM size, optimization level and HVX threads. Type codes are accompanied by
their QNN names (``typeName``, ``dataTypeName``, ``encodingName``).  A qnnemu binary also gets
``qnnemu``: its format version, data sections and padded constants, and per graph the recorded
sequence of steps and data paging (``qnnemu_layout``; null for a graph of an older binary).  One
prepared with LORA_WEIGHT_SHARING_ENABLED adds ``loraWeightSharing``: the shared blob's offset and
size, the graph whose weights fill it and each graph's updatable bytes (docs/lora.md).

``python -m qnnemu.tools.context_binary_utility`` runs it too.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..headers import constants
from .libraries import resolve_system_library
from .reporting import LOG_LEVELS, ToolError, plural, tool_main

PROG = "qnnemu-context-binary-utility"
log = logging.getLogger("qnnemu.tools.context_binary_utility")


def _names(prefix: str, exclude: str = "\0") -> dict[int, str]:
    """value -> name of the constants starting with ``prefix`` (first wins), skipping names
    starting with ``exclude`` (QnnTypes.h has QNN_QUANTIZATION_ENCODING_MAPPING_*, another
    enum whose names share the encodings' prefix)."""
    out: dict[int, str] = {}
    for name, value in constants().items():
        if isinstance(value, int) and name.startswith(prefix) and not name.startswith(exclude):
            out.setdefault(value, name)
    return out


def _named_tensor(t: dict) -> dict:
    out = dict(t)
    out["typeName"] = _names("QNN_TENSOR_TYPE_").get(t["type"], "")
    out["dataTypeName"] = _names("QNN_DATATYPE_").get(t["dataType"], "")
    if t.get("quant"):
        encodings = _names("QNN_QUANTIZATION_ENCODING_", exclude="QNN_QUANTIZATION_ENCODING_MAPPING_")
        out["quant"] = dict(t["quant"], encodingName=encodings.get(t["quant"]["encoding"], ""))
    return out


def _with_names(value: Any) -> Any:
    """Adds the QNN names of type codes to every tensor dict in the info."""
    if isinstance(value, dict):
        if {"name", "id", "type", "dataType", "dims"} <= set(value):
            return _named_tensor(value)
        return {k: _with_names(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_names(v) for v in value]
    return value


def binary_report(binary: str, system_library: str, log_level: str | None = None) -> dict:
    """The JSON document written for ``binary`` read through ``system_library`` (its messages
    at ``log_level`` to the ``qnnemu.system_client`` logger)."""
    from ..system_client import SystemLibrary
    try:
        blob = Path(binary).read_bytes()
    except OSError as e:
        raise ToolError(f"--context_binary {binary}: {e.strerror or e}") from None
    if not blob:
        raise ToolError(f"--context_binary {binary}: the file is empty")
    info = SystemLibrary(system_library, log_level=log_level).binary_info(blob, details=True)
    report = {"context_binary": os.path.abspath(binary), "system_library": system_library,
              "info": _with_names(info)}
    layout = qnnemu_layout(blob)
    if layout is not None:
        report["qnnemu"] = layout
    from ..core.binary import lora  # LORA_WEIGHT_SHARING_ENABLED: the shared blob (docs/lora.md)
    shared = lora.describe(blob)
    if shared is not None:
        report["loraWeightSharing"] = shared
    return report


def qnnemu_layout(blob: bytes) -> dict | None:
    """What a qnnemu context binary records beyond systemContextGetBinaryInfo (docs/context-binary.md
    "Sequencing and data paging"): its format version, data sections and padded constants, and per
    graph the recorded sequence of steps and data paging; None for another backend's binary (or
    one that does not read)."""
    from ..core import binary as core_binary
    from ..core.binary import plan_record
    from ..errors import QnnError
    if not blob.startswith(core_binary.MAGIC):
        return None
    try:
        info = core_binary.inspect(blob, func="qnnemu-context-binary-utility")
    except QnnError:
        return None
    padded = [b for b in info.blobs if b.reserved > b.size]
    return {"format_version": info.header.format_version, "data_offset": info.header.data_offset,
            "data_size": info.header.data_size,
            "data_sections": [{"name": sec.name, "offset": info.header.data_offset + sec.offset, "size": sec.size}
                              for sec in info.sections],
            "constants": {"blobs": len(info.blobs), "padded": len(padded),
                          "data_bytes": sum(b.size for b in info.blobs),
                          "padding_bytes": sum(b.reserved - b.size for b in padded)},
            "graphs": {g.name: plan_record.describe(g.plan) if g.plan is not None else None for g in info.graphs}}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Writes a QNN context binary's graphs, tensors and sizes "
        "(from a System library's systemContextGetBinaryInfo) as JSON.")
    p.add_argument("--context_binary", required=True, metavar="FILE", help="the context binary")
    p.add_argument("--json_file", required=True, metavar="FILE", help="the JSON file to write")
    p.add_argument("--system_library", metavar="FILE",
                   help="libQnnSystem.so to read the binary with (default: qnnemu's)")
    p.add_argument("--log_level", choices=LOG_LEVELS, default="warn")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def body(args) -> int:
        report = binary_report(args.context_binary,
                               resolve_system_library(args.system_library, None), args.log_level)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(args.json_file)), exist_ok=True)
            Path(args.json_file).write_text(json.dumps(report, indent=2) + "\n")
        except OSError as e:
            raise ToolError(f"--json_file {args.json_file}: {e.strerror or e}") from None
        info = report["info"]
        print(f"{PROG}: wrote {args.json_file} ({plural(len(info.get('graphs') or []), 'graph')} of "
              f"{args.context_binary}, {os.path.getsize(args.context_binary)} bytes)")
        return 0

    return tool_main(PROG, build_parser(), argv, body)


if __name__ == "__main__":
    raise SystemExit(main())
