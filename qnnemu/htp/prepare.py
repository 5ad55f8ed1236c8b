"""The HTP prepare pipeline at graphFinalize (seed 000 "Scheduling and Allocation").

``prepare_graph(graph) -> PreparedPlan``.  This first version only lists the graph's nodes in
order as the runlist; block registration, pre-scheduling, spill/fill insertion, launch/wait
splitting, VTCM offset allocation and re-scheduling replace it (issue 5)."""
from __future__ import annotations

from .plan_types import PreparedPlan, Step
from .settings import device_model, graph_settings


def prepare_graph(graph) -> PreparedPlan:
    model = device_model(graph)
    settings = graph_settings(graph)
    plan = PreparedPlan(graph=graph.name, soc_model=model.soc_model, arch=model.arch,
                        vtcm_budget_bytes=settings.vtcm_bytes)
    plan.prescheduled_order = list(range(len(graph.nodes)))
    plan.steps = [Step(index=i, kind="op", name=n.name, op_type=n.op_type, node_index=i)
                  for i, n in enumerate(graph.nodes)]
    plan.passes.append(f"runlist: {len(plan.steps)} ops in graph order (no VTCM planning yet)")
    return plan
