"""HTP graph and context custom configs (QNN HTP backend documentation, "QNN HTP Backend API": the
QnnHtpGraph_CustomConfig_t and QnnHtpContext_CustomConfig_t tables, DLBC, HVX threads, SLC
allocator, byte-granularity VTCM, graph priority), context groups sharing a spill-fill buffer
and QnnHtpContext_CustomProperty_t.  The tables of qnnemu/htp/settings.py are walked row by row;
every rule has one negative case in RULE_CASES (code, rule id, function, parameter path)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import abi
import numpy as np
import pytest
from abi import NULL, vp
from helpers.graph_env import H

from qnnemu.core.device import DeviceModel, model_for
from qnnemu.core.handles import HANDLES
from qnnemu.errors import QnnError
from qnnemu.headers import Q
from qnnemu.htp import groups, settings, soc as socs

pytestmark = pytest.mark.usefixtures("qnn_abi")
OK = Q.QNN_SUCCESS
MIB = 1 << 20
OPT = "QNN_HTP_GRAPH_OPTIMIZATION_TYPE_"


@pytest.fixture
def env():
    e = H()
    yield e
    e.close()


def graph_of(handle: int):
    return HANDLES.lookup(handle)


def opt(type_name: str, value: float):
    return dict(optimizationOption=(getattr(Q, OPT + type_name), value))


# ------------------------------------------------------------------------- graph option table
# A valid value for each option of the documentation's table and what graph_settings must then
# report.
GRAPH_ROWS = {
    "OPTIMIZATION": (opt("FINALIZE_OPTIMIZATION_FLAG", 3), {"optimization_level": 3}),
    "PRECISION": (dict(precision=Q.QNN_PRECISION_FLOAT16), {"precision_fp16": True}),
    "VTCM_SIZE_IN_MB": (dict(vtcmSizeInMB=2), {"vtcm_bytes": 2 * MIB, "vtcm_source": "VTCM_SIZE_IN_MB"}),
    "VTCM_SIZE": (dict(vtcmSizeInMB=1), {"vtcm_bytes": 1 * MIB}),
    "FOLD_RELU_ACTIVATION_INTO_CONV_OFF": (dict(foldReluActivationIntoConvOff=True), {"fold_relu_into_conv": False}),
    "SHORT_DEPTH_CONV_ON_HMX_OFF": (dict(shortDepthConvOnHmxOff=True), {"short_depth_conv_on_hmx": False}),
    "NUM_HVX_THREADS": (dict(numHvxThreads=3), {"hvx_threads": 3}),
    "WEIGHTS_PACKING": (dict(weightsPacking=True), {"weights_packing": True}),
    "FINALIZE_CONFIG": (dict(finalizeConfig="some_key"), {"finalize_config": (("some_key", 1),)}),
}


def test_graph_table_covers_the_seed():
    seed = {n for n, o in settings.GRAPH_OPTIONS.items() if o.in_seed and n != "VTCM_SIZE_IN_BYTES"}
    assert seed == set(GRAPH_ROWS), "every option of the documented graph table has a row here"


@pytest.mark.parametrize("name", list(GRAPH_ROWS))
def test_graph_option_row(env, name):
    """Accepted at graphCreate with its effect on graph_settings, and graphSetConfig honours the
    option's change window (before finalize / until the first execute)."""
    fields, expect = GRAPH_ROWS[name]
    option = getattr(Q, f"QNN_HTP_GRAPH_CONFIG_OPTION_{name}")
    code, g = env.new_graph(env.ctx, "row", env.graph_custom(option, **fields))
    assert code == OK, f"{name}: graphCreate accepts {fields}: {env.rec.errors()}"
    got = settings.graph_settings(graph_of(g))
    for key, value in expect.items():
        assert getattr(got, key) == value, f"{name}: graph_settings.{key}"
    default = settings.graph_settings(graph_of(env.g))
    assert any(getattr(default, k) != v for k, v in expect.items()), f"{name}: the default differs"
    env.relu(g)
    assert abi.call("graphFinalize", vp(g), NULL, NULL) == OK
    code = env.set_graph(g, env.graph_custom(option, **fields))
    window = settings.change_window(name, {"type": getattr(Q, OPT + "FINALIZE_OPTIMIZATION_FLAG")})
    if window == settings.BEFORE_FINALIZE:
        assert code == Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED, f"{name}: refused after finalize"
    else:
        assert code == OK, f"{name}: may change after finalize ({window})"


