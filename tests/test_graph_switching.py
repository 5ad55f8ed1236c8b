"""Graph switching and multi-graph retention (qnnemu/htp/switching.py; QNN HTP backend
documentation, "Graph Switching (Beta)", "Multi-Graph Switching (Beta)", "Multiple cDSP
Sessions"): low-memory mode loads only the first enabled graph, an execute of an unloaded graph
switches, the retention order preloads and evicts by priority -- the documentation's cases 1-3
(graphs A-D of equal size, two fit a session) give its load/unload sequences -- through the real
C ABI, with the profile, the virtual clock, the C fast path, the rules, the tools and the
vendor's answers to the same configs."""
from __future__ import annotations

import json
import subprocess
import sys
import threading

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.context_env import OK, Env
from helpers.profile_env import data as event_data, events as profile_events
from vendor import vendor_env, vendor_library

from qnnemu.core import faults
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import runtime as rt, switching

pytestmark = pytest.mark.skipif(not abi.library_available(), reason="libQnnHtpEmu.so not built")

GRAPHS = ("A", "B", "C", "D")
X = np.arange(4, dtype=np.float32).reshape(1, 4) / 4


@pytest.fixture
def env():
    faults.clear()
    previous = rt.use_sessions(None)
    e = Env()
    try:
        yield e
    finally:
        e.close()
        rt.use_sessions(previous)


