"""LoRA weight sharing at execute time (QNN HTP backend documentation, "QNN HTP Context Config
Options", QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED): "the shared lora memory
contains only the updatable weights relevant to a single lora graph. To update the contents of
the lora memory, users must call the QnnContext_applyBinarySection API after deserialization
and before execution. Additionally, for graph switching scenarios, the HTP backend will always
re-apply the cached binary section blob prior to execution."  docs/lora.md.

A context shares its LoRA memory when it was created (contextCreate) or configured
(contextSetConfig) with ``loraWeightSharingEnabled = true``, or loaded from a binary prepared that
way (the binary's record, qnnemu/core/binary/lora.py; an older binary loaded with the config
does not share: "Old serialized binaries will still work without the lora weight sharing
feature").  In such a context (``LoraState``):

* every graph is blocked from executing until a binary section carrying weights
  (QNN_CONTEXT_SECTION_UPDATABLE or _UPDATABLE_WEIGHTS) was applied to it -- as the vendor's
  libQnnHtp.so 2.51 blocks every graph of such a context, updatable weights or not, with
  QNN_GRAPH_ERROR_INVALID_ARGUMENT ("no corresponding lora adapter been applied for this graph"),
  and a tensorUpdateGraphTensors does not unblock it (probed, tests/test_lora_weight_sharing.py);
  rule QNNEMU-graphExecute-lora-not-applied;
* the backend keeps the section last applied to each graph (the "cached binary section blob");
  the shared memory holds one graph's weights at a time (``resident``).  Executing a graph whose
  weights are not resident -- another graph's section was applied since, or graph switching
  loads the graph again -- first re-applies its cached section (logged, counted in
  ``reapplies``, its DMA copy ``reapply_us`` on the device's virtual clock), so a graph always
  computes with the adapter last applied *to it*.

The emulator keeps every graph's tensor values apart, so a re-apply changes no value; it is the
bookkeeping (and the log) of what the device does.  A graph on graphExecute's C fast path skips
this module, so a re-apply withdraws the fast paths: the next execute of another graph comes
back through the Python entry, which re-applies its section.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field

from ..headers import Q
from ..location import Location
from ..rules import fail
from . import cost, perf
from .device_model import DeviceModel
from .runtime import runtime_for

OPTION = "QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED"
MEMBER = "loraWeightSharingEnabled"


def enabled(configs) -> bool:
    """LORA_WEIGHT_SHARING_ENABLED with ``loraWeightSharingEnabled = true`` in a context's configs."""
    htp = configs.get("htp") if isinstance(configs, dict) else None
    value = htp.get(OPTION) if isinstance(htp, dict) else None
    if isinstance(value, dict):
        value = value.get(MEMBER)
    return bool(value)


@dataclass
class LoraState:
    """The LoRA memory of one context: which graphs had a section applied (and its size), whose
    weights the shared memory holds, how often a cached section was re-applied."""
    shared_bytes: int | None = None           # the binary's shared blob (None: an online context)
    applied: dict[str, int] = field(default_factory=dict)   # graph -> bytes of its cached section
    resident: str | None = None
    reapplies: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


def state(context) -> LoraState | None:
    """``context``'s LoRA state, or None when it does not share LoRA memory.  The loader sets
    ``context.lora_binary`` (the binary's record, or False for a binary prepared without the
    feature); an online context follows its configs."""
    if context is None:
        return None
    st = getattr(context, "lora", None)
    if st is not None:
        return st
    record = getattr(context, "lora_binary", None)
    if record is False or (record is None and not enabled(getattr(context, "configs", None) or {})):
        return None
    st = LoraState(shared_bytes=int(record.get("size", 0)) if isinstance(record, dict) else None)
    context.lora = st
    return st


def note_applied(context, weights: dict[str, int], carries_weights: bool) -> None:
    """contextApplyBinarySection installed a section for the graphs of ``weights`` (one graph,
    or every graph of the context for a whole-context section; the bytes of weights it holds for
    each): the section is cached for each, and a one-graph section now fills the shared memory.
    A section without weights (QUANT_PARAMS) fills no LoRA memory."""
    st = state(context)
    if st is None or not carries_weights:
        return
    names = list(weights)
    with st.lock:
        for name in names:
            st.applied[name] = int(weights[name])
        # A whole-context section holds every graph's weights; the shared memory one graph's:
        # the first execute of any graph then restores its own.
        st.resident = names[0] if len(names) == 1 else None


def reapply_us(nbytes: int, arch: int) -> float:
    """Virtual microseconds a re-apply takes: the section's weights copied into the shared LoRA
    memory by DMA at the voted bus clock (qnnemu/htp/cost.py, as a graph switch's load)."""
    return cost.cycles_to_us(cost.dma_copy_cycles(int(nbytes)), perf.current_clocks(arch=arch), "DMA")


def check_execute(graph, func: str = "graphExecute") -> None:
    """graphExecute's hook (via qnnemu/htp/settings.py ``check_execute_allowed``): refuses a
    graph no section was applied to; re-applies the cached section of a graph whose weights are
    not in the shared memory."""
    context = getattr(graph, "context", None)
    st = state(context)
    if st is None:
        return
    with st.lock:
        if graph.name not in st.applied:
            fail(Location(func).path("graphHandle"), "QNNEMU-graphExecute-lora-not-applied",
                 f"graph '{graph.name}' belongs to a context with "
                 f"QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED: its LoRA weights live in "
                 f"memory shared by the context's graphs, filled by contextApplyBinarySection -- apply a "
                 f"QNN_CONTEXT_SECTION_UPDATABLE or _UPDATABLE_WEIGHTS section to this graph (or to the "
                 f"whole context) after loading it and before executing it"
                 f"{'; sections were applied to ' + str(sorted(st.applied)) if st.applied else ''}",
                 code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
        switcher = getattr(context, "switching", None)
        switched_in = switcher is not None and graph.name not in getattr(switcher, "loaded", [graph.name])
        if st.resident == graph.name and not switched_in:
            return
        st.reapplies += 1
        previous, st.resident = st.resident, graph.name
    why = ("graph switching loads it" if switched_in else
           f"the shared LoRA memory held graph '{previous}'s weights" if previous else
           "a whole-context section was applied last")
    device = getattr(context, "device", None)
    model = getattr(device, "model", None) if device is not None else None
    model = model if isinstance(model, DeviceModel) else DeviceModel()
    took = reapply_us(st.applied[graph.name], model.arch)
    runtime_for(model.soc).advance(took)   # on the device's virtual clock, before the execute
    log = getattr(context, "log", None)
    if log is not None:
        log.info(f"{func}: LoRA weight sharing: re-applied the cached binary section of graph "
                 f"'{graph.name}' ({st.applied[graph.name]} bytes of weights, {took:.2f} us modelled) before "
                 f"its execute ({why})")
    _withdraw_fast_paths()


def _withdraw_fast_paths() -> None:
    """Withdraws graphExecute's C fast paths (they skip ``check_execute``); looked up lazily: this
    layer does not import the ABI layer (as qnnemu/htp/switching.py does)."""
    module = sys.modules.get("qnnemu.abi.fast_execute")
    if module is not None:
        module.clear()
