"""Graph switching and multi-graph retention of a context loaded from a binary (QNN HTP backend
documentation, "Graph Switching (Beta)", "Multi-Graph Switching (Beta)"; the address space is a
cDSP session's: "Multiple cDSP Sessions", "Model Loading Across Multiple Sessions").

A context loaded with ``QNN_CONTEXT_CONFIG_PERSISTENT_BINARY`` and a non-zero
``QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT`` is in low-memory mode ("any non-zero value will enable
graph switching"; the value itself changes nothing).  Then:

* **traditional switching** (no ``QNN_CONTEXT_CONFIG_GRAPH_RETENTION_ORDER``): only the first
  enabled graph is loaded at deserialization (the first of ``ENABLE_GRAPHS``, else the binary's
  first graph); executing another graph unloads the loaded one and loads it;
* **multi-graph switching** (a non-empty retention order): the listed graphs are preloaded at
  deserialization when they fit the session together; executing a graph that is not loaded
  first unloads every loaded graph outside the retention list ("graphs not in the retention list
  and not currently executing will be unloaded during switching"), then, while the graph does
  not fit, the loaded retained graph lowest in the list ("starting with the least important");
  a retained graph that was unloaded is loaded again when it executes.

The size a graph takes in its session is what the context binary records for it: the bytes of
its own weights in the data section (every blob only this graph uses, padded to 64 bytes as
stored, ``graph_own_bytes``).  The rest of the binary (header, metadata, context tensors,
weights several graphs share) stays resident while the context lives.  A fully loaded context
therefore takes its binary size, as every other loaded context does (qnnemu/htp/runtime.py
``SessionPool``).

Unloading is a model: the graph's handle, tensors and prepared plan stay in host memory (graph
handles stay valid, as on the device where the persistent binary is kept to reload from), while
the session's address space, the event log and the virtual clock change.  Loading a graph costs
``load_us`` (its weights copied by DMA at the voted bus clock plus a fixed set-up) on the device's
virtual clock (``HtpRuntime.advance``); the execute that switched reports it in its profile.
Executes of one switching context never overlap ("does not support concurrent graph execution
between the switching graphs"): ``GraphSwitcher.lock`` is held from the switch to the end of the
execute.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .. import rules
from ..headers import Q
from ..location import Location
from ..rules import fail
from . import cost, perf
from .runtime import SessionError, SessionPool, runtime_for
from .soc import SocInfo

_LOG = logging.getLogger("qnnemu.switching")

BLOB_ALIGN = 64                 # blobs start at multiples of 64 bytes (docs/context-binary.md)
# The emulator's set-up of a graph load besides copying its weights (registering the graph,
# rebuilding its runlist); microseconds.
GRAPH_LOAD_SETUP_US = 150.0

TRADITIONAL, MULTI = "traditional", "multi"


def graph_own_bytes(info) -> dict[str, int]:
    """Bytes of a binary (a ``BinaryInfo``) that belong to each graph, every graph of the binary
    in its order: its blobs no other graph and no context tensor uses, padded to 64 bytes."""
    users: dict[int, set[str]] = {}
    for t in info.context_tensors:
        if t.blob is not None:
            users.setdefault(t.blob, set()).add("")
    for g in info.graphs:
        for t in g.tensors:
            if t.blob is not None:
                users.setdefault(t.blob, set()).add(g.name)
    own = {g.name: 0 for g in info.graphs}
    for blob, names in users.items():
        if len(names) == 1 and "" not in names:
            (name,) = names
            own[name] += -(-info.blobs[blob].size // BLOB_ALIGN) * BLOB_ALIGN
    return own


def mode_of(configs: dict) -> str | None:
    """TRADITIONAL, MULTI or None (no graph switching) for a context's load-time configs."""
    if not (configs.get("persistentBinary") and int(configs.get("memoryLimitHintMb") or 0) > 0):
        return None
    return MULTI if configs.get("graphRetentionOrder") else TRADITIONAL


