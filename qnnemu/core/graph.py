"""QnnGraph.h: graphs, nodes (graphAddNode), finalize and execute; QnnBackend_validateOpConfig.

Validation is kept apart from execution: ``check_op_config`` applies the op-config rules (used
both by ``backendValidateOpConfig`` on never-created tensors and by ``graphAddNode``), and
``Graph.finalize`` builds an immutable execution plan that ``Graph.execute`` runs.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import ops, rules
from ..errors import OpCheckError, OpUnsupportedError, QnnError
from ..headers import Q
from ..htp import kvcache, op_support, prepare as htp_prepare, priority as htp_priority, settings as htp_settings
from ..htp.device_model import newest_device_model
from ..htp.settings import device_model
from ..location import Location
from ..ops.base import Op, OpWarning, Param, TensorSpec, is_real_dtype
from ..rules import error, fail
from ..spec import dtypes
from . import scheduling
from .engine import build_engine
from .log import NULL_LOGGER, Logger
from .plan import Plan, compile_plan, nodes_touching, refresh_plan
from .tensor import (
    APP_INPUT_TYPES,
    APP_OUTPUT_TYPES,
    APP_READWRITE_TYPES,
    NODE_OUTPUT_TYPES,
    PRODUCED_TYPES,
    Tensor,
    TensorDesc,
    from_desc,
    is_empty,
    type_name,
    validate_desc,
)

if TYPE_CHECKING:
    from ..htp.plan_types import PreparedPlan


@dataclass
class ParamDesc:
    """A Qnn_Param_t, copied: scalars as (dtype, value); tensors as a TensorDesc."""

    name: str | None
    kind: str  # "scalar", "tensor" or the raw paramType value as text when unknown
    dtype: int = 0
    value: Any = None
    tensor: TensorDesc | None = None


@dataclass
class OpConfigDesc:
    """A Qnn_OpConfig_t (v1), copied."""

    version: int
    name: str | None
    package: str | None
    type_name: str | None
    params: list[ParamDesc]
    inputs: list[TensorDesc]
    outputs: list[TensorDesc]


@dataclass
class Node:
    name: str
    op_type: str
    op_cls: type[Op]
    params: dict[str, Any]
    inputs: list[int | None]  # tensor ids; None for NULL (absent optional) inputs
    outputs: list[int]
    input_specs: list[TensorSpec | None] = field(default_factory=list)
    output_specs: list[TensorSpec] = field(default_factory=list)
    # As the app passed them (for context binaries): params with their QNN data types, package.
    raw_params: dict[str, Param] = field(default_factory=dict)
    package: str = ops.PACKAGE_NAME


def parse_params(cfg: OpConfigDesc, func: str, code: int, static_lookup=None, strict: bool = False,
                 ignored: list | None = None) -> dict[str, Param]:
    """Qnn_Param_t list -> op Params, rejecting unnamed or ill-formed entries.

    A name given again: ``strict`` (backendValidateOpConfig) refuses it; otherwise the first
    one is used and the later ones are neither read nor checked, as the vendor's graphAddNode
    does -- each noted in ``ignored`` as an OpWarning (path from ``opConfig.v1.``) for the
    caller to log once the node passed.  Whether a scalar's data type suits its parameter is
    the op's check (qnnemu/ops/base.py)."""
    out: dict[str, Param] = {}
    first_at: dict[str, int] = {}
    for i, p in enumerate(cfg.params):
        path = f"opConfig.v1.params[{i}]"
        if not p.name:
            fail(Location(func).field(f"{path}.name"), "QNNEMU-op-param-name", "parameter without a name", code=code)
        if p.name in out:
            if strict:
                fail(Location(func).field(f"{path}.name"), "QNNEMU-op-param-duplicate",
                     f"parameter '{p.name}' given twice", code=code)
            if ignored is not None:
                ignored.append(OpWarning("QNNEMU-op-param-duplicate-ignored", f"params[{i}].name",
                                         f"parameter '{p.name}' given again (first as params[{first_at[p.name]}]); "
                                         f"ignored: the first one is used"))
            continue
        first_at[p.name] = i
        if p.kind == "scalar":
            out[p.name] = Param(p.name, "scalar", p.dtype, p.value)
        elif p.kind == "tensor":
            t = p.tensor
            if t is None:
                fail(Location(func).field(f"{path}.tensorParam"), "QNNEMU-op-param-tensor-null",
                     f"'{p.name}': tensor parameter without a tensor", code=code)
            data = None
            if static_lookup is not None and t.id:
                created = static_lookup(t.id)
                if created is not None and created.data is not None:
                    data = created.data
            if data is None:
                try:
                    _, data = validate_desc(t, func, f"{path}.tensorParam", code=code)
                except QnnError as e:
                    raise QnnError(code, str(e.detail), rule=e.rule) from None
                if data is None:
                    fail(Location(func).field(f"{path}.tensorParam.v{t.version}.type"), "QNNEMU-op-param-tensor-static",
                         f"'{p.name}': tensor parameters must be STATIC with data, got "
                         f"{type_name(t.type)}", code=code)
            out[p.name] = Param(p.name, "tensor", t.dtype, np.array(data))
        else:
            fail(Location(func).field(f"{path}.paramType"), "QNNEMU-op-param-paramtype",
                 f"'{p.name}': paramType {p.kind} is neither SCALAR nor TENSOR", code=code)
    return out