def sized_graph(env: Env, ctx: int, name: str, units: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """x[1,4] -> FullyConnected(w[units,4], b[units]) -> y[1,units]; returns (w, b)."""
    w = rng.standard_normal((units, 4)).astype(np.float32)
    b = rng.standard_normal(units).astype(np.float32)
    code, g = abi.create("graphCreate", vp(ctx), abi.cstr(name, env.keep), NULL)
    assert code == OK, f"setup: graphCreate {name}"
    x = env.create_tensor(g, abi.tensor("x", (1, 4)))
    wt = env.create_tensor(g, abi.static_tensor("w", w))
    bt = env.create_tensor(g, abi.static_tensor("b", b))
    y = env.create_tensor(g, abi.tensor("y", (1, units), type_=Q.QNN_TENSOR_TYPE_APP_READ))
    op = abi.op_config("fc", "FullyConnected", [x, wt, bt], [y])
    env.keep.append(op)
    assert abi.call("graphAddNode", vp(g), op) == OK, f"setup: graphAddNode {name}"
    assert abi.call("graphFinalize", vp(g), NULL, NULL) == OK, f"setup: graphFinalize {name}"
    return w, b


def binary(env: Env, units: dict[str, int] | None = None) -> tuple[bytes, dict]:
    """A context binary with graphs A-D (3 output units each unless ``units`` says otherwise:
    equal sizes, 128 bytes of own weights each); (bytes, name -> (w, b))."""
    units = units or dict.fromkeys(GRAPHS, 3)
    ctx = env.context()
    rng = np.random.default_rng(7)
    weights = {name: sized_graph(env, ctx, name, n, rng) for name, n in units.items()}
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    env.rec.clear()
    return blob, weights


def run(env: Env, g: int, units: int = 3, profile=NULL) -> tuple[int, np.ndarray]:
    inp = abi.tensor("x", (1, 4))
    out = abi.tensor("y", (1, units), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    y = np.zeros((1, units), np.float32)
    abi.set_buffer(inp, X.copy())
    abi.set_buffer(out, y)
    code = abi.call("graphExecute", vp(g), abi.tensor_array([inp], env.keep), 1,
                    abi.tensor_array([out], env.keep), 1, vp(profile), NULL)
    return code, y


def expected(weights, name: str) -> np.ndarray:
    w, b = weights[name]
    return X @ w.T + b


def names(env: Env, items: list[str]):
    return abi.null_terminated("char", [abi.cstr(n, env.keep) for n in items], env.keep)


def configs(env: Env, *, persistent: int | None = 1, hint: int | None = 1, enable=None, retention=None, extra=()):
    entries = []
    if persistent is not None:
        entries.append({"option": Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY, "isPersistentBinary": persistent})
    if hint is not None:
        entries.append({"option": Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT, "memoryLimitHint": hint})
    if enable is not None:
        entries.append({"option": Q.QNN_CONTEXT_CONFIG_ENABLE_GRAPHS, "enableGraphs": names(env, enable)})
    if retention is not None:
        entries.append({"option": Q.QNN_CONTEXT_CONFIG_GRAPH_RETENTION_ORDER,
                        "graphRetentionOrder": names(env, retention)})
    return env.context_configs(*entries, *extra)


def two_fit_sessions(blob: bytes, graph_bytes: int = 128, graphs: int = 4) -> rt.SessionPool:
    """Sessions in which the binary's resident part and two graphs fit, three do not."""
    base = len(blob) - graphs * graph_bytes
    target = base + 2 * graph_bytes + graph_bytes // 2
    pool = rt.SessionPool(va_bytes=-(-target * 16 // 15), limit=4)
    assert base + 2 * graph_bytes <= pool.usable < base + 3 * graph_bytes, "setup: two graphs fit, three do not"
    rt.use_sessions(pool)
    return pool


def load(env: Env, blob: bytes, cfg) -> tuple[int, object]:
    code, ctx = env.load(blob, configs=cfg)
    assert code == OK, f"contextCreateFromBinary returned {code}: {env.rec.errors()[-3:]}"
    return ctx, HANDLES.lookup(ctx)


def execute_in_order(env: Env, ctx: int, order, weights) -> None:
    handles = {}
    for name in order:
        handles.setdefault(name, env.retrieve(ctx, name))
        code, y = run(env, handles[name])
        assert code == OK, f"graphExecute of {name} returned {code}: {env.rec.errors()[-3:]}"
        np.testing.assert_allclose(y, expected(weights, name), rtol=1e-2, atol=1e-2,
                                   err_msg=f"graph {name} computes its own weights after switching")


# ----------------------------------------------------------------------- the policy, pure
# "Example: Multi-Graph Switching with Retention Order": graphs A-D of equal size, retention
# [A, B], two graphs fit.  Each case: execution order -> the loads/unloads after deserialization
# and the graphs loaded at the end.  Case 3's step 5 loads B and unloads C (C is "a candidate to
# be unloaded" at "the next graph switching"); its step 6 then unloads B (the least important
# retained graph) to load D, ending with A and D loaded as the documentation says.  (The
# documentation's text of step 6 names C as the graph unloaded there, which step 5 left loaded
# only if three graphs fit.)
CASES = {
    "case1": ("ABAB", [], ["A", "B"]),
    "case2": ("ABCD", [("unload", "B"), ("load", "C"), ("unload", "C"), ("load", "D")], ["A", "D"]),
    "case3": ("ABCABD", [("unload", "B"), ("load", "C"), ("unload", "C"), ("load", "B"),
                         ("unload", "B"), ("load", "D")], ["A", "D"]),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("unit", [rt.GIB * 3 // 2, 128], ids=["1.5GB-graphs", "128B-graphs"])
def test_retention_cases_pure(case, unit):
    order, after_load, resident = CASES[case]
    switcher = switching.GraphSwitcher(mode=switching.MULTI, enabled=list(GRAPHS), sizes=dict.fromkeys(GRAPHS, unit),
                                       retention=["A", "B"], binary_bytes=4 * unit, soc=_soc())
    # a 4 GB session (3.75 usable) holds two 1.5 GB graphs, not three; scaled for the small ones
    pool = rt.SessionPool(va_bytes=4 * rt.GIB if unit > 1 << 20 else (5 * unit) * 16 // 15 // 2 + 16, limit=4)
    assert 2 * unit <= pool.usable < 3 * unit, "setup: two graphs fit a session, three do not"
    assert switcher.place(pool, "ctx") == 0, "deserialized into session #0"
    assert switcher.sequence() == [("load", "A"), ("load", "B")], "the retention list is preloaded"
    for name in order:
        switcher.ensure_loaded(name)
    assert switcher.sequence()[2:] == after_load, f"{case}: execution order {order}"
    assert sorted(switcher.loaded) == resident, f"{case}: graphs loaded at the end"
    assert pool.sessions[0].contexts["ctx"] == 2 * unit, "the session holds the loaded graphs only"


def _soc():
    from qnnemu.htp.device_model import DeviceModel
    return DeviceModel().soc


def test_traditional_switching_plan_pure():
    switcher = switching.GraphSwitcher(mode=switching.TRADITIONAL, enabled=["B", "A"], sizes={"A": 10, "B": 30},
                                       retention=[], binary_bytes=100, soc=_soc())
    assert switcher.initial() == ["B"], "only the first enabled graph loads at deserialization"
    switcher.loaded = ["B"]
    assert switcher.plan_switch("A", 0) == ["B"], "the loaded graph is unloaded for the next"
    assert switcher.plan_switch("A", 1000) == ["B"], "...even when both would fit (one graph at a time)"
    assert switcher.footprint() == (100 - 40) + 30, "resident part (binary minus every graph) plus the loaded graph"


def test_plan_switch_refuses_when_nothing_helps():
    switcher = switching.GraphSwitcher(mode=switching.MULTI, enabled=["A", "B"], sizes={"A": 10, "B": 50},
                                       retention=["A"], binary_bytes=60, soc=_soc())
    switcher.loaded = ["A"]
    assert switcher.plan_switch("B", 30) is None, "B needs 50: 30 free plus A's 10 is not enough"
    assert switcher.plan_switch("B", 40) == ["A"], "40 free plus A's 10 is: A goes"
    assert switcher.plan_switch("B", 50) == [], "enough room: the retained A stays"


def test_requested_modes():
    assert switching.mode_of({"persistentBinary": True, "memoryLimitHintMb": 1}) == switching.TRADITIONAL
    assert switching.mode_of({"persistentBinary": True, "memoryLimitHintMb": 1,
                              "graphRetentionOrder": ["A"]}) == switching.MULTI
    assert switching.mode_of({"persistentBinary": True, "memoryLimitHintMb": 1,
                              "graphRetentionOrder": []}) == switching.TRADITIONAL, \
        "an empty retention order is traditional switching"
    assert switching.mode_of({"persistentBinary": False, "memoryLimitHintMb": 1}) is None, "needs PERSISTENT_BINARY"
    assert switching.mode_of({"persistentBinary": True, "memoryLimitHintMb": 0}) is None, "needs a hint above 0"
    assert switching.requested({"graphRetentionOrder": ["A"]}), "a retention order asks for switching"


# ----------------------------------------------------------------------- through the C ABI
def test_traditional_switching_loads_one_graph_at_a_time(env):
    blob, weights = binary(env)
    ctx, core = load(env, blob, configs(env))
    switcher = core.switching
    assert switcher is not None and switcher.mode == switching.TRADITIONAL, \
        "PERSISTENT_BINARY + hint 1: low-memory mode"
    assert switcher.sizes == dict.fromkeys(GRAPHS, 128), "a graph's size is its own weights in the binary (64-padded)"
    assert switcher.sequence() == [("load", "A")], "only the binary's first graph is loaded at deserialization"
    pool = core.session_pool
    assert pool.sessions[core.session].contexts[core] == len(blob) - 3 * 128, \
        "the session holds the binary minus the three unloaded graphs"
    execute_in_order(env, ctx, "BBAD", weights)
    assert switcher.sequence()[1:] == [("unload", "A"), ("load", "B"), ("unload", "B"), ("load", "A"),
                                       ("unload", "A"), ("load", "D")], "each switch unloads the loaded graph"
    assert switcher.loaded == ["D"], "one graph loaded"
    assert any("graph switching" in m and "load graph 'D'" in m for lv, m in env.rec.records
               if lv == Q.QNN_LOG_LEVEL_INFO), "switches are logged at INFO"
    env.free_context(ctx)
    assert switcher.events[-1].kind == "unload" and switcher.events[-1].reason == "free", "contextFree unloads"


def test_enable_graphs_order_chooses_the_first_loaded(env):
    blob, weights = binary(env)
    ctx, core = load(env, blob, configs(env, enable=["C", "A"]))
    assert core.switching.sequence() == [("load", "C")], "the first of ENABLE_GRAPHS is loaded"
    assert core.switching.enabled == ["C", "A"], "only the enabled graphs take part"
    execute_in_order(env, ctx, "AC", weights)
    assert core.switching.sequence()[1:] == [("unload", "C"), ("load", "A"), ("unload", "A"), ("load", "C")]
    env.free_context(ctx)


@pytest.mark.parametrize("case", CASES)
def test_retention_cases_through_the_abi(env, case):
    order, after_load, resident = CASES[case]
    blob, weights = binary(env)
    two_fit_sessions(blob)
    ctx, core = load(env, blob, configs(env, retention=["A", "B"]))
    switcher = core.switching
    assert switcher.mode == switching.MULTI, "a retention order: multi-graph switching"
    assert switcher.sequence() == [("load", "A"), ("load", "B")], "A and B fit: both preloaded"
    execute_in_order(env, ctx, order, weights)
    assert switcher.sequence()[2:] == after_load, f"{case}: the loads/unloads of execution order {order}"
    assert sorted(switcher.loaded) == resident, f"{case}: graphs loaded at the end"
    env.free_context(ctx)


def _execute_us(graph_handle) -> float:
    """The last execute's span on the device's virtual clock (qnnemu/core/scheduling.py)."""
    s = HANDLES.lookup(abi.hval(graph_handle)).last_schedule
    return s.virtual_end_us - s.virtual_start_us


def test_first_run_after_a_switch_is_slower_and_profiled(env):
    blob, weights = binary(env)
    ctx, core = load(env, blob, configs(env))
    out = ffi.new("Qnn_ProfileHandle_t *")
    assert abi.call("profileCreate", vp(env.be), Q.QNN_PROFILE_LEVEL_BASIC, out) == OK, "setup: profileCreate"
    prof = abi.hval(out[0])
    clock = rt.runtime_for(core.switching.soc)
    g = env.retrieve(ctx, "B")
    before = clock.now
    code, y = run(env, g, profile=prof)
    assert code == OK, "graphExecute of the unloaded B"
    took = switching.load_us(128, core.switching.soc.arch)
    run_us = _execute_us(g)
    assert clock.now - before == pytest.approx(took + run_us), \
        "the load advances the device's virtual clock (and then the execute its modelled time)"
    assert took > switching.GRAPH_LOAD_SETUP_US, "the load costs its set-up plus the weights' DMA"
    rows = [event_data(e) for e in profile_events(prof)]
    switch_rows = [r for r in rows if r[3] and r[3].startswith("Graph switching")]
    assert switch_rows == [(Q.QNN_PROFILE_EVENTTYPE_BACKEND, Q.QNN_PROFILE_EVENTUNIT_MICROSEC, round(took),
                            "Graph switching: load of 'B'; unloaded 'A'")], f"the switch is in the profile: {rows}"
    assert core.switching.events[-1].cost_us == pytest.approx(took), "the log records the load time"
    before = clock.now
    code, _ = run(env, g, profile=prof)
    assert code == OK and clock.now == pytest.approx(before + _execute_us(g)), \
        "the second run of B switches nothing (the clock moves by the execute alone)"
    assert not [r for r in map(event_data, profile_events(prof)) if r[3] and r[3].startswith("Graph switching")], \
        "...and its profile has no switching event"
    assert abi.call("profileFree", vp(prof)) == OK
    env.free_context(ctx)


def test_switching_graphs_never_run_concurrently_nor_on_the_fast_path(env, monkeypatch):
    from qnnemu.abi import fast_execute
    from qnnemu.core.graph import Graph
    blob, weights = binary(env)
    ctx, core = load(env, blob, configs(env))
    running, peak, lock = [0], [0], threading.Lock()
    original = Graph.execute

    def spy(self, *args, **kwargs):
        if self.context is core:
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            try:
                return original(self, *args, **kwargs)
            finally:
                with lock:
                    running[0] -= 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Graph, "execute", spy)
    handles = {n: env.retrieve(ctx, n) for n in ("A", "C")}
    failures = []

    def worker(name):
        for _ in range(8):
            code, y = run(env, handles[name])
            if code != OK or not np.allclose(y, expected(weights, name), rtol=1e-2, atol=1e-2):
                failures.append((name, code))

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("A", "C", "A")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [], f"every execute succeeded with its graph's result: {failures}"
    assert peak[0] == 1, f"executes of one switching context never overlap (peak {peak[0]})"
    assert fast_execute.registered() == 0, "no graph of a switching context is offered to the C fast path"
    assert len(core.switching.loaded) == 1, "one graph loaded after all those switches"
    env.free_context(ctx)


def test_fast_path_is_offered_only_outside_low_memory_mode(env):
    from qnnemu.abi import fast_execute
    blob, _ = binary(env)
    for cfg, want in ((NULL, 1), (configs(env), 0)):
        code, ctx = env.load(blob, configs=cfg)
        assert code == OK, "setup: load"
        assert run(env, env.retrieve(ctx, "A"))[0] == OK, "graphExecute"
        assert fast_execute.registered() == want, \
            f"C fast path registered {fast_execute.registered()} (want {want}) after one execute, " \
            f"{'in' if want == 0 else 'outside'} low-memory mode"
        env.free_context(ctx)


def test_a_context_without_low_memory_mode_keeps_every_graph(env):
    blob, weights = binary(env)
    ctx, core = load(env, blob, configs(env, hint=None))   # PERSISTENT_BINARY alone
    assert core.switching is None, "PERSISTENT_BINARY without MEMORY_LIMIT_HINT: no switching"
    assert core.session_pool.sessions[core.session].contexts[core] == len(blob), "the whole binary is resident"
    execute_in_order(env, ctx, "AB", weights)
    env.free_context(ctx)


def test_share_resources_refuses_graph_switching():
    from qnnemu.errors import QnnError
    from qnnemu.htp import settings
    from qnnemu.htp.device_model import DeviceModel
    share = {"htp": {"QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES": {"option": 5, "shareResources": True}}}
    for low_memory in ({"persistentBinary": True, "memoryLimitHintMb": 1}, {"graphRetentionOrder": ["A"]}):
        with pytest.raises(QnnError) as err:
            settings.check_context_options({**share, **low_memory}, func=settings.LIST_CONFIG_FUNC, model=DeviceModel())
        assert err.value.code == Q.QNN_CONTEXT_ERROR_INVALID_CONFIG and "graph switching" in str(err.value), \
            f"SHARE_RESOURCES with {low_memory} is refused as graph switching: {err.value}"
    settings.check_context_options({**share, "memoryLimitHintMb": 64}, func=settings.LIST_CONFIG_FUNC,
                                   model=DeviceModel(soc_model=Q.QNN_SOC_MODEL_SM8550))   # a hint alone: no switching


# ------------------------------------------------------------------------------- rules
def test_rule_retention_order_graph(env):
    blob, _ = binary(env)
    code, _ = env.load(blob, configs=configs(env, enable=["A", "B"], retention=["A", "C"]))
    env.rec.assert_rule(code, Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "QNNEMU-context-retention-order-graph",
                        "contextCreateFromBinary", "graphRetentionOrder")
    assert not HANDLES.lookup(env.be).contexts, "the refused context is freed"


def test_rule_graph_switch_no_room(env):
    blob, weights = binary(env, {"A": 3, "B": 64})            # B: 1024 + 256 bytes of weights
    ctx, core = load(env, blob, configs(env))
    pool, session = core.session_pool, core.session
    pool.place("filler", pool.sessions[session].free - 200)  # another context fills session #0
    g = env.retrieve(ctx, "B")
    env.rec.clear()
    code, _ = run(env, g, units=64)
    env.rec.assert_rule(code, Q.QNN_COMMON_ERROR_MEM_ALLOC, "QNNEMU-graphExecute-graph-switch-no-room",
                        "graphExecute", "graphHandle")
    assert core.switching.loaded == ["A"], "nothing was unloaded for a switch that cannot happen"
    pool.remove("filler")
    code, y = run(env, g, units=64)
    assert code == OK, "with room again the switch happens"
    np.testing.assert_allclose(y, expected(weights, "B"), rtol=1e-2, atol=1e-2)
    env.free_context(ctx)


def test_retention_order_longer_than_fits(env):
    """(The warning itself: tests/test_warning_rules.py.)"""
    blob, weights = binary(env)
    two_fit_sessions(blob)
    code, ctx = env.load(blob, configs=configs(env, retention=["A", "B", "C"]))
    assert code == OK, "a retention order longer than fits is taken"
    core = HANDLES.lookup(ctx)
    assert core.switching.sequence() == [("load", "A"), ("load", "B")], "the two that fit are preloaded"
    execute_in_order(env, ctx, "C", weights)
    assert core.switching.sequence()[2:] == [("unload", "B"), ("load", "C")], \
        "C loads when it executes, evicting the least important retained graph"
    env.free_context(ctx)


# -------------------------------------------------------------------------------- tools
def test_net_run_applies_the_context_configs_keys(env, tmp_path):
    """qnnemu-net-run --retrieve_context with the SDK's outer backend-extension form:
    ``context_configs`` keys is_persistent_binary, memory_limit_hint, enable_graphs and
    graph_retention_order reach contextCreateFromBinary."""
    blob, weights = binary(env)
    (tmp_path / "ctx.bin").write_bytes(blob)
    (tmp_path / "htp.json").write_text("{}")
    (tmp_path / "config.json").write_text(json.dumps({
        "backend_extensions": {"shared_library_path": "libQnnHtpNetRunExtensions.so", "config_file_path": "htp.json"},
        "context_configs": {"is_persistent_binary": True, "memory_limit_hint": 1, "enable_graphs": ["C", "A"],
                            "graph_retention_order": ["C"]}}))
    lines = []
    for name in ("C", "A"):
        path = tmp_path / f"x_{name}.raw"
        X.tofile(path)
        (tmp_path / f"in_{name}.txt").write_text(f"x:={path}\n")
        lines.append(str(tmp_path / f"in_{name}.txt"))
    proc = subprocess.run([sys.executable, "-m", "qnnemu.tools.net_run",
                           "--retrieve_context", str(tmp_path / "ctx.bin"),
                           "--config_file", str(tmp_path / "config.json"), "--input_list", ",".join(lines),
                           "--output_dir", str(tmp_path / "out"), "--log_level", "info"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"qnnemu-net-run failed: {proc.stderr[-2000:]}"
    log = proc.stdout + proc.stderr
    assert "load graph 'C' (128 bytes; deserialize)" in log, f"C, the retained graph, is preloaded: {log[-3000:]}"
    assert "load graph 'A' (128 bytes; switch" in log, "A loads when it executes"
    assert "load graph 'B'" not in log and "load graph 'D'" not in log, "graphs not enabled never load"
    outputs = sorted(p.name for p in (tmp_path / "out").rglob("*.raw"))
    assert len(outputs) == 2, f"one output per enabled graph: {outputs}"


# ------------------------------------------------------------------------------- vendor
VENDOR = vendor_library()
PROBE = r"""
import json, sys
import numpy as np
from qnnemu.client import Backend, QnnCallError
from qnnemu.client.cabi import ffi
from qnnemu.client.configs import GraphConfig
from qnnemu.headers import Q

path = sys.argv[1] if sys.argv[1] != "ours" else None
be = Backend(path, log_level=None)
out = {"property": {k: int(be.fn.propertyHasCapability(getattr(Q, f"QNN_PROPERTY_CONTEXT_SUPPORT_CONFIG_{k}")))
                    for k in ("MEMORY_LIMIT_HINT", "PERSISTENT_BINARY", "ENABLE_GRAPHS")}}
ctx = be.context()
for i, n in enumerate("AB"):
    g = ctx.graph(n)
    x = g.input("x", (1, 8), np.float32)
    g.node("ElementWiseAdd", [x, g.static("w", np.full((1, 8), i + 1, np.float32))],
           outputs=[("y", (1, 8), np.float32)], app_read=True)
    g.finalize()
blob = ctx.get_binary()
ctx.free()
keep = []

def plain(option, **fields):
    c = ffi.new("QnnContext_Config_t *")
    c.option = option
    for k, v in fields.items():
        setattr(c, k, v)
    return GraphConfig(c, [])

def name_list(items):
    ptrs = [ffi.new("char[]", s.encode()) for s in items]
    keep.extend(ptrs)
    arr = ffi.new("char*[]", ptrs + [ffi.NULL])
    keep.append(arr)
    return arr

cases = {
    "PERSISTENT_BINARY 1": [plain(Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY, isPersistentBinary=1)],
    "PERSISTENT_BINARY 0": [plain(Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY, isPersistentBinary=0)],
    "MEMORY_LIMIT_HINT 1": [plain(Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT, memoryLimitHint=1)],
    "PERSISTENT_BINARY 1 + MEMORY_LIMIT_HINT 1": [
        plain(Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY, isPersistentBinary=1),
        plain(Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT, memoryLimitHint=1)],
    "GRAPH_RETENTION_ORDER [A]": [plain(Q.QNN_CONTEXT_CONFIG_GRAPH_RETENTION_ORDER,
                                        graphRetentionOrder=name_list(["A"]))],
    "ENABLE_GRAPHS [B]": [plain(Q.QNN_CONTEXT_CONFIG_ENABLE_GRAPHS, enableGraphs=name_list(["B"]))],
}
out["load"] = {}
for label, cfgs in cases.items():
    try:
        c = be.context_from_binary(blob, cfgs)
    except QnnCallError as e:
        out["load"][label] = e.code
        continue
    out["load"][label] = 0
    c.free()
    be._contexts.remove(c)
be.free()
print("RESULT " + json.dumps(out))
"""


def probe(which: str) -> dict:
    env = vendor_env() if which != "ours" else None
    if env is not None:
        env["PYTHONPATH"] = ":".join(sys.path)
    proc = subprocess.run([sys.executable, "-c", PROBE, str(VENDOR) if which == "vendor" else "ours"],
                          env=env, capture_output=True, text=True, timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, f"{which} probe printed no result: {proc.stdout[-1500:]} {proc.stderr[-1500:]}"
    return json.loads(line[-1][len("RESULT "):])


# The vendor's x86-64 libQnnHtp.so answers SUPPORTED to the capability but refuses the low-memory
# configs at load ("Persistent Binary is not supported", "Memory Limit Hint is not supported",
# "Graph Retention Order is not supported": QNN_COMMON_ERROR_NOT_SUPPORTED) -- even with value 0;
# the device backend the documentation describes takes them.  qnnemu emulates the device.
REFUSED = Q.QNN_COMMON_ERROR_NOT_SUPPORTED
VENDOR_LOAD = {"PERSISTENT_BINARY 1": REFUSED, "PERSISTENT_BINARY 0": REFUSED, "MEMORY_LIMIT_HINT 1": REFUSED,
               "PERSISTENT_BINARY 1 + MEMORY_LIMIT_HINT 1": REFUSED, "GRAPH_RETENTION_ORDER [A]": REFUSED,
               "ENABLE_GRAPHS [B]": OK}


@pytest.mark.skipif(VENDOR is None, reason="onnxruntime_qnn (vendor libQnnHtp.so) not installed")
def test_vendor_answers_to_the_low_memory_configs():
    vendor, ours = probe("vendor"), probe("ours")
    supported = dict.fromkeys(("MEMORY_LIMIT_HINT", "PERSISTENT_BINARY", "ENABLE_GRAPHS"), Q.QNN_PROPERTY_SUPPORTED)
    assert vendor["property"] == supported, f"the vendor claims the capabilities: {vendor['property']}"
    assert ours["property"] == supported, f"qnnemu answers the same: {ours['property']}"
    assert vendor["load"] == VENDOR_LOAD, f"the vendor's x86 build refuses the low-memory configs: {vendor['load']}"
    assert ours["load"] == dict.fromkeys(VENDOR_LOAD, OK), \
        f"qnnemu takes them, as the device backend does (a documented divergence): {ours['load']}"