def requested(configs: dict) -> bool:
    """Whether the configs ask for graph switching (refused with SHARE_RESOURCES)."""
    return mode_of(configs) is not None or bool(configs.get("graphRetentionOrder"))


def load_us(nbytes: int, arch: int) -> float:
    """Virtual microseconds loading a graph of ``nbytes`` takes: a fixed set-up plus its weights
    copied by DMA at the voted bus clock (qnnemu/htp/cost.py)."""
    clocks = perf.current_clocks(arch=arch)
    return GRAPH_LOAD_SETUP_US + cost.cycles_to_us(cost.dma_copy_cycles(int(nbytes)), clocks, "DMA")


@dataclass(frozen=True)
class SwitchEvent:
    """One entry of a context's load/unload log."""

    kind: str          # "load" or "unload"
    graph: str
    reason: str        # "deserialize", "switch" (for the execute of ``by``), "free"
    by: str | None     # the graph whose execute switched
    at_us: float       # the device's virtual clock when it happened
    cost_us: float     # virtual time the load took (0 for an unload)


@dataclass(frozen=True)
class Switch:
    """What one switch did before an execute: graphs unloaded (in order), the graph loaded,
    and the virtual time the load took."""

    graph: str
    unloaded: tuple[str, ...]
    cost_us: float