def test_graph_defaults_follow_the_seed(env):
    s = settings.graph_settings(graph_of(env.g))
    soc = socs.SOCS[socs.DEFAULT_SOC]
    assert s.vtcm_bytes == 4 * MIB and s.vtcm_source == "default", "default VTCM 4 MB"
    assert s.hvx_threads == soc.hvx_threads, "online prepare: the SoC's HVX threads"
    assert (s.optimization_level, s.precision_fp16, s.dlbc, s.weights_packing) == (2, False, False, False)
    assert s.fold_relu_into_conv and s.short_depth_conv_on_hmx, "relu folded, short-depth conv on HMX"
    assert s.priority == Q.QNN_PRIORITY_DEFAULT and s.num_cores == 1


# FINALIZE_RETRIES is refused (as the vendor does); the QNN 2.50 types are recorded only
# (tests/test_acceptance_vendor.py).
@pytest.mark.parametrize("type_name", [t for t, o in settings.OPTIMIZATION_TYPES.items()
                                       if o.vendor == settings.ACCEPTED
                                       and t not in ("ENABLE_VTCM_RETENTION", "ENABLE_CACHED_WEIGHTS")])
def test_optimization_type_rows_accumulate(env, type_name):
    """Each optimization type is kept next to the others (several OPTIMIZATION configs)."""
    soc = Q.QNN_SOC_MODEL_SM8750   # DLBC and the SLC allocator are supported there
    ctx = env.context(soc)
    value = {"FINALIZE_OPTIMIZATION_FLAG": 1.0, "SCHEDULE_THRESHOLD": 0.5, "FINALIZE_RETRIES": 3.0}.get(type_name, 1.0)
    code, g = env.new_graph(ctx, "o", env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION,
                                                       **opt("FINALIZE_OPTIMIZATION_FLAG", 3)),
                            env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION, **opt(type_name, value)))
    assert code == OK, f"{type_name}={value} accepted: {env.rec.errors()}"
    stored = graph_of(g).configs["htp_optimization"]
    assert stored[type_name] == value, f"{type_name} recorded"
    if type_name != "FINALIZE_OPTIMIZATION_FLAG":
        assert stored["FINALIZE_OPTIMIZATION_FLAG"] == 3.0, "the flag set before is kept"
    s = settings.graph_settings(graph_of(g))
    field = {"ENABLE_DLBC": "dlbc", "ENABLE_DLBC_WEIGHTS": "dlbc_weights", "ENABLE_SLC_ALLOCATOR": "slc_allocator",
             "ENABLE_SPARSE_WEIGHTS_COMPRESSION": "sparse_weights_compression",
             "SCHEDULE_THRESHOLD": "schedule_threshold", "FINALIZE_RETRIES": "finalize_retries",
             "FINALIZE_OPTIMIZATION_FLAG": "optimization_level"}[type_name]
    assert getattr(s, field) == ({"SCHEDULE_THRESHOLD": 0.5, "FINALIZE_RETRIES": 3,
                                  "FINALIZE_OPTIMIZATION_FLAG": 1}.get(type_name, True)), f"graph_settings.{field}"


def test_vtcm_max_and_bytes_on_v81(env):
    ctx = env.context(Q.QNN_SOC_MODEL_SA8797)   # v81, 16 MiB
    code, g = env.new_graph(ctx, "max", env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB,
                                                         vtcmSizeInMB=Q.QNN_HTP_GRAPH_CONFIG_OPTION_MAX))
    assert code == OK, "MAX with a SoC configured"
    assert settings.graph_settings(graph_of(g)).vtcm_bytes == 16 * MIB, "MAX = the SoC's VTCM"
    code, g2 = env.new_graph(ctx, "bytes", env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_BYTES,
                                                            vtcmSizeInBytes=8323072))
    assert code == OK, "the documented 8323072 bytes (127 x 64 KiB) on v81"
    assert settings.graph_settings(graph_of(g2)).vtcm_bytes == 8323072, "byte-granularity budget"
    # MB and byte requests are equal: the last one wins
    assert env.set_graph(g2, env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB, vtcmSizeInMB=3)) == OK
    assert settings.graph_settings(graph_of(g2)).vtcm_bytes == 3 * MIB, "a later MB request replaces bytes"


