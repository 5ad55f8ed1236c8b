"""QnnGraph.h QnnGraph_validate (QNN 2.50): what graphAddNode and graphFinalize would say about
every node of a graph, without finalizing it (docs/abi-compat.md, "graphValidate").

Per node (one verdict each, in graph order):
1. the op rules graphAddNode applied (``check_op`` on the node's recorded specs and params) and
   what the HTP of the graph's device takes (qnnemu/htp/op_support.py: graphAddNode's and
   graphFinalize's op-support checks);
2. the node's VTCM working set against the graph's budget (qnnemu/htp/prepare.py, the check
   graphFinalize makes for the first node only; here for every node).
A node that fails either is UNSUPPORTED with that rule's code and message (the message carries
the rule id, as graphAddNode / graphFinalize would log it).

The overall status is the code graphFinalize would return: ``Graph.finalize`` is run on a
shallow copy of the graph (finalize builds new objects -- the plan, the prepared plan, the KV
table -- and mutates neither nodes nor tensors), so graph-level rules (an output no node writes,
an empty graph, the priority, native KV caches) count too; when finalize would succeed, the first
UNSUPPORTED node's code, else QNN_SUCCESS.  The real graph is left exactly as it was.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

from ..errors import QnnError
from ..headers import Q
from ..htp import op_support, prepare as htp_prepare
from ..htp.settings import device_model
from .graph import Graph, OpConfigDesc, check_op
from .log import Logger


@dataclass
class NodeVerdict:
    name: str
    supported: bool
    code: int = Q.QNN_SUCCESS
    message: str = ""              # "" when supported


@dataclass
class GraphVerdict:
    nodes: list[NodeVerdict]
    overall: int
    finalize_error: QnnError | None = None   # what graphFinalize would raise, if anything


def _op_rules(graph: Graph, node) -> QnnError | None:
    """graphAddNode's op rules, again, on what the node recorded when it was added, then what
    the HTP of the graph's device takes at graphAddNode and graphFinalize (op_support.py)."""
    cfg = OpConfigDesc(1, node.name, node.package, node.op_type, [], [], [])
    arch = device_model(graph).arch
    where = f"graph '{graph.name}': node '{node.name}' ({node.op_type})"
    try:
        check_op(cfg, list(node.input_specs), dict(node.raw_params), list(node.output_specs),
                 "graphAddNode", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG)
        op_support.check_add(node.op_type, node.params, node.input_specs, node.output_specs, arch,
                             "graphAddNode", where)
        op_support.check_finalize(node.op_type, node.params, node.input_specs, node.output_specs, arch,
                                  "graphFinalize", where)
    except QnnError as err:
        return err
    return None


class _Silent(Logger):
    """The trial finalize's log: its "finalized" lines would be misleading anywhere."""

    def __init__(self):
        super().__init__(None, Q.QNN_LOG_LEVEL_ERROR)

    def emit(self, level: int, message: str) -> None:
        pass


def _dry_finalize(graph: Graph) -> QnnError | None:
    trial = copy.copy(graph)
    trial.log = _Silent()
    trial.finalized = False
    trial.plan = trial.htp_plan = None
    try:
        Graph.finalize(trial)
    except QnnError as err:
        return err
    return None


def validate_graph(graph: Graph) -> GraphVerdict:
    """The verdict on every node of ``graph`` and the code graphFinalize would return."""
    analysis_error = None
    try:
        memory = htp_prepare.working_set_errors(graph) if graph.nodes else {}
    except QnnError as err:       # a graph-level failure of the analysis itself: reported overall
        memory, analysis_error = {}, err
    verdicts = []
    for node in graph.nodes:
        problem = _op_rules(graph, node) or memory.get(node.name)
        verdicts.append(NodeVerdict(node.name, True) if problem is None else
                        NodeVerdict(node.name, False, problem.code, str(problem)))
    finalize_error = _dry_finalize(graph) or analysis_error
    if finalize_error is not None:
        overall = finalize_error.code
    else:
        overall = next((v.code for v in verdicts if not v.supported), Q.QNN_SUCCESS)
    return GraphVerdict(verdicts, overall, finalize_error)