def _op_inputs(specs: list[TensorSpec | None]) -> list[TensorSpec]:
    """The input specs as ops.base annotates them (an op takes None for an absent optional input)."""
    return cast(list[TensorSpec], specs)


def check_op(cfg: OpConfigDesc, input_specs: list[TensorSpec | None], params: dict[str, Param],
             declared_outputs: list[TensorSpec], func: str, code: int,
             log: Logger | None = None, report: bool = False, strict: bool = False,
             ignored: list | None = None) -> tuple[type[Op], dict, list[TensorSpec]]:
    """Runs the op's own rules; returns (op class, parsed params, inferred outputs).

    ``strict``: the op definition check of backendValidateOpConfig (Op.parse_params).  The
    warning rules (what the vendor's backend tolerates: ``ignored`` from ``parse_params``, then
    the op's) are logged once the node passed, through qnnemu/rules.py naming ``func`` and the
    ``opConfig.v1.`` path: to ``log``, or with ``report`` to the logger of the running API call;
    neither (a re-check such as graphValidate's): not logged."""
    # Something we cannot run: validateOpConfig answers NOT_SUPPORTED, graphAddNode
    # UNSUPPORTED_FEATURE; broken configs get ``code``.
    unsupported = code if code == Q.QNN_BACKEND_ERROR_NOT_SUPPORTED else Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE
    cls = ops.get(cfg.type_name or "", cfg.package or "")
    if cls is None:
        if cfg.package not in (ops.PACKAGE_NAME, "", None):
            fail(Location(func).path("opConfig.v1.packageName"), "QNNEMU-op-package-unknown",
                 f"op package '{cfg.package}' is not registered (only '{ops.PACKAGE_NAME}')", code=unsupported)
        fail(Location(func).path("opConfig.v1.typeName"), "QNNEMU-op-type-unknown",
             f"op type '{cfg.type_name}' is not supported by qnnemu "
             f"(see backendGetSupportedOperations)", code=unsupported)
    # The op's own checks report paths relative to the op config (OpCheckError.path, OpWarning.path):
    # this layer names the function and the config around them.
    op_config = Location(func).field("opConfig").field("v1")
    node = f"node '{cfg.name}' ({cls.op_type})"
    _check_absent_inputs(cls, input_specs, cfg, func, code)
    try:
        outs, warnings = cls.check_with_warnings(_op_inputs(input_specs), params, declared_outputs=declared_outputs,
                                                 strict=strict)
        parsed = cls.parse_params(params, strict)
    except OpUnsupportedError as e:
        raise error(op_config.path(e.path), e.rule, f"{node}: {e.detail}", code=unsupported) from None
    except OpCheckError as e:
        raise error(op_config.path(e.path), e.rule, f"{node}: {e.detail}", code=code) from None
    if len(outs) != len(declared_outputs):
        fail(Location(func).path("opConfig.v1.numOfOutputs"), "QNNEMU-op-output-count",
             f"node '{cfg.name}' ({cls.op_type}) produces {len(outs)} outputs, "
             f"{len(declared_outputs)} given", code=code)
    for i, (got, want) in enumerate(zip(outs, declared_outputs)):
        path = f"opConfig.v1.outputTensors[{i}]"
        if tuple(got.shape) != tuple(want.shape):
            fail(Location(func).field(f"{path}.dimensions"), "QNNEMU-op-output-shape",
                 f"node '{cfg.name}' ({cls.op_type}) computes dimensions {list(got.shape)}, "
                 f"the tensor declares {list(want.shape)}", code=code)
        if got.dtype != want.dtype and not _real_compatible(cls, got.dtype, want.dtype):
            fail(Location(func).field(f"{path}.dataType"), "QNNEMU-op-output-dtype",
                 f"node '{cfg.name}' ({cls.op_type}) computes {dtypes.name(got.dtype)}, "
                 f"the tensor declares {dtypes.name(want.dtype)}", code=code)
    for w in [*(ignored or ()), *warnings] if (log is not None or report) else ():
        rules.warn_at(op_config.path(w.path), w.rule, f"{node}: {w.message}", logger=log)
    return cls, parsed, outs