def test_hvx_threads_change_until_first_execute(env):
    g = env.g
    env.finalized_relu()
    assert env.set_graph(g, env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS, numHvxThreads=2)) == OK
    assert settings.graph_settings(graph_of(g)).hvx_threads == 2, "re-configured after finalize"
    graph_of(g).executions = 1   # as after graphExecute (Graph.execute counts)
    code = env.set_graph(g, env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS, numHvxThreads=1))
    assert code == Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED, "not after the first execute"


def test_slc_forced_off_and_restored_during_inference(env):
    ctx = env.context(Q.QNN_SOC_MODEL_SM8750)
    code, g = env.new_graph(ctx, "slc", env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION,
                                                         **opt("ENABLE_SLC_ALLOCATOR", 1)))
    assert code == OK
    env.relu(g)
    assert abi.call("graphFinalize", vp(g), NULL, NULL) == OK
    for value, on in ((0, False), (1, True)):
        assert env.set_graph(g, env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION,
                                                 **opt("ENABLE_SLC_ALLOCATOR", value))) == OK
        assert settings.graph_settings(graph_of(g)).slc_allocator is on, f"SLC {value} after finalize"


def test_priority_recorded_and_context_priority_updates_graphs(env):
    code, g = env.new_graph(env.ctx, "p", env.graph_priority(Q.QNN_PRIORITY_HIGH))
    assert code == OK and graph_of(g).configs["priority"] == Q.QNN_PRIORITY_HIGH, "graph priority recorded"
    assert env.set_graph(g, env.graph_priority(Q.QNN_PRIORITY_LOW)) == OK
    assert graph_of(g).configs["priority"] == Q.QNN_PRIORITY_LOW, "graphSetConfig changes it"
    cfg = env.lst("QnnContext_Config_t", env.context_priority(Q.QNN_PRIORITY_NORMAL_HIGH))
    assert abi.call("contextSetConfig", vp(env.ctx), cfg) == OK
    assert {graph_of(h).configs["priority"] for h in (g, env.g)} == {Q.QNN_PRIORITY_NORMAL_HIGH}, \
        "contextSetConfig PRIORITY updates every graph of the context"
    code, g3 = env.new_graph(env.ctx, "p3")
    assert graph_of(g3).configs["priority"] == Q.QNN_PRIORITY_NORMAL_HIGH, "a new graph takes the context's"


# ----------------------------------------------------------------------- context option table
CONTEXT_ROWS = {
    "WEIGHT_SHARING_ENABLED": dict(weightSharingEnabled=True),
    "FILE_READ_MEMORY_BUDGET": dict(fileReadMemoryBudgetInMb=25),
    "IO_MEM_ESTIMATION": dict(ioMemEstimation=True),
    "DSP_MEMORY_PROFILING_ENABLED": dict(dspMemoryProfilingEnabled=True),
    "INIT_ACCELERATION": dict(initAcceleration=True),
    "SKIP_VALIDATION_ON_BINARY_SECTION": dict(skipValidationOnBinarySection=True),
    "LORA_WEIGHT_SHARING_ENABLED": dict(loraWeightSharingEnabled=True),
    "PREPARE_ONLY": dict(isPrepareOnly=True),
    "SHARE_RESOURCES_OPTIMIZATION_TYPE": dict(shareResOptType=Q.SEQUENTIAL_WITHOUT_VA_OPTIMIZATION),
    "SHARE_RESOURCES": dict(shareResources=True),
    "REGISTER_MULTI_CONTEXTS": dict(groupRegistration=(0, 1 << 20)),
    "REGISTER_CONCURRENT_RESOURCE_SHARING": dict(concurrentGroupRegistration=(0, 1 << 20)),
}


def test_context_table_covers_the_seed():
    assert {n for n, o in settings.CONTEXT_OPTIONS.items() if o.in_seed} == set(CONTEXT_ROWS), \
        "every option of the documentation's context table has a row here"


@pytest.mark.parametrize("name", list(CONTEXT_ROWS))
def test_context_option_row_at_context_create(env, name):
    """Options acting on any context are recorded by contextCreate; the group options (only with
    contextCreateFromBinary) and SHARE_RESOURCES (only in ListAsync's listConfig) are refused."""
    option = getattr(Q, f"QNN_HTP_CONTEXT_CONFIG_OPTION_{name}")
    code, ctx = abi.create("contextCreate", vp(env.be), NULL,
                           env.lst("QnnContext_Config_t", env.context_custom(option, **CONTEXT_ROWS[name])))
    if code == OK:
        env.extra_contexts.append(ctx)
    apis = settings.CONTEXT_OPTIONS[name].apis
    if name.startswith("REGISTER_") or name == "SHARE_RESOURCES":
        assert code == Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE, f"{name}: refused by contextCreate ({apis})"
    else:
        assert code == OK, f"{name}: accepted by contextCreate: {env.rec.errors()}"
        assert f"QNN_HTP_CONTEXT_CONFIG_OPTION_{name}" in HANDLES.lookup(ctx).configs["htp"], f"{name} recorded"