class GraphSwitcher:
    """The loaded/unloaded state of the graphs of one context in low-memory mode."""

    def __init__(self, *, mode: str, enabled: list[str], sizes: dict[str, int], retention: list[str],
                 binary_bytes: int, soc: SocInfo, context_label: str = "context"):
        self.mode = mode
        self.enabled = list(enabled)
        self.sizes = {n: int(sizes.get(n, 0)) for n in self.enabled}
        self.retention = list(dict.fromkeys(retention))          # duplicates: the first counts
        self.base_bytes = max(0, int(binary_bytes) - sum(int(v) for v in sizes.values()))
        self.soc = soc
        self.label = context_label
        self.loaded: list[str] = []                               # in load order
        self.events: list[SwitchEvent] = []
        self.not_preloaded: list[str] = []
        self.lock = threading.RLock()
        self.pool: SessionPool | None = None
        self.key: object = None
        self.logger: Any = None        # the context's QnnLog logger (info/debug)

    # ---- sizes -------------------------------------------------------------------------
    def footprint(self, loaded: list[str] | None = None) -> int:
        """Bytes the context takes in its session with ``loaded`` (default: the loaded graphs)."""
        names = self.loaded if loaded is None else loaded
        return self.base_bytes + sum(self.sizes[n] for n in names)

    def initial(self) -> list[str]:
        """Graphs loaded at deserialization: the retention order (multi), else the first enabled."""
        if self.mode == MULTI:
            return list(self.retention)
        return self.enabled[:1]

    # ---- deserialization ---------------------------------------------------------------
    def place(self, pool: SessionPool, key, io_reserve: int = 0) -> int:
        """Deserializes the context into the first session with room for what loads now;
        returns the session index (raises SessionError when not even the first graph fits).
        Retained graphs that cannot all be preloaded into one session: the longest leading part
        of the list that fits is (``not_preloaded`` names the rest)."""
        initial = self.initial()
        error: SessionError | None = None
        for count in range(len(initial), 0, -1):
            try:
                index = pool.place(key, self.footprint(initial[:count]), io_reserve)
            except SessionError as exc:
                error = error or exc
                continue
            self.pool, self.key = pool, key
            self.not_preloaded = initial[count:]
            for name in initial[:count]:
                self.loaded.append(name)
                self._record("load", name, "deserialize", None, 0.0)
            return index
        raise error if error is not None else SessionError("context", "the context has no graph to load")

    # ---- executes ------------------------------------------------------------------------
    def plan_switch(self, name: str, free_bytes: int) -> list[str] | None:
        """The graphs to unload (in order) so that ``name`` fits, given ``free_bytes`` free in the
        session now; None when it cannot fit even with every other graph unloaded.  Pure."""
        unload = [g for g in self.loaded if g != name and g not in self.retention]
        remaining = [g for g in self.loaded if g not in unload]
        room = free_bytes + sum(self.sizes[g] for g in unload)
        by_priority = sorted((g for g in remaining if g != name), key=self.retention.index, reverse=True)
        for victim in by_priority:
            if room >= self.sizes[name]:
                break
            unload.append(victim)
            room += self.sizes[victim]
        return unload if room >= self.sizes[name] else None

    def ensure_loaded(self, name: str, func: str = "graphExecute") -> Switch | None:
        """Loads graph ``name`` before it executes (None: it already is).  Raises the rule
        QNNEMU-graphExecute-graph-switch-no-room when the session cannot hold it even with every
        other graph of the context unloaded (nothing is unloaded then)."""
        with self.lock:
            if name in self.loaded or name not in self.sizes:
                return None
            assert self.pool is not None, "a switching context is placed at load"
            pool = self.pool
            with pool._lock:     # one decision against the session's current free space
                index = pool.where[self.key]
                session = pool.sessions[index]
                unload = self.plan_switch(name, session.free)
                if unload is None:
                    fail(Location(func).path("graphHandle"), "QNNEMU-graphExecute-graph-switch-no-room",
                         f"graph switching cannot load graph '{name}' ({self.sizes[name]} bytes): cDSP "
                         f"session #{index} has {session.free} bytes free and the context's other loaded "
                         f"graphs {[g for g in self.loaded if g != name]} give back "
                         f"{sum(self.sizes[g] for g in self.loaded if g != name)}", code=Q.QNN_COMMON_ERROR_MEM_ALLOC)
                after = [g for g in self.loaded if g not in unload] + [name]
                session.contexts[self.key] = self.footprint(after)
            _withdraw_fast_paths()   # the C fast path must never run a graph that is unloaded
            for g in unload:
                self.loaded.remove(g)
                self._record("unload", g, "switch", name, 0.0)
            took = load_us(self.sizes[name], self.soc.arch)
            runtime_for(self.soc).advance(took)        # the first run after a switch is slower
            self.loaded.append(name)
            self._record("load", name, "switch", name, took)
            return Switch(name, tuple(unload), took)

    def close(self) -> None:
        """contextFree: every loaded graph is unloaded (the session entry goes with the context)."""
        with self.lock:
            for g in list(self.loaded):
                self._record("unload", g, "free", None, 0.0)
            self.loaded.clear()

    # ---- log -------------------------------------------------------------------------------
    def _record(self, kind: str, graph: str, reason: str, by: str | None, took: float) -> None:
        now = runtime_for(self.soc).now
        self.events.append(SwitchEvent(kind, graph, reason, by, now, took))
        text = (f"graph switching: {self.label}: {kind} graph '{graph}' ({self.sizes.get(graph, 0)} bytes; "
                f"{reason}{f' for {by!r}' if by and by != graph else ''}{f', {took:.1f} us' if took else ''}); "
                f"loaded now: {self.loaded}")
        target = self.logger
        if target is not None:
            (target.debug if reason == "free" else target.info)(text)
        _LOG.debug("%s", text)

    def sequence(self, reasons: tuple[str, ...] = ("deserialize", "switch")) -> list[tuple[str, str]]:
        """(kind, graph) of the log, without the unloads of contextFree by default."""
        return [(e.kind, e.graph) for e in self.events if e.reason in reasons]


def _withdraw_fast_paths() -> None:
    """Withdraws graphExecute's C fast-path descriptors (qnnemu/abi/fast_execute.py) before a
    graph is unloaded.  Looked up lazily: this layer does not import the ABI layer, and the
    module is absent when qnnemu runs without its C library."""
    import sys
    module = sys.modules.get("qnnemu.abi.fast_execute")
    if module is not None:
        module.clear()