def _real_compatible(cls, got: int, want: int) -> bool:
    """A real-valued output may be declared fixed-point (or come from fixed-point inputs): the
    plan quantizes/dequantizes at the op boundary.  float16 <-> float32 is not implied."""
    if cls.handles_quant:
        return False
    fixed = dtypes.FIXED_POINT_TYPES
    return is_real_dtype(got) and is_real_dtype(want) and (got in fixed or want in fixed)


def _basic_config_checks(cfg: OpConfigDesc, func: str, code: int) -> None:
    if cfg.version != 1:
        fail(Location(func).path("opConfig.version"), "QNNEMU-op-config-version",
             f"must be QNN_OPCONFIG_VERSION_1, got {cfg.version}", code=code)
    if not cfg.type_name:
        fail(Location(func).path("opConfig.v1.typeName"), "QNNEMU-op-type-null", "typeName is NULL or empty", code=code)
    if cfg.name is None:   # an empty name is accepted, as the vendor does (several nodes may share it)
        fail(Location(func).path("opConfig.v1.name"), "QNNEMU-op-name", "a node needs a name (NULL given)", code=code)


def validate_op_config(cfg: OpConfigDesc) -> None:
    """QnnBackend_validateOpConfig: the graphAddNode rules on tensors that were never created."""
    func = "backendValidateOpConfig"
    code = Q.QNN_BACKEND_ERROR_NOT_SUPPORTED
    _basic_config_checks(cfg, func, code)
    specs: list[TensorSpec | None] = []
    declared: list[TensorSpec | None] = []
    for role, descs, out in (("inputTensors", cfg.inputs, specs), ("outputTensors", cfg.outputs, declared)):
        for i, d in enumerate(descs):
            quant, static = validate_desc(d, func, f"opConfig.v1.{role}[{i}]", code=code, max_rank=None,
                                          transient=True)
            out.append(None if d.type == Q.QNN_TENSOR_TYPE_NULL and out is specs else
                       TensorSpec(tuple(d.dims or ()), d.dtype, quant, static if out is specs else None,
                                  d.name or ""))
    del specs[_trim_null_inputs(cfg, func, code):]
    # (only inputs may be None: an output tensor is never NULL)
    cls, parsed, _ = check_op(cfg, specs, parse_params(cfg, func, code, strict=True),
                              cast(list[TensorSpec], declared), func, code,
                              report=True, strict=True)
    # What the HTP of the current device does not take (qnnemu/htp/op_support.py).
    op_support.check_validate(cls.op_type, parsed, specs, declared, _validation_device().arch, func,
                              f"node '{cfg.name}' ({cls.op_type})")


def _validation_device():
    """backendValidateOpConfig has no device argument: the HTP it answers for is the newest
    device created (the vendor's SoC setting is process-wide), else the default device."""
    return newest_device_model()