def test_file_read_budget_is_min_of_file_and_budget():
    cfg = {"htp": {"QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET": {"fileReadMemoryBudgetInMb": 25}}}
    assert settings.file_read_chunk_bytes(cfg, 100 * MIB) == 25 * MIB, "budget below the file size"
    assert settings.file_read_chunk_bytes(cfg, 3 * MIB) == 3 * MIB, "budget above the file size: the file"
    off = {"htp": {"QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET": {"fileReadMemoryBudgetInMb": 0}}}
    assert settings.file_read_chunk_bytes(off, 3 * MIB) == 0, "0 turns the feature off"


def test_prepare_only_context_graph_cannot_execute(env):
    ctx = env.context(configs=env.lst("QnnContext_Config_t", env.context_custom(
        Q.QNN_HTP_CONTEXT_CONFIG_OPTION_PREPARE_ONLY, isPrepareOnly=True)))
    g = env.relu_graph(ctx)
    assert settings.prepare_only(graph_of(g).context), "the context is prepare-only"
    settings.check_execute_allowed(graph_of(env.g))   # an ordinary context: no error
    code = abi.call("graphExecute", vp(g), NULL, 0, NULL, 0, NULL, NULL)
    assert code == Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, f"graphExecute on a PREPARE_ONLY context: {code}"
    msgs = [m for m in env.rec.errors() if "[QNNEMU-graphExecute-prepare-only]" in m]
    assert msgs and "graphExecute" in msgs[-1] and "graphHandle" in msgs[-1], \
        f"the refusal names its rule, the function and the parameter: {env.rec.errors()[-1:]}"


# ------------------------------------------------------------------ groups and properties
def test_multi_context_group_shares_the_first_registration_size(env):
    blob = env.blob = env.binary()
    size = 30081024
    code, first = env.load(blob, env.context_custom(Q.QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS,
                                                    groupRegistration=(0, size)))
    assert code == OK, f"first registration: {env.rec.errors()}"
    code, second = env.load(blob, env.context_custom(Q.QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS,
                                                     groupRegistration=(first, 0)))
    assert code == OK, "later registration with the first context's handle"
    code, third = env.load(blob, env.context_custom(Q.QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS,
                                                    groupRegistration=(first, size * 2)))
    assert code == OK and any("ignored" in m for m in env.rec.messages()), "a later size is logged, ignored"
    prop = Q.QNN_HTP_CONTEXT_GET_PROP_MAX_SPILLFILL_BUFFER_SIZE
    assert [env.property(c, prop) for c in (first, second, third)] == [size] * 3, "one buffer, first size"
    group = groups.group_of(HANDLES.lookup(second))
    assert group.kind == groups.MULTI_CONTEXTS and len(groups.members(group)) == 3, "three members"
    plain = env.load(blob)[1]
    assert env.property(plain, prop) == max(g.spill_fill_bytes
                                            for g in HANDLES.lookup(plain).graphs.values()), \
        "outside a group: the largest graph spill-fill buffer"


def test_concurrent_group_core_level():
    """REGISTER_CONCURRENT_RESOURCE_SHARING on a v81 device (the ABI entries pass the device of
    contextCreateFromBinary once context_api hands it to _context_configs)."""
    v81 = model_for(socs.SOCS[Q.QNN_SOC_MODEL_SM8850])
    out: dict = {}
    settings.check_context_option("REGISTER_CONCURRENT_RESOURCE_SHARING",
                                  {"concurrentGroupRegistration": {"firstGroupHandle": 0, "maxSpillFillBuffer": 4096}},
                                  func="contextCreateFromBinary", path="config[0].customConfig", model=v81, out=out)
    assert out["htp_group"] == {"kind": groups.CONCURRENT, "first": 0, "max_spill_fill": 4096}, "registered"


