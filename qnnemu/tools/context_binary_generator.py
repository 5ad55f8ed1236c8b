"""qnnemu-context-binary-generator: prepares a QNN context binary offline (QnnContext_getBinary).

Conventions of the SDK's qnn-context-binary-generator: ``--backend`` (default: our
libQnnHtpEmu.so; any QNN backend .so works, e.g. the vendor's libQnnHtp.so), ``--model``,
``--binary_file`` (the output's name; ``.bin`` is appended), ``--output_dir`` (default
``./output``), ``--config_file`` (the HTP backend-extension JSON, see :mod:`qnnemu.tools`),
``--log_level``, ``--profiling_level`` with ``--profiling_option optrace`` (graphFinalize profiled
with optrace: ``[BINARY]_schematic.bin`` is written next to the binary, for
``qnnemu-profile-viewer --schematic``; its format is :mod:`qnnemu.tools.viewer.optrace_features`).
Where the SDK tool takes a compiled model library, this one takes

- a JSON graph description (``*.json``; the format is docs/graph-json.md and
  :func:`load_graph_description`): the graphs are built with qnnemu.client on the backend
  (contextCreate, graphCreate with the config file's graph configs, tensorCreateGraphTensor,
  graphAddNode, graphFinalize) and the context is serialized with contextGetBinarySize /
  contextGetBinary;
  On an LPAI backend (``--backend lpai``) every graph gets the LPAI PREPARE config: it is
  prepared offline, without scratch or persistent buffers (:mod:`qnnemu.tools.lpai`);
- an ONNX model (``*.onnx``): ONNX Runtime's QNN execution provider prepares it on the backend
  with ``ep.context_enable=1`` and ``ep.context_embed_mode=1``, and the binary embedded in the
  EPContext node(s) of the model it dumps is written out.

With ``--output_sections`` (JSON descriptions whose graphs have ``UPDATEABLE_STATIC`` tensors)
the ``QNN_CONTEXT_SECTION_UPDATABLE`` binary section of each such graph is written next to the
binary (contextGetBinarySection): ``<binary>.<graph>.section.bin`` holds the weights of the
description, and each ``--adapter NAME=FILE.json`` (new data for updatable tensors, see
:func:`load_adapter`) gives ``<binary>.<graph>.<NAME>.section.bin``. Such a file is a LoRA
adapter: ``contextApplyBinarySection`` installs it in a context loaded from the binary, and
ONNX Runtime's QNN EP applies it through the run option ``qnn.lora_config``
(:func:`qnnemu.onnxruntime.lora_run_options`).  ``--lora_weight_sharing`` prepares with
QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED: the binary stores the updatable
weights of all graphs once, and a graph loaded from it executes only after its section was
applied (docs/lora.md).

``python -m qnnemu.tools.context_binary_generator`` runs it too.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core import dtypes
from ..headers import Q
from .config import BackendConfig, load_backend_config
from .libraries import resolve_backend, resolve_system_library
from .reporting import LOG_LEVELS, ToolError, plural, tool_main

PROG = "qnnemu-context-binary-generator"
log = logging.getLogger("qnnemu.tools.context_binary_generator")

FORMAT_VERSION = 1
_TENSOR_TYPES = {"APP_WRITE": Q.QNN_TENSOR_TYPE_APP_WRITE, "APP_READ": Q.QNN_TENSOR_TYPE_APP_READ,
                 "NATIVE": Q.QNN_TENSOR_TYPE_NATIVE, "STATIC": Q.QNN_TENSOR_TYPE_STATIC,
                 "UPDATEABLE_STATIC": Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC,
                 "INPUT": Q.QNN_TENSOR_TYPE_APP_WRITE, "OUTPUT": Q.QNN_TENSOR_TYPE_APP_READ}
_NUMPY_NAMES = {"float32": "FLOAT_32", "float16": "FLOAT_16", "float64": "FLOAT_64",
                "int8": "INT_8", "int16": "INT_16", "int32": "INT_32", "int64": "INT_64",
                "uint8": "UINT_8", "uint16": "UINT_16", "uint32": "UINT_32", "uint64": "UINT_64",
                "bool": "BOOL_8"}
_WITH_DATA = (Q.QNN_TENSOR_TYPE_STATIC, Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC)
_GRAPH_KEYS = {"name", "precision", "tensors", "nodes"}
_TENSOR_KEYS = {"name", "type", "dtype", "dims", "quant", "data"}
_NODE_KEYS = {"name", "package", "type", "inputs", "outputs", "params", "framework"}


# ------------------------------------------------------------------------------ the format
def parse_dtype(value: Any, where: str) -> int:
    """``FLOAT_32`` / ``QNN_DATATYPE_FLOAT_32`` / a numpy name (``float32``) -> Qnn_DataType_t."""
    if not isinstance(value, str):
        raise ToolError(f"{where}: dtype must be a string such as \"FLOAT_32\", got {json.dumps(value)}")
    name = _NUMPY_NAMES.get(value, value.upper())
    if name.startswith("QNN_DATATYPE_"):
        name = name[len("QNN_DATATYPE_"):]
    qtype = getattr(Q, f"QNN_DATATYPE_{name}", None)
    if qtype is None or not dtypes.is_known(qtype):
        raise ToolError(f"{where}: unknown dtype {json.dumps(value)} (QNN names such as "
                        f"FLOAT_32, UFIXED_POINT_8, INT_32, BOOL_8, or numpy names such as float32)")
    return qtype


def _tensor_type(value: Any, where: str) -> int:
    name = str(value).upper()
    if name.startswith("QNN_TENSOR_TYPE_"):
        name = name[len("QNN_TENSOR_TYPE_"):]
    if name not in _TENSOR_TYPES:
        raise ToolError(f"{where}: tensor type {json.dumps(value)} is not one of APP_WRITE (input), "
                        f"APP_READ (output), NATIVE, STATIC, UPDATEABLE_STATIC")
    return _TENSOR_TYPES[name]


def _quant(value: Any, where: str):
    """``{"scale", "offset"[, "bitwidth"]}`` or ``{"axis", "scales", "offsets"[, "bitwidth"]}``
    -> the JSON form of qnnemu.client.quant (the encoding follows from the keys)."""
    from ..client.quant import quant_json  # not at import time: --help stays fast
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ToolError(f"{where}: quant must be an object, got {json.dumps(value)}")
    try:
        if "scales" in value:
            unknown = set(value) - {"axis", "scales", "offsets", "bitwidth", "encoding"}
            if unknown:
                raise ToolError(f"{where}: unknown quant keys {sorted(unknown)}")
            scales = [float(s) for s in value["scales"]]
            offsets = [int(o) for o in value.get("offsets", [0] * len(scales))]
            if len(offsets) != len(scales) or not scales:
                raise ToolError(f"{where}: {len(scales)} scales but {len(offsets)} offsets")
            return quant_json({"axis": int(value["axis"]), "scales": scales, "offsets": offsets,
                               "bitwidth": value.get("bitwidth")})
        unknown = set(value) - {"scale", "offset", "bitwidth", "encoding"}
        if unknown:
            raise ToolError(f"{where}: unknown quant keys {sorted(unknown)}")
        return quant_json({"scale": float(value["scale"]), "offset": int(value.get("offset", 0)),
                           "bitwidth": value.get("bitwidth")})
    except (KeyError, TypeError, ValueError) as e:
        raise ToolError(f"{where}: bad quant {json.dumps(value)} ({e!r})") from None


def _shaped(array: np.ndarray, dims: tuple[int, ...] | None, where: str, what: str) -> np.ndarray:
    """``array`` in the tensor's ``dims`` (None: as it is); ``what`` says what was read."""
    if dims is None:
        return array
    need = int(np.prod(dims, dtype=np.int64))
    if array.size != need:
        raise ToolError(f"{where}: {what}, dims {list(dims)} need {need}")
    return array.reshape(dims)


