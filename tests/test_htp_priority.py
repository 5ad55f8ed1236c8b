"""Graph priority -> HMX / HVX thread priorities (QNN HTP backend documentation, "Graph Priority",
QNN "HTP Yielding and Pre-Emption"; qnnemu/htp/priority.py), through the C ABI: the graph config
QNN_GRAPH_CONFIG_OPTION_PRIORITY, the context config QNN_CONTEXT_CONFIG_OPTION_PRIORITY, the
default, changes by graphSetConfig / contextSetConfig, the INFO log at finalize and execute.
"""
from __future__ import annotations

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.batch_env import Env

from qnnemu.core.handles import HANDLES
from qnnemu.errors import QnnError
from qnnemu.headers import Q
from qnnemu.htp import priority

pytestmark = pytest.mark.usefixtures("qnn_abi")

# The documentation's tables, typed from the documents (not from the module under test):
# Qnn_Priority_t -> (HMX thread priority, HVX thread priority) (QNN HTP backend documentation,
# "QNN to HTP Thread Priority Mapping") and the Hexagon OS thread priority (QNN "HTP Yielding
# and Pre-Emption", "QNN HTP Priority Mapping").
SEED_002_THREADS = {
    Q.QNN_PRIORITY_LOW: (0xC5, 0xC6),
    Q.QNN_PRIORITY_NORMAL: (0xC0, 0xC1),
    Q.QNN_PRIORITY_NORMAL_HIGH: (0xBD, 0xBE),
    Q.QNN_PRIORITY_HIGH: (0xBB, 0xBC),
}
SEED_001_HEXAGON_OS = {
    Q.QNN_PRIORITY_LOW: 0xC5,
    Q.QNN_PRIORITY_NORMAL: 0xC0,
    Q.QNN_PRIORITY_NORMAL_HIGH: 0xBD,
    Q.QNN_PRIORITY_HIGH: 0xBB,
}


def graph_configs(value: int, keep: list):
    c = ffi.new("QnnGraph_Config_t *")
    c.option = Q.QNN_GRAPH_CONFIG_OPTION_PRIORITY
    c.priority = value
    keep.append(c)
    return abi.null_terminated("QnnGraph_Config_t", [c], keep)


def context_configs(value: int, keep: list):
    c = ffi.new("QnnContext_Config_t *")
    c.option = Q.QNN_CONTEXT_CONFIG_OPTION_PRIORITY
    c.priority = value
    keep.append(c)
    return abi.null_terminated("QnnContext_Config_t", [c], keep)