def test_properties_from_the_plan(env):
    g = env.g
    x = env.tensor("x", (1, 8))
    w = abi.static_tensor("w", np.array([[-8, 7, 0, 1, 2, 3, 4, 5]] * 8, np.int8))
    assert env.create_tensor(w) == OK
    assert settings.weights_buffer_bytes(HANDLES.lookup(env.ctx)) == 64, "64 int8 weights, unpacked"
    graph_of(g).configs.setdefault("htp", {})["QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING"] = {"weightsPacking": True}
    assert env.property(env.ctx, Q.QNN_HTP_CONTEXT_GET_PROP_WEIGHTS_BUFFER_SIZE) == 32, \
        "8-bit weights in the 4-bit range are packed two per byte"
    assert env.property(env.ctx, Q.QNN_HTP_CONTEXT_GET_PROP_BUFFER_START_ALIGNMENT) >= 64, "alignment >= 64"
    del x


# ---------------------------------------------------------------------------- rule cases
@dataclass
class Case:
    rule: str
    code: int
    func: str
    path: str
    trigger: Callable[[H], int]


RULE_CASES: list = []


def case(rule, code, func, path):
    def deco(fn):
        RULE_CASES.append(pytest.param(Case(rule, code, func, path, fn), id=rule))
        return fn
    return deco


GC, CC = "QnnGraph_Config_t", "QnnContext_Config_t"
INV_G, UNS_G, FIN_G = Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, \
    Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED
INV_C, UNS_C = Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE
P0 = "config[0].customConfig"


def _g(e: H, option: str, ctx=None, **fields) -> int:
    return e.new_graph(ctx or e.ctx, "bad", e.graph_custom(getattr(Q, f"QNN_HTP_GRAPH_CONFIG_OPTION_{option}"),
                                                           **fields))[0]


case("QNNEMU-graph-optimization-type", INV_G, "graphCreate", f"{P0}.optimizationOption.type")(
    lambda e: _g(e, "OPTIMIZATION", optimizationOption=(99, 1.0)))
case("QNNEMU-graph-optimization-unsupported", INV_G, "graphCreate", f"{P0}.optimizationOption.type")(
    lambda e: _g(e, "OPTIMIZATION", **opt("FINALIZE_RETRIES", 3)))   # refused with any value (vendor)


@case("QNNEMU-graph-dlbc-weight-sharing", UNS_G, "graphCreate", f"{P0}.optimizationOption.floatValue")
def _(e):
    ctx = e.context(Q.QNN_SOC_MODEL_SM8650, e.lst(CC, e.context_custom(
        Q.QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED, weightSharingEnabled=True)))
    return _g(e, "OPTIMIZATION", ctx, **opt("ENABLE_DLBC_WEIGHTS", 1))


@case("QNNEMU-graph-dlbc-graph-limit", UNS_G, "graphCreate", "config[1].customConfig.optimizationOption.floatValue")
def _(e):
    ctx = e.context(Q.QNN_SOC_MODEL_SM8650)
    both = (e.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION, **opt("ENABLE_DLBC", 1)),
            e.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION, **opt("ENABLE_DLBC_WEIGHTS", 1)))
    for k in range(settings.DLBC_GRAPH_LIMIT_BOTH):
        assert e.new_graph(ctx, f"d{k}", *both)[0] == OK, f"DLBC graph {k} within the limit"
    return e.new_graph(ctx, "one-too-many", *both)[0]


@case("QNNEMU-graph-slc-after-finalize", FIN_G, "graphSetConfig", f"{P0}.optimizationOption.floatValue")
def _(e):
    g = e.relu_graph(e.context(Q.QNN_SOC_MODEL_SM8750))
    return e.set_graph(g, e.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION, **opt("ENABLE_SLC_ALLOCATOR", 1)))


# Tolerated values (HVX threads, VTCM, precision, DLBC/SLC on other SoCs, ...) are warning rules:
# tests/test_warning_rules.py.
case("QNNEMU-graph-vtcm-overflow", INV_G, "graphCreate", f"{P0}.vtcmSizeInMB")(
    lambda e: _g(e, "VTCM_SIZE_IN_MB", vtcmSizeInMB=4096))
case("QNNEMU-graph-option-unsupported", UNS_G, "graphCreate", P0)(
    lambda e: _g(e, "HMX_BOUNDING", hmxBoundingInfo={"targetHmxFreqHz": 1e9, "targetDspCoreFreq": 1e9}))