def _load_data(value: Any, qtype: int, dims: tuple[int, ...] | None, base: Path,
               where: str) -> np.ndarray:
    """Tensor data: a .raw file (the type's storage bytes), a .npy file, or an inline
    (nested) list, in the type's storage type (codes for fixed-point types)."""
    storage = dtypes.numpy_dtype(qtype)
    if isinstance(value, str):
        path = Path(value) if Path(value).is_absolute() else base / value
        try:
            if path.suffix == ".npy":
                array = np.load(path, allow_pickle=False)
                if not np.can_cast(array.dtype, storage, casting="same_kind"):
                    raise ToolError(f"{where}: {path} holds {array.dtype}, which does not cast "
                                    f"to {storage} ({dtypes.name(qtype)})")
                array = array.astype(storage)
            else:
                array = np.fromfile(path, dtype=storage)
        except OSError as e:
            raise ToolError(f"{where}: cannot read {path}: {e.strerror or e}") from None
        return _shaped(array, dims, where, f"{path} holds {array.size} elements of {storage}")
    if isinstance(value, (list, int, float, bool)):
        try:
            array = np.array(value, dtype=storage)
        except (TypeError, ValueError, OverflowError) as e:
            raise ToolError(f"{where}: inline data does not convert to {storage}: {e}") from None
        return _shaped(array, dims, where, f"{array.size} inline values")
    raise ToolError(f"{where}: data must be a file path or a list, got {json.dumps(value)}")


def _dims(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                              and d > 0 for d in value):
        raise ToolError(f"{where}: dims must be a list of positive integers, got {json.dumps(value)}")
    return tuple(value)


def _inline_kind(values: list) -> str:
    flat = np.array(values, dtype=object).ravel().tolist()
    if flat and all(isinstance(v, bool) for v in flat):
        return "BOOL_8"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in flat):
        return "UINT_32" if all(v >= 0 for v in flat) else "INT_32"
    return "FLOAT_32"