def relu_graph(env: Env, name: str, configs=NULL, ctx: int | None = None) -> tuple[int, abi.Struct, abi.Struct]:
    g = env.graph(name, configs, ctx)
    x = env.tensor(g, "x", (1, 4))
    y = env.tensor(g, "y", (1, 4), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    env.node(g, "relu", "Relu", [x], [y])
    return g, x, y


def priority_lines(env: Env) -> list[str]:
    return [m for lv, m in env.rec.records if lv == Q.QNN_LOG_LEVEL_INFO and "HMX thread priority" in m]


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def test_priority_table_matches_the_seed_tables():
    assert set(priority.PRIORITY_TABLE) == set(SEED_002_THREADS), "one row per documented Qnn_Priority_t level"
    for value, (hmx, hvx) in SEED_002_THREADS.items():
        row = priority.PRIORITY_TABLE[value]
        assert (row.hmx_thread_priority, row.hvx_thread_priority) == (hmx, hvx), \
            f"{row.name}: row of the QNN to HTP Thread Priority Mapping"
        assert row.hvx_thread_priority == row.hmx_thread_priority + priority.HVX_PRIORITY_OFFSET, \
            f"{row.name}: HMX gets Y, HVX gets Y + 1"
        assert row.hexagon_os_priority == SEED_001_HEXAGON_OS[value], \
            f"{row.name}: Hexagon OS priority of the QNN HTP Priority Mapping"
        assert row.value == value and row.name.startswith("QNN_PRIORITY_"), f"{row.name}: keyed by its value"
    assert priority.PRIORITY_TABLE[Q.QNN_PRIORITY_DEFAULT] is priority.PRIORITY_TABLE[Q.QNN_PRIORITY_NORMAL], \
        "QNN_PRIORITY_DEFAULT is NORMAL (100)"
    assert [v for v, r in priority.PRIORITY_TABLE.items() if r.restricted] == \
        [Q.QNN_PRIORITY_NORMAL_HIGH, Q.QNN_PRIORITY_HIGH], "NORMAL_HIGH and HIGH are the restricted levels"
    # a higher QNN level is a numerically lower (stronger) thread priority
    ordered = [priority.PRIORITY_TABLE[v].hmx_thread_priority for v in sorted(priority.PRIORITY_TABLE)]
    assert ordered == sorted(ordered, reverse=True), "higher priority level -> lower thread priority number"


@pytest.mark.parametrize("value", sorted(SEED_002_THREADS))
def test_graph_priority_config_row(env, value):
    keep: list = []
    g, x, y = relu_graph(env, "g", graph_configs(value, keep))
    env.rec.clear()
    assert env.finalize(g) == Q.QNN_SUCCESS, f"finalize: {env.rec.errors()}"
    graph = HANDLES.lookup(g)
    hmx, hvx = SEED_002_THREADS[value]
    assert priority.thread_priorities(graph) == (hmx, hvx), f"priority {value}: (HMX, HVX) from the documented table"
    assert graph.thread_priorities == (hmx, hvx), "finalize records the thread priorities on the graph"
    lines = priority_lines(env)
    assert len(lines) == 1 and f"0x{hmx:x}" in lines[0] and f"0x{hvx:x}" in lines[0] \
        and "graphFinalize" in lines[0] and priority.PRIORITY_TABLE[value].name in lines[0], \
        f"finalize logs the mapping at INFO: {lines}"
    assert f"Hexagon OS thread priority 0x{SEED_001_HEXAGON_OS[value]:x}" in lines[0], \
        "the Hexagon OS priority of the QNN HTP Priority Mapping is logged"


def test_default_priority_without_configs(env):
    g, x, y = relu_graph(env, "g")
    assert env.finalize(g) == Q.QNN_SUCCESS
    graph = HANDLES.lookup(g)
    assert priority.graph_priority(graph) == (Q.QNN_PRIORITY_DEFAULT, "default"), "no config: QNN_PRIORITY_DEFAULT"
    assert priority.thread_priorities(graph) == (0xC0, 0xC1), "default priority: HMX 0xC0, HVX 0xC1"


def test_context_priority_applies_to_graphs_without_their_own():
    keep: list = []
    env = Env(context_configs(Q.QNN_PRIORITY_HIGH, keep))
    try:
        g, _, _ = relu_graph(env, "inherits")
        own, _, _ = relu_graph(env, "own", graph_configs(Q.QNN_PRIORITY_LOW, keep))
        for h in (g, own):
            assert env.finalize(h) == Q.QNN_SUCCESS, f"finalize: {env.rec.errors()}"
        assert priority.thread_priorities(HANDLES.lookup(g)) == (0xBB, 0xBC), "context HIGH -> (0xBB, 0xBC)"
        assert priority.thread_priorities(HANDLES.lookup(own)) == (0xC5, 0xC6), "the graph's own LOW wins"
    finally:
        env.close()


def test_graph_set_config_changes_priority_logged_once_at_execute(env):
    keep: list = []
    g, x, y = relu_graph(env, "g")
    assert env.finalize(g) == Q.QNN_SUCCESS
    xa = np.ones((1, 4), np.float32)
    env.run(g, [(x, xa)], [(y, (1, 4))])
    env.rec.clear()
    env.run(g, [(x, xa)], [(y, (1, 4))])
    assert priority_lines(env) == [], "an execute with unchanged priority logs nothing (hot path)"
    code = abi.call("graphSetConfig", vp(g), graph_configs(Q.QNN_PRIORITY_LOW, keep))
    assert code == Q.QNN_SUCCESS, f"graphSetConfig(PRIORITY) after finalize: {env.rec.errors()}"
    env.rec.clear()
    for _ in range(3):
        env.run(g, [(x, xa)], [(y, (1, 4))])
    lines = priority_lines(env)
    assert len(lines) == 1 and "graphExecute" in lines[0] and "0xc5" in lines[0] and "0xc6" in lines[0], \
        f"the first execute after the change logs the new thread priorities once: {lines}"
    assert priority.thread_priorities(HANDLES.lookup(g)) == (0xC5, 0xC6), "graphSetConfig LOW -> (0xC5, 0xC6)"


def test_context_set_config_updates_every_graph(env):
    """Documentation: QnnContext_setConfig with PRIORITY updates all graph priorities in the
    context, including graphs created with their own priority."""
    keep: list = []
    g, _, _ = relu_graph(env, "plain")
    own, _, _ = relu_graph(env, "own", graph_configs(Q.QNN_PRIORITY_LOW, keep))
    code = abi.call("contextSetConfig", vp(env.ctx), context_configs(Q.QNN_PRIORITY_NORMAL_HIGH, keep))
    assert code == Q.QNN_SUCCESS, f"contextSetConfig(PRIORITY): {env.rec.errors()}"
    for h in (g, own):
        assert priority.thread_priorities(HANDLES.lookup(h)) == (0xBD, 0xBE), \
            "contextSetConfig NORMAL_HIGH -> (0xBD, 0xBE) for every graph of the context"


def test_graph_priority_falls_back_to_the_context_config():
    """A graph whose configs carry no priority (e.g. built before graphCreate copied the context's)
    runs with its context's, else the default."""
    from types import SimpleNamespace as NS
    ctx = NS(configs={"priority": Q.QNN_PRIORITY_NORMAL_HIGH})
    assert priority.graph_priority(NS(name="g", configs={}, context=ctx)) == \
        (Q.QNN_PRIORITY_NORMAL_HIGH, "context config QNN_CONTEXT_CONFIG_OPTION_PRIORITY"), "context fallback"
    assert priority.thread_priorities(NS(name="g", configs={}, context=ctx)) == (0xBD, 0xBE), "context row"
    assert priority.graph_priority(NS(name="g", configs={"priority": 0}, context=ctx))[0] == 0, "the graph's own wins"
    assert priority.graph_priority(NS(name="g", configs={}, context=None)) == (Q.QNN_PRIORITY_DEFAULT, "default"), \
        "no context: the default"


def test_undefined_priority_is_the_default():
    assert priority.priority_level(Q.QNN_PRIORITY_UNDEFINED, "f", "p").value == Q.QNN_PRIORITY_DEFAULT, \
        "QNN_PRIORITY_UNDEFINED means not set: the default level"


def test_rule_priority_value_core_level():
    """QNNEMU-priority-value: a recorded priority with no HTP thread priority (graphCreate /
    contextCreate refuse such values first, so the core's guard is tested directly)."""
    from qnnemu.core.graph import Graph

    class Ctx:
        configs: dict = {}
    graph = Graph(Ctx(), "g")
    graph.configs["priority"] = 723   # outside 0..500
    with pytest.raises(QnnError) as info:
        graph._note_priority("graphExecute")
    err = info.value
    assert err.code == Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "priority-value: error code"
    assert err.rule == "QNNEMU-priority-value", "priority-value: rule id"
    assert "graphExecute" in str(err) and "graph 'g': priority" in str(err) and "723" in str(err), \
        f"priority-value: message names the function, the graph's priority and the value: {err}"