@case("QNNEMU-graph-num-cores", Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, "graphFinalize", "NUM_CORES")
def _(e):
    code, g = e.new_graph(e.ctx, "cores", e.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_NUM_CORES, numCores=2))
    assert code == OK, "NUM_CORES 2 is accepted at graphCreate (the vendor fails graphFinalize)"
    e.relu(g)
    e.rec.clear()
    return abi.call("graphFinalize", vp(g), NULL, NULL)


case("QNNEMU-graph-finalize-config-key", INV_G, "graphCreate", f"{P0}.finalizeConfig.key")(
    lambda e: _g(e, "FINALIZE_CONFIG", finalizeConfig=None))


@case("QNNEMU-graph-config-after-finalize", FIN_G, "graphSetConfig", P0)
def _(e):
    e.finalized_relu()
    return e.set_graph(e.g, e.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION, precision=Q.QNN_PRECISION_FLOAT16))


@case("QNNEMU-graph-hvx-threads-executed", FIN_G, "graphSetConfig", P0)
def _(e):
    e.finalized_relu()
    graph_of(e.g).executions = 1
    return e.set_graph(e.g, e.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS, numHvxThreads=2))


case("QNNEMU-graph-priority-value", INV_G, "graphCreate", "config[0].priority")(
    lambda e: e.new_graph(e.ctx, "bad", e.graph_priority(600))[0])   # the vendor takes 0..500
case("QNNEMU-context-priority-value", INV_C, "contextSetConfig", "config[0].priority")(
    lambda e: abi.call("contextSetConfig", vp(e.ctx), e.lst(CC, e.context_priority(600))))
case("QNNEMU-context-share-resources-api", UNS_C, "contextCreate", f"{P0}.shareResources")(
    lambda e: abi.create("contextCreate", vp(e.be), NULL, e.lst(CC, e.context_custom(
        Q.QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES, shareResources=True)))[0])
case("QNNEMU-context-share-resources-type", INV_C, "contextCreate", f"{P0}.shareResOptType")(
    lambda e: abi.create("contextCreate", vp(e.be), NULL, e.lst(CC, e.context_custom(
        Q.QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES_OPTIMIZATION_TYPE, shareResOptType=9)))[0])
case("QNNEMU-context-group-api", UNS_C, "contextCreate", P0)(
    lambda e: abi.create("contextCreate", vp(e.be), NULL, e.lst(CC, e.context_custom(
        Q.QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS, groupRegistration=(0, 4096))))[0])
case("QNNEMU-context-group-size", INV_C, "contextCreateFromBinary", f"{P0}.groupRegistration.maxSpillFillBuffer")(
    lambda e: e.load(e.binary(), e.context_custom(Q.QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS,
                                                  groupRegistration=(0, 0)))[0])
case("QNNEMU-context-group-first", INV_C, "contextCreateFromBinary", f"{P0}.groupRegistration.firstGroupHandle")(
    lambda e: e.load(e.binary(), e.context_custom(Q.QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS,
                                                  groupRegistration=(e.ctx, 0)))[0])
case("QNNEMU-context-group-concurrent-arch", UNS_C, "contextCreateFromBinary", P0)(
    lambda e: e.load(e.binary(), e.context_custom(
        Q.QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_CONCURRENT_RESOURCE_SHARING,
        concurrentGroupRegistration=(0, 4096)))[0])


@pytest.mark.parametrize("c", RULE_CASES)
def test_rule(env, c: Case):
    env.rec.clear()
    code = c.trigger(env)
    assert code == c.code, f"{c.rule}: {c.func} returned {code}, expected {c.code}: {env.rec.errors()}"
    msgs = env.messages_for(c.rule)
    assert msgs, f"{c.rule}: no message with the rule id; got {env.rec.records}"
    assert env.rules_logged() == {c.rule}, f"{c.rule}: exactly this rule fires; logged {env.rules_logged()}"
    assert c.path in msgs[-1] and c.func in msgs[-1], f"{c.rule}: function and path named: {msgs[-1]!r}"


# Rules that need a device the contextCreateFromBinary* entries do not hand to _context_configs
# yet, a combination a single config list cannot express through the ABI, or the PREPARE_ONLY
# check that graphExecute calls (qnnemu/htp/settings.py): tested on the core functions.
def _core(fn) -> QnnError:
    with pytest.raises(QnnError) as info:
        fn()
    return info.value