# ------------------------------------------------------------------------ set-up and execute
def setup(ctx, binary_bytes: int, func: str, soc: SocInfo) -> GraphSwitcher | None:
    """The switcher of a context just deserialized (``ctx.configs``: its load-time configs,
    ``ctx.binary_graph_bytes``: its binary's graphs and their own bytes), or None when the
    context is not in low-memory mode.  Logs the warning rules of configs that do not enable
    what they name and refuses a retention order naming a graph that is not enabled."""
    configs = ctx.configs or {}
    sizes = getattr(ctx, "binary_graph_bytes", None)
    if sizes is None:
        return None
    mode = mode_of(configs)
    retention = list(configs.get("graphRetentionOrder") or [])
    hint = int(configs.get("memoryLimitHintMb") or 0)
    if mode is None:
        if hint > 0:
            rules.warn("QNNEMU-context-graph-switching-not-persistent", func, "config[].memoryLimitHint",
                       f"{hint}: graph switching needs QNN_CONTEXT_CONFIG_PERSISTENT_BINARY as well "
                       "(\"is_persistent_binary is required\"); every enabled graph is loaded")
        if retention:
            rules.warn("QNNEMU-context-retention-order-ignored", func, "config[].graphRetentionOrder",
                       f"{retention}: a graph retention order takes effect only in low-memory mode "
                       "(PERSISTENT_BINARY and a MEMORY_LIMIT_HINT above 0); every enabled graph is loaded")
        return None
    enabled = list(configs.get("enableGraphs") or [n for n in sizes if n in ctx.graphs or _deferred(ctx, n)])
    unknown = [n for n in retention if n not in enabled]
    if unknown:
        fail(Location(func).path("config[].graphRetentionOrder"), "QNNEMU-context-retention-order-graph",
             f"{unknown} {'is' if len(unknown) == 1 else 'are'} not enabled graph(s) of the binary (enabled: "
             f"{enabled}); retained graphs are loaded at deserialization and must be enabled",
             code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
    return GraphSwitcher(mode=mode, enabled=enabled, sizes=sizes, retention=retention,
                         binary_bytes=binary_bytes, soc=soc, context_label=f"context 0x{int(ctx.handle or 0):x}")


def _deferred(ctx, name: str) -> bool:
    deferred = getattr(ctx, "deferred", None)
    return deferred is not None and name in deferred.pending


def warn_not_preloaded(switcher: GraphSwitcher, func: str) -> None:
    if switcher.not_preloaded:
        rules.warn("QNNEMU-context-retention-not-preloaded", func, "config[].graphRetentionOrder",
                   f"{switcher.not_preloaded} do not fit one cDSP session together with the graphs before them "
                   f"({switcher.footprint(switcher.initial())} bytes with every retained graph); "
                   f"{switcher.loaded} are preloaded, the others load when they execute")


@contextlib.contextmanager
def resident(graph, recorder=None) -> Iterator[Switch | None]:
    """graphExecute's hook: around the execute of ``graph``, holds its context's switching lock
    (executes of one switching context never overlap) and first loads the graph if it is not
    loaded, reporting the load in the execute's profile (``recorder``, a CallRecorder).  A
    graph of any other context passes straight through."""
    switcher = getattr(getattr(graph, "context", None), "switching", None)
    if switcher is None:
        yield None
        return
    with switcher.lock:
        done = switcher.ensure_loaded(graph.name)
        if done is not None and recorder is not None:
            unloaded = f"; unloaded {', '.join(repr(g) for g in done.unloaded)}" if done.unloaded else ""
            recorder.add_backend_event(f"Graph switching: load of '{done.graph}'{unloaded}", round(done.cost_us))
        yield done


def runs_in_python(graph) -> bool:
    """A graph of a switching context always executes through the Python entry: the C fast path
    of graphExecute would bypass both the lazy load and the switching lock."""
    return getattr(getattr(graph, "context", None), "switching", None) is not None