def _param(value: Any, base: Path, where: str):
    """A node parameter -> what qnnemu.client's Graph.node takes (numpy scalar or array)."""
    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, int):
        return np.uint32(value) if value >= 0 else np.int32(value)
    if isinstance(value, float):
        return np.float32(value)
    if isinstance(value, list):
        qtype = parse_dtype(_inline_kind(value), where)
        return np.asarray(_load_data(value, qtype, None, base, where))
    if isinstance(value, dict):
        unknown = set(value) - {"dtype", "value", "dims", "data"}
        if unknown:
            raise ToolError(f"{where}: unknown parameter keys {sorted(unknown)}")
        qtype = parse_dtype(value.get("dtype"), f"{where}.dtype")
        if qtype in dtypes.FIXED_POINT_TYPES:
            raise ToolError(f"{where}: fixed-point parameters are not supported")
        if "value" in value:
            if "data" in value:
                raise ToolError(f"{where}: give \"value\" (scalar) or \"data\" (tensor), not both")
            return _load_data(value["value"], qtype, (), base, where)[()]
        if "data" not in value:
            raise ToolError(f"{where}: a parameter object needs \"value\" (scalar) or \"data\" (tensor)")
        dims = _dims(value["dims"], f"{where}.dims") if "dims" in value else None
        array = _load_data(value["data"], qtype, dims, base, where)
        if array.ndim == 0:
            array = array.reshape(1)
        return array
    raise ToolError(f"{where}: unsupported parameter value {json.dumps(value)}")


def _child(path: str, key: str | int) -> str:
    """The JSON path of ``key`` (a member name or a list index) below ``path`` ("" = the
    document's top level): ``graphs[0]``, ``graphs[0].nodes[3].inputs[1]``, ``nodes[3]``."""
    step = f"[{key}]" if isinstance(key, int) else key
    if not path:
        return step
    return path + step if isinstance(key, int) else f"{path}.{step}"