def _trim_null_inputs(cfg: OpConfigDesc, func: str, code: int) -> int:
    """Trailing NULL tensors mark absent optional inputs; returns how many inputs remain.

    NULL inputs before the last present one stay (as ``None``); ``check_op`` requires the op to
    declare those positions optional."""
    n = len(cfg.inputs)
    while n and cfg.inputs[n - 1].type == Q.QNN_TENSOR_TYPE_NULL:
        n -= 1
    return n


def _check_not_empty(t: Tensor, func: str, path: str, code: int) -> None:
    """tensorCreateGraphTensor accepts a dimension of 0 (as the vendor does); a node does not
    take such a tensor (the vendor's graphAddNode refuses it too) -- NULL tensors aside."""
    if is_empty(t):
        fail(Location(func).field(path), "QNNEMU-tensor-dims-zero",
             f"tensor '{t.name}' has a dimension of 0 (dimensions {list(t.dims)}); only a NULL tensor "
             f"(an absent optional input) may be empty", code=code)


def _check_absent_inputs(cls, input_specs: list, cfg: OpConfigDesc, func: str, code: int) -> None:
    names = cls.inputs
    for i, spec in enumerate(input_specs):
        if spec is not None:
            continue
        name = names[i] if i < len(names) else (names[-1] if names else "")
        if not name.endswith("?"):
            fail(Location(func).field(f"opConfig.v1.inputTensors[{i}].type"), "QNNEMU-op-null-input-position",
                 f"node '{cfg.name}' ({cls.op_type}): input {i} ({name or 'none'}) is required "
                 f"but given as a NULL (absent) tensor", code=code)


def node_check_error(func: str, node, culprits: list[str], e: OpCheckError | OpUnsupportedError) -> QnnError:
    """A node refusing the updated values of its tensors (Graph.prepare_update; QnnTensor.h
    tensor updates, qnnemu/core/sections.py)."""
    return error(Location(func), "QNNEMU-tensorUpdate-node-check",
                 f"{', '.join(culprits)}: node '{node.name}' ({node.op_type}) refuses the new values: "
                 f"opConfig.v1.{e.path}: {e.detail} (the op's rule {e.rule})",
                 code=Q.QNN_TENSOR_ERROR_INCOMPATIBLE_TENSOR_UPDATE)