CORE_CASES = {
    "QNNEMU-context-group-both": lambda: _both_groups(),
    "QNNEMU-context-group-priority": lambda: _concurrent_priority(),
    "QNNEMU-context-share-resources-va-soc": lambda: settings.check_context_options(
        {"htp": {"QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES": {"shareResources": True}}},
        func=settings.LIST_CONFIG_FUNC, model=model_for(socs.SOCS[Q.QNN_SOC_MODEL_SM8350])),
    "QNNEMU-context-share-resources-concurrent-arch": lambda: settings.check_context_options(
        {"htp": {"QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES": {"shareResources": True},
                 "QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES_OPTIMIZATION_TYPE":
                     {"shareResOptType": Q.CONCURRENT_OPTIMIZATION}}},
        func=settings.LIST_CONFIG_FUNC, model=DeviceModel()),
    "QNNEMU-context-share-resources-graph-switching": lambda: settings.check_context_options(
        {"htp": {"QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES": {"shareResources": True}},
         "graphRetentionOrder": ["a"]}, func=settings.LIST_CONFIG_FUNC, model=DeviceModel()),
    "QNNEMU-priority-concurrent-group": lambda: _concurrent_priority_change(),
}


class _Ctx:
    def __init__(self, configs):
        self.configs, self.graphs, self.tensors = configs, {}, {}


def _register(kind_option: str, first: int, size: int, model, configs=None) -> dict:
    out = dict(configs or {})
    member = groups.REGISTRATION_OPTIONS[f"QNN_HTP_CONTEXT_CONFIG_OPTION_{kind_option}"][1]
    settings.check_context_option(kind_option, {member: {"firstGroupHandle": first, "maxSpillFillBuffer": size}},
                                  func="contextCreateFromBinary", path="config[0].customConfig", model=model, out=out)
    return out


def _both_groups():
    v81 = model_for(socs.SOCS[Q.QNN_SOC_MODEL_SM8850])
    out = _register("REGISTER_MULTI_CONTEXTS", 0, 4096, v81)
    _register("REGISTER_CONCURRENT_RESOURCE_SHARING", 0, 4096, v81, out)


def _concurrent_group(priority=Q.QNN_PRIORITY_HIGH):
    v81 = model_for(socs.SOCS[Q.QNN_SOC_MODEL_SM8850])
    first = _Ctx(_register("REGISTER_CONCURRENT_RESOURCE_SHARING", 0, 4096, v81, {"priority": priority}))
    handle = HANDLES.new(first)
    groups.context_opened(handle, first)   # as Backend.adopt_context does
    return v81, first, handle


def _concurrent_priority():
    v81, first, handle = _concurrent_group()
    try:
        out = _register("REGISTER_CONCURRENT_RESOURCE_SHARING", handle, 0, v81, {"priority": Q.QNN_PRIORITY_LOW})
        settings.check_context_options(out, func="contextCreateFromBinary", model=v81)
    finally:
        HANDLES.release(handle)
        groups.context_closed(handle)
        groups.forget(handle)


def _concurrent_priority_change():
    _, first, handle = _concurrent_group()
    try:
        settings.check_priority_change(first, "contextSetConfig", "config[0].priority")
    finally:
        HANDLES.release(handle)
        groups.context_closed(handle)
        groups.forget(handle)


@pytest.mark.parametrize("rule", list(CORE_CASES))
def test_rule_core_level(rule):
    err = _core(CORE_CASES[rule])
    assert err.rule == rule, f"{rule}: raised {err.rule}"
    assert err.code in (INV_C, UNS_C, INV_G, UNS_G), f"{rule}: a context/graph error code, got {err.code}"


def test_concurrent_group_members_share_one_priority():
    v81, first, handle = _concurrent_group(Q.QNN_PRIORITY_LOW)
    try:
        out = _register("REGISTER_CONCURRENT_RESOURCE_SHARING", handle, 0, v81, {"priority": Q.QNN_PRIORITY_LOW})
        settings.check_context_options(out, func="contextCreateFromBinary", model=v81)
        second = _Ctx(out)
        assert groups.group_of(second).spill_fill_bytes == 4096, "the first registration sizes the buffer"
        assert settings.spill_fill_buffer_bytes(second) == 4096, "the property answers the group's size"
    finally:
        HANDLES.release(handle)
        groups.context_closed(handle)
        groups.forget(handle)