def load_graph_description(path: str | os.PathLike) -> list[dict]:
    """Reads and checks a JSON graph description; returns one dict per graph with the
    tensors' types, dtypes, dims, quant and data resolved (relative data paths are relative
    to the JSON file). Every error names the file and the JSON path of what is wrong
    (``model.json: graphs[0].nodes[3].inputs[1]: tensor 'x9' is not declared in tensors``);
    the graph, tensor and node dicts keep theirs under ``"where"`` for the errors the backend
    reports later (:func:`build_graphs`)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise ToolError(f"--model {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ToolError(f"--model {path}: invalid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ToolError(f"--model {path}: the top level must be an object")
    version = doc.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ToolError(f"{path.name}: version: graph description version {json.dumps(version)}; "
                        f"this tool reads version {FORMAT_VERSION}")
    if "graphs" in doc:
        graphs, paths = doc["graphs"], None
        if not isinstance(graphs, list) or not graphs:
            raise ToolError(f"{path.name}: graphs: must be a non-empty list of graphs")
        paths = [_child("graphs", gi) for gi in range(len(graphs))]
    else:
        graphs, paths = [doc], [""]
    base = path.resolve().parent
    out, names = [], set()
    for g, jpath in zip(graphs, paths):
        out.append(_check_graph(g, path.name, jpath, base))
        if out[-1]["name"] in names:
            raise ToolError(f"{out[-1]['where']}: graph {out[-1]['name']!r} is defined twice")
        names.add(out[-1]["name"])
    return out


def _json_objects(g: dict, key: str, what: str, known: set[str], at: Callable[..., str]):
    """(JSON path, object) of each entry of the graph's list ``key`` (absent: none); an entry
    that is not an object or has keys outside ``known`` is refused."""
    entries = g.get(key) or []
    if not isinstance(entries, list):
        raise ToolError(f"{at(key)}: must be a list of {what}s")
    for i, entry in enumerate(entries):
        where = at(key, i)
        if not isinstance(entry, dict):
            raise ToolError(f"{where}: a {what} must be an object")
        unknown = set(entry) - known
        if unknown:
            raise ToolError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(known)})")
        yield where, entry


def _check_graph(g: Any, file: str, jpath: str, base: Path) -> dict:
    def at(*keys) -> str:
        """``<file>: <JSON path>`` of ``keys`` below the graph."""
        p = jpath
        for k in keys:
            p = _child(p, k)
        return f"{file}: {p}" if p else f"{file}: top level"

    if not isinstance(g, dict):
        raise ToolError(f"{at()}: a graph must be an object")
    unknown = set(g) - _GRAPH_KEYS - {"version"}
    if unknown:
        raise ToolError(f"{at()}: unknown keys {sorted(unknown)} (known: {sorted(_GRAPH_KEYS)})")
    name = g.get("name")
    if not isinstance(name, str) or not name:
        raise ToolError(f"{at('name')}: a graph needs a non-empty name")
    precision = g.get("precision")
    if precision not in (None, "fp16", "fp32"):
        raise ToolError(f"{at('precision')}: {json.dumps(precision)} is not \"fp16\" or \"fp32\"")
    tensors: dict[str, dict] = {}
    for tw, t in _json_objects(g, "tensors", "tensor", _TENSOR_KEYS, at):
        tname = t.get("name")
        if not isinstance(tname, str) or not tname:
            raise ToolError(f"{tw}.name: a tensor needs a non-empty name")
        if tname in tensors:
            raise ToolError(f"{tw}.name: tensor {tname!r} is declared twice "
                            f"(first at {tensors[tname]['where'].split(': ', 1)[1]})")
        ttype = _tensor_type(t.get("type", "NATIVE"), f"{tw}.type")
        qtype = parse_dtype(t.get("dtype"), f"{tw}.dtype")
        dims = _dims(t.get("dims"), f"{tw}.dims")
        quant = _quant(t.get("quant"), f"{tw}.quant")
        if qtype in dtypes.FIXED_POINT_TYPES and quant is None:
            raise ToolError(f"{tw}: {dtypes.name(qtype)} tensor {tname!r} needs a quant encoding")
        data = None
        if ttype in _WITH_DATA:
            if "data" not in t:
                raise ToolError(f"{tw}: {Q.enum('QNN_TENSOR_TYPE_')[ttype][len('QNN_TENSOR_TYPE_'):]} "
                                f"tensor {tname!r} needs data")
            data = _load_data(t["data"], qtype, dims, base, f"{tw}.data")
        elif "data" in t:
            raise ToolError(f"{tw}: only STATIC and UPDATEABLE_STATIC tensors carry data")
        tensors[tname] = {"name": tname, "type": ttype, "dtype": qtype, "dims": dims,
                          "quant": quant, "data": data, "producer": None, "where": tw}
    nodes = []
    for ni, (nw, n) in enumerate(_json_objects(g, "nodes", "node", _NODE_KEYS, at)):
        op_type = n.get("type")
        if not isinstance(op_type, str) or not op_type:
            raise ToolError(f"{nw}.type: a node needs an op type (e.g. \"Conv2d\")")
        node_name = n.get("name") or f"{op_type}_{ni}"
        package = n.get("package", "qti.aisw")
        ins, outs = n.get("inputs", []), n.get("outputs", [])
        for key, names in (("inputs", ins), ("outputs", outs)):
            if not isinstance(names, list):
                raise ToolError(f"{nw}.{key}: must be a list of tensor names")
            for i, x in enumerate(names):
                if not isinstance(x, str):
                    raise ToolError(f"{nw}.{key}[{i}]: {json.dumps(x)} is not a tensor name")
                if x not in tensors:
                    raise ToolError(f"{nw}.{key}[{i}]: tensor {x!r} is not declared in tensors")
        if not outs:
            raise ToolError(f"{nw}.outputs: a node needs at least one output")
        for i, x in enumerate(ins):
            t = tensors[x]
            if t["type"] not in (Q.QNN_TENSOR_TYPE_APP_WRITE, *_WITH_DATA) and t["producer"] is None:
                raise ToolError(f"{nw}.inputs[{i}]: tensor {x!r} is used before a node produces it "
                                f"(nodes are added in order)")
        for i, x in enumerate(outs):
            t = tensors[x]
            if t["type"] not in (Q.QNN_TENSOR_TYPE_NATIVE, Q.QNN_TENSOR_TYPE_APP_READ):
                raise ToolError(f"{nw}.outputs[{i}]: tensor {x!r} is "
                                f"{Q.enum('QNN_TENSOR_TYPE_')[t['type']]}; node outputs are "
                                f"NATIVE or APP_READ")
            if t["producer"] is not None:
                raise ToolError(f"{nw}.outputs[{i}]: tensor {x!r} is already produced by node "
                                f"{t['producer']!r}")
            t["producer"] = node_name
        params = n.get("params") or {}
        if not isinstance(params, dict):
            raise ToolError(f"{nw}.params: must be an object (name -> value)")
        framework = n.get("framework")
        if isinstance(framework, str):
            framework = {"name": framework}
        if framework is not None and (not isinstance(framework, dict) or set(framework) - {"name", "type"}
                                      or not all(isinstance(v, str) and v for v in framework.values())
                                      or "name" not in framework):
            raise ToolError(f"{nw}.framework: the source framework op is a name or "
                            f"{{\"name\": ..., \"type\": ...}} (strings), got {json.dumps(framework)}")
        nodes.append({"name": node_name, "package": package, "type": op_type, "inputs": ins,
                      "outputs": outs, "where": nw, "framework": framework,
                      "params": {k: _param(v, base, f"{nw}.params.{k}") for k, v in params.items()}})
    for t in tensors.values():
        if t["type"] in (Q.QNN_TENSOR_TYPE_NATIVE, Q.QNN_TENSOR_TYPE_APP_READ) and t["producer"] is None:
            raise ToolError(f"{t['where']}: tensor {t['name']!r} is "
                            f"{Q.enum('QNN_TENSOR_TYPE_')[t['type']]} but no node produces it")
    if not nodes:
        raise ToolError(f"{at('nodes')}: graph {name!r} has no nodes")
    return {"name": name, "precision": precision, "tensors": tensors, "nodes": nodes,
            "where": at()}


def build_graphs(ctx, graphs: Sequence[dict], config: BackendConfig | None = None) -> list:
    """Creates the described graphs in ``ctx`` (a qnnemu.client Context), not finalized:
    inputs and static tensors first (declaration order), then the nodes in order. A call the
    backend refuses becomes a ToolError naming the JSON path of the graph, tensor or node."""
    built = []
    for spec in graphs:
        configs = config.graph_configs(spec["name"]) if config is not None else []
        with _described(spec["where"], f"graph {spec['name']!r}"):
            g = ctx.graph(spec["name"], precision=spec["precision"], configs=configs)
        made = {}
        for t in spec["tensors"].values():
            with _described(t["where"], f"tensor {t['name']!r}"):
                if t["type"] == Q.QNN_TENSOR_TYPE_APP_WRITE:
                    made[t["name"]] = g.input(t["name"], t["dims"], t["dtype"], quant=t["quant"])
                elif t["type"] in _WITH_DATA:
                    made[t["name"]] = g.static(
                        t["name"], t["data"], dtype=t["dtype"], quant=t["quant"],
                        updatable=t["type"] == Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC)
        for n in spec["nodes"]:
            outs = []
            for name in n["outputs"]:
                t = spec["tensors"][name]
                outs.append((name, t["dims"], t["dtype"], t["quant"]))
            read = [name for name in n["outputs"]
                    if spec["tensors"][name]["type"] == Q.QNN_TENSOR_TYPE_APP_READ]
            with _described(n["where"], f"node {n['name']!r}, {n['type']}"):
                result = g.node(n["type"], [made[x] for x in n["inputs"]], outs, params=n["params"],
                                name=n["name"], package=n["package"], app_read=read)
            for t in (result if isinstance(result, list) else [result]):
                made[t.name] = t
        built.append(g)
    return built


def finalize_graphs(built: Sequence, graphs: Sequence[dict], profile=None,
                    after: Callable[[Any], None] | None = None) -> None:
    """graphFinalize of every built graph (with ``profile``; ``after(graph)`` once each is
    finalized); a refusal names the graph's JSON path."""
    for g, spec in zip(built, graphs):
        with _described(spec["where"], f"graph {spec['name']!r}"):
            g.finalize(profile=profile)
        if after is not None:
            after(g)