class Graph:
    """A graph of one context.  Thread-safe: one execute at a time per graph."""

    def __init__(self, context, name: str, logger: Logger | None = None):
        self.context = context
        self.name = name
        self.handle = 0               # set by the context that creates it
        self.log = logger or NULL_LOGGER
        self.tensors: dict[int, Tensor] = {}
        self.by_name: dict[str, int] = {}
        self.nodes: list[Node] = []
        self.node_names: set[str] = set()
        self.finalized = False
        self.plan: Plan | None = None
        self.htp_plan: PreparedPlan | None = None   # set at finalize
        self.recorded_htp_plan: PreparedPlan | None = None   # a context binary's plan (used at finalize)
        self.spill_fill_bytes = 0     # the prepared plan's spill-fill buffer size
        self.configs: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.executions = 0
        self.last_schedule = scheduling.NO_SCHEDULE   # the scheduler's record of the last execute
        self.native_kv: dict = {}     # tensor id -> kvcache.NativeKv, set at finalize
        self.thread_priorities: tuple[int, int] | None = None   # (HMX, HVX), logged when it changes
        self._priority_key: tuple | None = None   # the priority configs thread_priorities was resolved from

    # ---- tensors ------------------------------------------------------------------------
    def create_tensor(self, d: TensorDesc) -> Tensor:
        func = "tensorCreateGraphTensor"
        if self.finalized:
            fail(Location(func), "QNNEMU-graph-immutable", f"graph '{self.name}' is finalized; no tensors can be added",
                 code=Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED)
        quant, static = validate_desc(d, func, "tensor")
        if d.type != Q.QNN_TENSOR_TYPE_NULL:   # data types the HTP does not hold (op_support.py)
            op_support.check_tensor(d.dtype, d.type, device_model(self).arch, func, f"tensor.v{d.version}.dataType")
        if d.name in self.by_name or self.context.find_tensor_by_name(d.name) is not None:
            fail(Location(func).field(f"tensor.v{d.version}.name"), "QNNEMU-tensor-name-unique",
                 f"a tensor named '{d.name}' already exists "
                 f"in graph '{self.name}'", code=Q.QNN_TENSOR_ERROR_NAME_HASH_COLLISION)
        t = from_desc(d, self.context.next_tensor_id(), quant, static)
        self.tensors[t.id] = t
        self.by_name[t.name] = t.id
        return t

    def tensor(self, tensor_id: int) -> Tensor | None:
        t = self.tensors.get(tensor_id)
        return t if t is not None else self.context.tensors.get(tensor_id)

    def _node_tensor(self, tensor_id: int) -> Tensor:
        """A tensor a node refers to (graphAddNode resolved it: it exists)."""
        t = self.tensor(tensor_id)
        assert t is not None
        return t

    # ---- nodes --------------------------------------------------------------------------
    def _resolve(self, d: TensorDesc, func: str, path: str) -> Tensor:
        """The created tensor a node refers to; its description must match the creation."""
        t = self.tensor(d.id) if d.id else None
        if t is None:
            fail(Location(func).field(f"{path}.v{d.version}.id"), "QNNEMU-graphAddNode-tensor-unknown",
                 f"tensor id {d.id} ('{d.name}') was not created in graph '{self.name}' "
                 f"or its context (create it with tensorCreateGraphTensor first)",
                 code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        if d.dims is not None and tuple(d.dims) != t.dims:
            fail(Location(func).field(f"{path}.v{d.version}.dimensions"), "QNNEMU-graphAddNode-tensor-dims",
                 f"{list(d.dims)} differs from the dimensions {list(t.dims)} tensor '{t.name}' "
                 f"(id {t.id}) was created with", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        if d.dtype != t.dtype:
            fail(Location(func).field(f"{path}.v{d.version}.dataType"), "QNNEMU-graphAddNode-tensor-dtype",
                 f"{dtypes.name(d.dtype)} differs from {dtypes.name(t.dtype)} tensor '{t.name}' "
                 f"(id {t.id}) was created with", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        return t

    def add_node(self, cfg: OpConfigDesc, report: bool = True) -> Node:
        """graphAddNode.  ``report``: log the warning rules the node raised (a graph rebuilt
        from a context binary does not repeat them)."""
        func = "graphAddNode"
        code = Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG
        if self.finalized:
            fail(Location(func), "QNNEMU-graph-immutable", f"graph '{self.name}' is finalized; no nodes can be added",
                 code=Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED)
        _basic_config_checks(cfg, func, code)
        # Node names need not be unique: the vendor accepts two nodes of the same name.
        n_in = _trim_null_inputs(cfg, func, code)
        inputs: list[Tensor | None] = []
        for i in range(n_in):
            path = f"opConfig.v1.inputTensors[{i}]"
            if cfg.inputs[i].type == Q.QNN_TENSOR_TYPE_NULL:
                inputs.append(None)  # an absent optional input (checked by check_op)
                continue
            t = self._resolve(cfg.inputs[i], func, path)
            _check_not_empty(t, func, f"{path}.v{cfg.inputs[i].version}.dimensions", code)
            if t.type in PRODUCED_TYPES and t.producer is None:
                # An APP_READ graph output may also feed later nodes once produced (the vendor's
                # backend accepts it; ONNX Runtime emits it when an output is also consumed).
                fail(Location(func).field(f"{path}.v{cfg.inputs[i].version}.id"), "QNNEMU-graphAddNode-input-order",
                     f"{type_name(t.type)} tensor '{t.name}' has no producer yet; nodes must be added "
                     f"in dependency order", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
            inputs.append(t)
        outputs: list[Tensor] = []
        for i, d in enumerate(cfg.outputs):
            path = f"opConfig.v1.outputTensors[{i}]"
            t = self._resolve(d, func, path)
            _check_not_empty(t, func, f"{path}.v{d.version}.dimensions", code)
            if t.type not in NODE_OUTPUT_TYPES:
                fail(Location(func).field(f"{path}.v{d.version}.type"), "QNNEMU-graphAddNode-output-type",
                     f"{type_name(t.type)} tensor '{t.name}' cannot be a node output "
                     f"(NATIVE, APP_READ, APP_READWRITE or their UPDATEABLE_ forms)",
                     code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
            if t.producer is not None or any(t is o for o in outputs):
                fail(Location(func).field(f"{path}.v{d.version}.id"), "QNNEMU-graphAddNode-output-producer",
                     f"tensor '{t.name}' is already written by node '{t.producer or cfg.name}'",
                     code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
            outputs.append(t)
        ignored: list = []
        params = parse_params(cfg, func, code, static_lookup=self.tensor, ignored=ignored)
        in_specs = [t.spec() if t is not None else None for t in inputs]
        cls, parsed, outs = check_op(cfg, in_specs, params, [t.spec() for t in outputs], func, code,
                                     log=self.log if report else None, ignored=ignored)
        op_support.check_add(cls.op_type, parsed, in_specs, [t.spec() for t in outputs], device_model(self).arch,
                             func, f"node '{cfg.name}' ({cls.op_type})")
        assert cfg.name is not None   # (a NULL name was refused by _basic_config_checks)
        node = Node(cfg.name, cls.op_type, cls, parsed, [t.id if t is not None else None for t in inputs],
                    [t.id for t in outputs], in_specs, [t.spec() for t in outputs], params,
                    cfg.package or ops.PACKAGE_NAME)
        for t_in in inputs:
            if t_in is not None:
                t_in.consumers.append(node.name)
        for t in outputs:
            t.producer = node.name
        self.nodes.append(node)
        self.node_names.add(node.name)
        self.log.debug(f"graph '{self.name}': added node '{node.name}' ({node.op_type})")
        return node

    # ---- finalize -----------------------------------------------------------------------
    def finalize(self) -> None:
        func = "graphFinalize"
        if self.finalized:
            # Finalizing twice is harmless and some clients do it; the plan stays.
            self.log.info(f"{func}: graph '{self.name}' is already finalized")
            return
        for t in self.tensors.values():
            if t.type in APP_OUTPUT_TYPES and t.producer is None and t.type not in APP_READWRITE_TYPES:
                fail(Location(func), "QNNEMU-graphFinalize-output-unproduced",
                     f"graph '{self.name}': output tensor '{t.name}' (id {t.id}) is "
                     f"written by no node", code=Q.QNN_GRAPH_ERROR_UNCONNECTED_NODE)
        if not self.nodes:
            fail(Location(func), "QNNEMU-graphFinalize-empty", f"graph '{self.name}' has no nodes",
                 code=Q.QNN_GRAPH_ERROR_FINALIZE_FAILED)
        # The priority must map to HTP thread priorities before anything is built (logged below).
        htp_priority.thread_priorities(self, func)
        htp_settings.check_num_cores(self, func)   # more cores than the SoC has fails here (vendor)
        # Nodes the HTP of the graph's device cannot create (qnnemu/htp/op_support.py).
        arch = device_model(self).arch
        for node in self.nodes:
            op_support.check_finalize(node.op_type, node.params, node.input_specs, node.output_specs, arch,
                                      func, f"graph '{self.name}': node '{node.name}' ({node.op_type})")
        # Native KV cache tensors: the documented graph-level rules; the plan converts their layout.
        self.native_kv = kvcache.check_graph(self, arch)
        self.plan = compile_plan(self)   # float16 or float32 math: plan.float_math
        self.plan.engine = build_engine(self.plan, self)   # its C program (qnnemu/core/engine)
        # The HTP device model's view of the graph: runlist, VTCM blocks and offsets, spill/fill.
        self.htp_plan = self.recorded_htp_plan or htp_prepare.prepare_graph(self)
        self.spill_fill_bytes = self.htp_plan.spill_fill_buffer_bytes
        self.finalized = True
        self.log.info(f"{func}: graph '{self.name}' finalized: {len(self.nodes)} nodes, "
                      f"{len(self.tensors)} tensors")
        self._note_priority(func)

    def _note_priority(self, func: str) -> None:
        """Resolves the graph priority to HMX/HVX thread priorities (qnnemu/htp/priority.py) and
        logs them at INFO when they differ from what was logged last: at finalize, and at the
        first execute after a graphSetConfig/contextSetConfig changed them (not every execute)."""
        ctx = self.context
        key = (self.configs.get("priority"), ctx.configs.get("priority") if ctx is not None else None)
        if key == self._priority_key:   # the execute hot path: nothing changed
            return
        prio = htp_priority.thread_priorities(self, func)
        self._priority_key = key
        if prio != self.thread_priorities:
            self.thread_priorities = prio
            self.log.info(htp_priority.describe(self, func))

    # ---- updates (QnnTensor_updateGraphTensors/updateContextTensors, applyBinarySection) ----
    def prepare_update(self, tensor_ids, func: str, paths: dict[int, str]):
        """What new data/quantization of ``tensor_ids`` (already set on the Tensor objects)
        changes in this graph, checked and built but not installed; returns ``commit()``, which
        installs it (no-op when no node of this graph touches them).

        Each touching node's op rules run again on the new values (a value the node would have
        refused at graphAddNode -- an out-of-range Gather index, a quantization the op cannot
        take -- is refused now, rule QNNEMU-tensorUpdate-node-check); then the finalized plan's
        affected steps are recompiled (``plan.refresh_plan``).  ``paths`` names each updated
        tensor's argument for messages."""
        positions = nodes_touching(self, tensor_ids)
        if not positions:
            return lambda: None
        specs = {}
        for k in positions:
            node = self.nodes[k]
            ins = [self._node_tensor(i).spec() if i is not None else None for i in node.inputs]
            outs = [self._node_tensor(i).spec() for i in node.outputs]
            try:
                node.op_cls.check(_op_inputs(ins), node.raw_params, declared_outputs=outs)
            except (OpCheckError, OpUnsupportedError) as e:
                touched = [paths[i] for i in (*node.inputs, *node.outputs) if i in paths]
                raise node_check_error(func, node, sorted(set(touched)), e) from None
            specs[k] = (ins, outs)
        plan = None
        if self.finalized:
            before = {k: (self.nodes[k].input_specs, self.nodes[k].output_specs) for k in positions}
            try:   # the ops are built from the nodes' specs: compile with the new ones
                for k, (ins, outs) in specs.items():
                    self.nodes[k].input_specs, self.nodes[k].output_specs = ins, outs
                plan = refresh_plan(self.plan, self, tensor_ids)
                plan.engine = build_engine(plan, self)
            finally:
                for k, (ins, outs) in before.items():
                    self.nodes[k].input_specs, self.nodes[k].output_specs = ins, outs

        def commit() -> None:
            for k, (ins, outs) in specs.items():
                self.nodes[k].input_specs, self.nodes[k].output_specs = ins, outs
            if plan is not None:
                self.plan = plan   # one assignment: an execute runs on the old or the new plan
            self.log.debug(f"{func}: graph '{self.name}': {len(positions)} node(s) refreshed for updated "
                           f"tensor(s) {sorted(set(tensor_ids) & set(paths))}")
        return commit

    def precision_fp16(self) -> bool:
        """QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION = QNN_PRECISION_FLOAT16 was configured (the
        vendor's backend ignores it: plan.float_math decides the math)."""
        cfg = self.configs.get("htp", {}).get("QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION")
        return isinstance(cfg, dict) and cfg.get("precision") == Q.QNN_PRECISION_FLOAT16

    # ---- execute ------------------------------------------------------------------------
    def app_inputs(self) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.type in APP_INPUT_TYPES]

    def app_outputs(self) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.type in APP_OUTPUT_TYPES]

    def match_io(self, tensor_id: int, name_of, func: str, path: str, allowed) -> Tensor:
        """The graph tensor an execute argument refers to: by id, falling back to its name.

        ``name_of()`` gives the argument's name; it is only called when the id does not match,
        so the common case does not decode strings on every execute.
        """
        t = self.tensors.get(tensor_id) if tensor_id else None
        name = None
        if t is None:
            name = name_of()
            tid = self.by_name.get(name) if name else None
            t = self.tensors.get(tid) if tid is not None else None
        if t is None:
            fail(Location(func).field(path), "QNNEMU-graphExecute-tensor-unknown",
                 f"no tensor with id {tensor_id} or name '{name}' in graph "
                 f"'{self.name}'", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        if t.type not in allowed:
            fail(Location(func).field(path), "QNNEMU-graphExecute-tensor-type",
                 f"tensor '{t.name}' is {type_name(t.type)}; expected "
                 f"{' or '.join(type_name(a) for a in allowed)}", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        return t

    def batch_multiple(self, t: Tensor, rank: int, dims: list[int] | None, func: str, path: str) -> int:
        """Variable batch (QNN HTP backend documentation, "QNN HTP Variable Batch"): the n of an
        execute argument whose dimensions are ``[n*b, ...]`` for tensor ``t`` prepared as
        ``[b, ...]``.  ``dims`` is None when ``rank`` differs from the prepared rank (the caller
        then does not read them)."""
        if dims is not None and tuple(dims) == t.dims:
            return 1
        prepared = list(t.dims)
        if dims is not None and len(prepared) >= 1 and list(dims[1:]) == prepared[1:] \
                and dims[0] > 0 and dims[0] % prepared[0] == 0:
            return dims[0] // prepared[0]
        got = f"rank {rank}" if dims is None else f"dimensions {list(dims)}"
        fail(Location(func).field(path), "QNNEMU-graphExecute-batch-dims",
             f"tensor '{t.name}' was prepared with dimensions {prepared}; got {got}. "
             f"Only the first (batch) dimension may differ at execute, as a positive multiple n*b of "
             f"the prepared b = {prepared[0] if prepared else 'none (rank 0)'}", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)

    def execute(self, feeds: dict[int, np.ndarray], wanted: list[int], observer=None,
                batch: int = 1) -> dict[int, np.ndarray]:
        """Runs the plan; ``feeds`` maps input tensor ids to arrays of their declared shape.

        ``observer(step, seconds)``, when given, is called after each node (profiling).

        Variable batch (QNN HTP backend documentation, "QNN HTP Variable Batch"): with ``batch`` =
        n > 1 every feed is ``[n*b, ...]`` for its declared ``[b, ...]`` (the ABI layer checked that
        all inputs and outputs share n); the plan runs once per batch on the k-th ``b`` rows
        (contiguous views, no copies) and each output is the concatenation of the n results -- what
        n separate executes return."""
        if not self.finalized:
            fail(Location("graphExecute"), "QNNEMU-graphExecute-not-finalized",
                 f"graph '{self.name}' is not finalized (call graphFinalize first)",
                 code=Q.QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED)
        missing = [t.name for t in self.app_inputs() if t.id not in feeds and t.producer is None]
        if missing:
            fail(Location("graphExecute").path("inputs"), "QNNEMU-graphExecute-input-missing",
                 f"graph '{self.name}' input(s) {missing} not given", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        self._note_priority("graphExecute")
        assert self.plan is not None   # (finalized: checked above)
        with self.lock, scheduling.executing(self, batch):
            if batch == 1:
                out = self.plan.run(feeds, wanted, observer)
            else:
                out = self._run_batches(feeds, wanted, observer, batch)
            self.executions += 1
        return out

    def _run_batches(self, feeds, wanted, observer, batch: int) -> dict[int, np.ndarray]:
        rows = {tid: self.tensors[tid].dims[0] for tid in feeds}
        for tid, arr in feeds.items():
            if arr.shape[:1] != (rows[tid] * batch,):
                raise ValueError(f"graph '{self.name}': batched input '{self.tensors[tid].name}' has shape "
                                 f"{arr.shape}, expected {batch} x {rows[tid]} rows")
        parts: dict[int, list[np.ndarray]] = {tid: [] for tid in wanted}
        plan = self.plan   # one plan for all batches (an update swaps plans between executes)
        assert plan is not None   # (execute runs finalized graphs only)
        for k in range(batch):
            chunk = {tid: arr[k * rows[tid]:(k + 1) * rows[tid]] for tid, arr in feeds.items()}
            for tid, value in plan.run(chunk, wanted, observer).items():
                parts[tid].append(np.asarray(value))
        return {tid: np.concatenate(values, axis=0) for tid, values in parts.items()}