@contextlib.contextmanager
def _described(where: str, what: str):
    """Errors inside name ``where`` (the JSON path) and ``what``: the backend refusing a call
    (QnnCallError), qnnemu.client's checks of shapes and values."""
    from ..client import QnnCallError  # not at import time: --help stays fast
    try:
        yield
    except (QnnCallError, TypeError, ValueError, OverflowError) as e:
        raise ToolError(f"{where} ({what}): {e}") from None


# ------------------------------------------------------------------------ binary sections
def _updatable(spec: dict) -> list[str]:
    return [t["name"] for t in spec["tensors"].values()
            if t["type"] == Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC]


def load_adapter(path: str | os.PathLike, graphs: Sequence[dict]) -> dict[str, dict[str, np.ndarray]]:
    """Reads an adapter file: a JSON object ``{"<graph>": {"<tensor>": data, ...}, ...}`` giving
    new data for ``UPDATEABLE_STATIC`` tensors of the described ``graphs``; ``data`` is written
    as a tensor's ``data`` in the description (a .raw or .npy file relative to the adapter file,
    or an inline list) and must have the tensor's dims. Returns graph -> tensor -> array."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise ToolError(f"--adapter {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ToolError(f"--adapter {path}: invalid JSON: {e}") from None
    if not isinstance(doc, dict) or not doc:
        raise ToolError(f"--adapter {path}: expected a non-empty object graph -> tensor -> data")
    specs = {g["name"]: g for g in graphs}
    base = path.resolve().parent
    out: dict[str, dict[str, np.ndarray]] = {}
    for gname, values in doc.items():
        if gname not in specs:
            raise ToolError(f"--adapter {path.name}: graph {gname!r} is not in the model "
                            f"(graphs: {sorted(specs)})")
        if not isinstance(values, dict) or not values:
            raise ToolError(f"--adapter {path.name}: {gname}: expected a non-empty object tensor -> data")
        out[gname] = {}
        for tname, value in values.items():
            t = specs[gname]["tensors"].get(tname)
            if t is None or t["type"] != Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC:
                raise ToolError(f"--adapter {path.name}: {gname}.{tname}: not an UPDATEABLE_STATIC "
                                f"tensor of graph {gname!r} (updatable: {_updatable(specs[gname]) or 'none'})")
            out[gname][tname] = _load_data(value, t["dtype"], t["dims"], base,
                                           f"--adapter {path.name}: {gname}.{tname}")
    return out


def make_sections(ctx, built: Sequence, graphs: Sequence[dict],
                  adapters: Sequence[tuple[str, dict]] = ()) -> dict[tuple[str, str | None], bytes]:
    """The UPDATABLE binary sections of the finalized ``built`` graphs (qnnemu.client Graphs of
    the descriptions ``graphs``) that have UPDATEABLE_STATIC tensors: ``(graph, None)`` with the
    description's values, and ``(graph, name)`` for each adapter ``(name, graph -> tensor ->
    array)`` naming the graph (its tensors updated with tensorUpdateGraphTensors, the section
    taken, then the description's values restored by applying the first section)."""
    by_name = {g.name: g for g in built}
    out: dict[tuple[str, str | None], bytes] = {}
    for spec in graphs:
        if _updatable(spec):
            out[(spec["name"], None)] = ctx.binary_section(by_name[spec["name"]])
        else:
            log.info("graph %s has no UPDATEABLE_STATIC tensors: no binary section", spec["name"])
    if not out:
        raise ToolError("--output_sections: no graph of the model has UPDATEABLE_STATIC tensors")
    for name, values in adapters:
        for gname, tensors in values.items():
            g = by_name[gname]
            g.update_tensors(tensors)
            out[(gname, name)] = ctx.binary_section(g)
            ctx.apply_binary_section(out[(gname, None)], g)
    return out


def section_file_name(binary_name: str, graph: str, adapter: str | None) -> str:
    """``<binary>.<graph>[.<adapter>].section.bin`` (characters other than letters, digits and
    ``-_`` in the graph name become ``_``)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in graph) or "_"
    return f"{binary_name}.{safe}{'' if adapter is None else '.' + adapter}.section.bin"


# ----------------------------------------------------------------------------------- ONNX
def _onnx_provider_options(config: BackendConfig) -> dict[str, str]:
    """QNN EP options for the config file's keys that have one; the others are reported."""
    opts: dict[str, str] = {}
    raw = config.raw
    for i, g in enumerate(raw.get("graphs", [])):
        for key, value in g.items():
            if key == "vtcm_mb":
                opts["vtcm_mb"] = str(int(value))
            elif key == "O":
                opts["htp_graph_finalization_optimization_mode"] = str(int(value))
            elif key == "fp16_relaxed_precision":
                opts["enable_htp_fp16_precision"] = "1" if value else "0"
            elif key != "graph_names":
                log.warning("config file: graphs[%d].%s has no ONNX Runtime QNN EP option; "
                            "ignored for an ONNX model", i, key)
    for d in raw.get("devices", [])[:1]:
        for key, value in d.items():
            if key in ("soc_model", "soc_id"):
                opts["soc_model"] = str(int(value))
            elif key == "dsp_arch":
                opts["htp_arch"] = str(value).lower().lstrip("v")
    for key in raw.get("context", {}):
        log.warning("config file: context.%s is not passed to ONNX Runtime; ignored for an ONNX "
                    "model (ONNX Runtime's ep.share_ep_contexts is its weight-sharing switch)", key)
    return opts


_ORT_SEVERITY = {"error": 3, "warn": 2, "info": 1, "verbose": 0, "debug": 0}


def generate_from_onnx(model: str, backend: str, config: BackendConfig,
                       log_level: str = "warn") -> list[bytes]:
    """Prepares ``model`` with ONNX Runtime's QNN EP on ``backend`` and returns the context
    binaries embedded in the EPContext model it dumps (the main context nodes', in order)."""
    try:
        import onnx
        import onnxruntime as ort
    except ImportError as e:
        raise ToolError(f"--model {model}: ONNX models need the onnx and onnxruntime-qnn "
                        f"packages ({e})") from None
    from .. import onnxruntime as qort
    with tempfile.TemporaryDirectory(prefix="qnnemu-ctxgen-") as tmp:
        dumped = os.path.join(tmp, "model_ctx.onnx")
        so = ort.SessionOptions()
        so.log_severity_level = _ORT_SEVERITY[log_level]
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_embed_mode", "1")
        so.add_session_config_entry("ep.context_file_path", dumped)
        options = {**_onnx_provider_options(config), "backend_path": backend}
        try:
            qort.session(model, provider_options=options, session_options=so)
        except Exception as e:  # noqa: BLE001 - ONNX Runtime raises its own exception types
            raise ToolError(f"--model {model}: ONNX Runtime could not prepare the model on "
                            f"{backend}: {e}") from None
        if not os.path.isfile(dumped):
            raise ToolError(f"--model {model}: ONNX Runtime wrote no EPContext model")
        ctx_model = onnx.load(dumped)
    blobs = []
    for node in ctx_model.graph.node:
        if node.op_type != "EPContext":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("main_context", 1) != 1:
            continue  # shares the binary of an earlier main context node
        if attrs.get("embed_mode", 1) != 1:
            raise ToolError(f"--model {model}: EPContext node {node.name!r} refers to an external "
                            f"binary (embed_mode {attrs.get('embed_mode')})")
        blob = attrs.get("ep_cache_context")
        if not blob:
            raise ToolError(f"--model {model}: EPContext node {node.name!r} has no embedded binary")
        blobs.append(bytes(blob))
    if not blobs:
        raise ToolError(f"--model {model}: the EPContext model has no EPContext node "
                        f"(nothing of the model went to the QNN EP)")
    return blobs


# ----------------------------------------------------------------------------------- main
def generate_from_json(model: str, backend: str, config: BackendConfig, log_level: str,
                       sections: bool = False, adapters: Sequence[tuple[str, str]] = (),
                       profiling: str | None = None, schematic: list | None = None):
    """Prepares a JSON description: returns ``(binary, number of graphs, sections)``, the
    sections (``make_sections(...)`` for the ``adapters`` ``(name, adapter file)``) only with
    ``sections``, else ``{}``.  ``profiling``: graphFinalize with a profile of that level;
    with ``schematic`` (a list) optrace is enabled and each graph's schematic (graphFinalize's
    "Schematic" event, with the description's framework op names) is appended to it."""
    from ..client import Backend
    graphs = load_graph_description(model)
    loaded = [(name, load_adapter(path, graphs)) for name, path in adapters]
    config.warn_unused("prepare")
    config.warn_perf_unused("the context-binary generator")
    with Backend(backend, log_level=log_level, device_configs=config.device_configs()) as be:
        profile = be.profile(profiling, optrace=schematic is not None) if profiling else None
        ctx = be.context(config.context_configs("prepare"))
        built = build_graphs(ctx, graphs, config)
        specs = {spec["name"]: spec for spec in graphs}

        def collect(g) -> None:
            if schematic is not None:
                doc = _schematic_of(profile.events(), specs[g.name], backend)
                if doc is not None:
                    schematic.append(doc)
        finalize_graphs(built, graphs, profile=profile, after=collect)
        blob = ctx.get_binary()
        return blob, len(graphs), (make_sections(ctx, built, graphs, loaded) if sections else {})


def _schematic_of(events: list[dict], spec: dict, backend: str) -> dict | None:
    """The graph's schematic from its graphFinalize profile events, with the framework op names
    of its description (QNN HTP backend documentation, "QNN HTP Optrace Profiling").  None when
    the backend wrote its own ``<graph>_schematic.bin`` into the current directory instead, as
    the vendor's libQnnHtp.so does (probed: a text file in the SDK's format)."""
    doc = next((e.get("object") for e in events if e.get("identifier") == "Schematic"
                and isinstance(e.get("object"), dict)), None)
    if doc is None:
        own = Path.cwd() / f"{spec['name']}_schematic.bin"
        if own.is_file():
            log.warning("--profiling_option optrace: %s wrote its own schematic %s (its format; the SDK's "
                        "qnn-profile-viewer reads it, qnnemu-profile-viewer reads qnnemu's)", backend, own)
            return None
        raise ToolError(f"--profiling_option optrace: {backend} reported no schematic for graph "
                        f"{spec['name']!r} (qnnemu's HTP library reports one at graphFinalize)")
    framework = {n["name"]: n["framework"] for n in spec["nodes"] if n.get("framework")}
    for node in doc.get("nodes", []):
        if node["name"] in framework:
            node["framework"] = framework[node["name"]]
    return doc


def _graph_count(blob: bytes, backend: str) -> int | None:
    """How many graphs a context binary holds, as the System library next to ``backend`` (or
    ours) lists them; None when it cannot tell."""
    from ..system_client import SystemLibrary
    try:
        return len(SystemLibrary(resolve_system_library(None, backend)).binary_info(blob)["graphs"])
    except (RuntimeError, OSError, ValueError):
        return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Prepares a QNN context binary from a JSON graph description "
        "(docs/graph-json.md) or an ONNX model, on any QNN backend library.")
    p.add_argument("--model", required=True,
                   help="graph description (.json) or ONNX model (.onnx)")
    p.add_argument("--backend", help="QNN backend library: a path or a name "
                   "(default: qnnemu's libQnnHtpEmu.so; 'htp' is the vendor's libQnnHtp.so; "
                   "'lpai' is qnnemu's libQnnLpaiEmu.so)")
    p.add_argument("--binary_file", help="name of the binary written to --output_dir "
                   "(.bin is appended; default: the model's file name)")
    p.add_argument("--output_dir", default="./output", help="directory for the binary (default ./output)")
    p.add_argument("--config_file", help="backend-extension JSON (HTP graphs/devices/context options)")
    p.add_argument("--output_sections", action="store_true",
                   help="also write the UPDATABLE binary section of each graph with UPDATEABLE_STATIC "
                   "tensors: <binary>.<graph>.section.bin (JSON models)")
    p.add_argument("--adapter", action="append", default=[], metavar="NAME=FILE.json",
                   help="new data for UPDATEABLE_STATIC tensors ({graph: {tensor: data}}); writes "
                   "<binary>.<graph>.NAME.section.bin (implies --output_sections; repeatable)")
    p.add_argument("--profiling_level", choices=("basic", "detailed", "linting"),
                   help="profile graphFinalize at this level (with --profiling_option optrace: detailed or linting)")
    p.add_argument("--profiling_option", choices=("optrace",),
                   help="optrace: also write [BINARY]_schematic.bin next to the binary (JSON models), "
                   "for qnnemu-profile-viewer --schematic")
    p.add_argument("--lora_weight_sharing", action="store_true",
                   help="prepare with QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED (as "
                   "\"context\": {\"lora_weight_sharing\": true} in the config file): the updatable weights "
                   "of all graphs stored once, as one shared blob (docs/lora.md; JSON models, HTP)")
    p.add_argument("--log_level", choices=LOG_LEVELS, default="warn")
    return p


def _request_lora_weight_sharing(config: BackendConfig, backend: str, model: str) -> None:
    """--lora_weight_sharing: the HTP context config LORA_WEIGHT_SHARING_ENABLED at prepare (the
    config file's ``lora_weight_sharing`` key), for a JSON description on an HTP backend."""
    from . import lpai
    if lpai.provides_lpai(backend):
        raise ToolError("--lora_weight_sharing: an HTP context config; the LPAI backend has no LoRA weight sharing")
    if Path(model).suffix.lower() != ".json":
        raise ToolError("--lora_weight_sharing needs a JSON graph description: the QNN EP prepares ONNX "
                        "initializers as STATIC (not updatable) tensors")
    entry = ("LORA_WEIGHT_SHARING_ENABLED", "loraWeightSharingEnabled", True, "prepare")
    config.context[:] = [c for c in config.context if c[0] != entry[0]] + [entry]


def main(argv: Sequence[str] | None = None) -> int:
    def body(args) -> int:
        from . import lpai
        backend = lpai.resolve(args.backend) or resolve_backend(args.backend)
        if lpai.provides_lpai(backend):
            # LPAI: each graph is prepared offline (PREPARE); the LPAI config file is not read here.
            lpai.load_config(args.config_file)
            config: BackendConfig = lpai.PrepareConfig(path=args.config_file)
            if Path(args.model).suffix.lower() == ".onnx":
                raise ToolError(f"--model {args.model}: the LPAI backend prepares JSON graph descriptions "
                                f"(ONNX Runtime's QNN EP has no LPAI backend option)")
        else:
            config = load_backend_config(args.config_file)
        if args.lora_weight_sharing:
            _request_lora_weight_sharing(config, backend, args.model)
        model = args.model
        if not os.path.isfile(model):
            raise ToolError(f"--model {model}: no such file")
        name = args.binary_file or Path(model).stem
        if os.sep in name:
            raise ToolError(f"--binary_file {name}: a file name, not a path (see --output_dir)")
        if name.endswith(".bin"):
            name = name[:-4]
        adapters = []
        for value in args.adapter:
            adapter, sep, path = value.partition("=")
            if not sep or not adapter or not path or not all(c.isalnum() or c in "-_" for c in adapter):
                raise ToolError(f"--adapter {value}: expected NAME=FILE.json (NAME: letters, digits, -, _)")
            if adapter in {a for a, _ in adapters}:
                raise ToolError(f"--adapter {value}: adapter {adapter!r} is given twice")
            adapters.append((adapter, path))
        want_sections = args.output_sections or bool(adapters)
        suffix = Path(model).suffix.lower()
        schematic: list | None = None
        if args.profiling_option == "optrace":
            if args.profiling_level not in ("detailed", "linting"):
                raise ToolError("--profiling_option optrace needs --profiling_level detailed or linting")
            if suffix != ".json" or lpai.provides_lpai(backend):
                raise ToolError("--profiling_option optrace: the schematic is written for JSON graph descriptions "
                                "prepared on an HTP backend")
            schematic = []
        sections: dict = {}
        graph_counts: list[int] = []
        if suffix == ".onnx":
            if want_sections:
                raise ToolError("--output_sections/--adapter need a JSON graph description: the QNN EP "
                                "prepares ONNX initializers as STATIC (not updatable) tensors")
            blobs = generate_from_onnx(model, backend, config, args.log_level)
        elif suffix == ".json":
            blob, count, sections = generate_from_json(model, backend, config, args.log_level,
                                                       want_sections, adapters, args.profiling_level, schematic)
            blobs, graph_counts = [blob], [count]
        else:
            raise ToolError(f"--model {model}: expected a .json graph description or an .onnx model")
        try:
            os.makedirs(args.output_dir, exist_ok=True)
            written = []
            for i, blob in enumerate(blobs):
                out = os.path.normpath(os.path.join(
                    args.output_dir, f"{name}.bin" if len(blobs) == 1 else f"{name}_{i}.bin"))
                Path(out).write_bytes(blob)
                count = graph_counts[i] if graph_counts else _graph_count(blob, backend)
                graphs_text = "" if count is None else f", {plural(count, 'graph')}"
                written.append(f"{out} ({len(blob)} bytes{graphs_text})")
            if schematic:   # [MODEL]_schematic.bin next to the binary
                from .viewer.optrace_features import write_schematic
                out = os.path.normpath(os.path.join(args.output_dir, f"{name}_schematic.bin"))
                size = write_schematic(out, schematic, os.path.abspath(model), f"{name}.bin")
                written.append(f"{out} (schematic, {size} bytes)")
            section_files = []
            for (graph, adapter), blob in sections.items():
                out = os.path.normpath(os.path.join(args.output_dir, section_file_name(name, graph, adapter)))
                Path(out).write_bytes(blob)
                log.info("wrote %s (graph %s, %s; %d bytes)", out, graph,
                         "the description's weights" if adapter is None else f"adapter {adapter}", len(blob))
                section_files.append(out)
        except OSError as e:
            raise ToolError(f"--output_dir {args.output_dir}: {e.strerror or e}"
                            f"{': ' + e.filename if e.filename else ''}") from None
        summary = f"wrote {', '.join(written)}"
        if section_files:
            summary += (f" and {plural(len(section_files), 'binary section')} "
                        f"({', '.join(section_files)})")
        print(f"{PROG}: {summary}")
        return 0

    return tool_main(PROG, build_parser(), argv, body)


if __name__ == "__main__":
    raise SystemExit(main())
