"""The modelled RPC and wake-up time of an execute (qnnemu/htp/rpc.py, docs/htp-rpc.md): QNN HTP
backend documentation, "QNN HTP Performance Infrastructure API" (sleep latency, sleep disable, RPC
control latency, RPC polling, adaptive polling), "QNN HTP Backend Extensions" (the cores[] keys
of the config file), "Benefits of batch inference and multi-threaded inference" (a second thread's
RPC hides behind the first one's inference), "QNN HTP Profiling" (the showcases' RPC time
against the accelerator time).

The votes are placed through the C ABI's perf infrastructure (qnnemu.client.PerfInfrastructure);
executes are profiled with optrace, whose run record carries the execute's RPC (the Python
entry: the C fast path keeps no virtual time)."""
from __future__ import annotations

import json
import sys
import threading

import numpy as np
import pytest

from qnnemu.client import Backend, ffi
from qnnemu.client.perf import PerfInfrastructure
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import perf, rpc, runtime, settings

TRACE = Q.QNN_PROFILE_EVENTTYPE_TRACE
BURST = rpc.RpcVote(sleep_latency_us=40, rpc_control_latency_us=100, rpc_polling_time_us=9999)



@pytest.fixture
def backend(isolated_votes):
    with Backend() as be:
        infra = PerfInfrastructure(be)
        be.perf = infra
        yield be
        infra.close()


def small_graph(ctx, name: str = "mm", rows: int = 4, depth: int = 64, cols: int = 64):
    g = ctx.graph(name)
    x = g.input("x", (rows, depth))
    w = g.static("w", np.random.default_rng(3).standard_normal((depth, cols)).astype(np.float32))
    g.node("MatMul", [x, w], [("y", (rows, cols), np.float32)], app_read=True)
    g.finalize()
    return g


LONG = {"rows": 256, "depth": 1024, "cols": 256}    # a MatMul whose modelled inference outlasts the RPC's send


def core_of(g):
    return HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle)))


def timeline_of(g) -> rpc.DeviceTimeline:
    return rpc.timeline_for(runtime.runtime_for(settings.device_model(core_of(g)).soc))


def traced_rpc(be, g, prof) -> dict:
    """One profiled execute of ``g``; the "rpc" record of its optrace run."""
    g.execute({"x": np.ones((4, 64), np.float32)}, profile=prof)
    trace = [e for e in prof.events() if e["type"] == TRACE]
    assert len(trace) == 1, "the optrace object is in the execute's events"
    run = trace[0]["object"]["execution"]["runs"][0]
    assert run["rpc"] is not None, f"the run record carries the execute's RPC: {run}"
    return run["rpc"]


def dcvs(pid: int, **fields) -> tuple[int, dict]:
    """A DCVS v3 entry setting only ``fields`` (their set* flags on)."""
    d = {"contextId": pid, "setDcvsEnable": 0, "dcvsEnable": 0, "powerMode": 0, "setSleepLatency": 0,
         "sleepLatency": 0, "setSleepDisable": 0, "sleepDisable": 0, "setBusParams": 0, "setCoreParams": 0}
    for k, v in fields.items():
        d[k] = v
        flag = {"sleepLatency": "setSleepLatency", "sleepDisable": "setSleepDisable"}.get(k)
        if flag:
            d[flag] = 1
    return perf.OPT_DCVS_V3, d


# ------------------------------------------------------------------------- item 1: the votes
def test_sleep_latency_and_sleep_disable_decide_the_dsp_wakeup(backend):
    """Between two executes of one thread the DSP idles for the RPC's return and send: it sleeps
    in the deepest mode the sleep latency allows and pays its exit latency on the next call;
    sleepDisable removes the wake-up."""
    g = small_graph(backend.context())
    prof = backend.profile("detailed", optrace=True)
    pid = backend.perf.create_power_config_id()
    seen = {}
    for label, entry in (("latency 40", dcvs(pid, sleepLatency=40)), ("latency 100", dcvs(pid, sleepLatency=100)),
                         ("sleep disabled", dcvs(pid, sleepDisable=1))):
        backend.perf.set_power(pid, [entry])
        traced_rpc(backend, g, prof)                  # (the idle gap before the next one: return + send)
        r = traced_rpc(backend, g, prof)
        seen[label] = (r["dsp_mode"], r["dsp_wakeup_us"])
    assert seen == {"latency 40": ("clock gating", 10.0), "latency 100": ("retention", 100.0),
                    "sleep disabled": ("active", 0.0)}, f"DSP wake-up per sleep vote: {seen}"
    prof.free()


def test_rpc_polling_sees_the_completion_at_once(backend):
    """RPC polling on: the waiting CPU spins and sees a short inference end at once; off: the
    completion interrupt and the CPU's wake-up, bounded by the RPC control latency."""
    g = small_graph(backend.context())
    prof = backend.profile("detailed", optrace=True)
    pid = backend.perf.create_power_config_id()
    backend.perf.set_power(pid, [(perf.OPT_RPC_POLLING_TIME, 9999), (perf.OPT_RPC_CONTROL_LATENCY, 100)])
    polled = traced_rpc(backend, g, prof)
    backend.perf.set_power(pid, [(perf.OPT_RPC_POLLING_TIME, 0)])
    woken = traced_rpc(backend, g, prof)
    assert (polled["completion"], polled["completion_us"]) == ("polling", rpc.POLL_DETECT_US), \
        f"polling on: the completion is seen at once: {polled}"
    assert woken["completion"] == "interrupt" and woken["completion_us"] >= rpc.INTERRUPT_US, \
        f"polling off: the interrupt path: {woken}"
    assert woken["cpu_polling_us"] == 0 < polled["cpu_polling_us"], "only the polling CPU spins"
    overhead = {k: r["overhead_us"] for k, r in (("polled", polled), ("woken", woken))}
    assert overhead["polled"] < overhead["woken"], f"polling removes the interrupt wake-up: {overhead}"
    prof.free()


def test_control_latency_bounds_the_cpu_wakeup(backend):
    """RPC control latency: the CPU waiting 5 ms for the DSP may only enter idle states that exit
    within it (0: no requirement, the deepest state its wait covers)."""
    pid = backend.perf.create_power_config_id()
    got = {}
    for latency in (0, 1, 100, 500):
        backend.perf.set_power(pid, [(perf.OPT_RPC_CONTROL_LATENCY, latency)])
        vote = rpc.current_vote()
        assert vote.rpc_control_latency_us == latency and vote.rpc_polling_time_us == 0, \
            f"the vote reaches the model: {vote}"
        tl = rpc.DeviceTimeline()
        tl.execute("g", 5000.0, vote)
        got[latency] = tl.execute("g", 5000.0, vote).rpc.cpu_state
    assert got == {0: "cluster power collapse", 1: "wfi", 100: "core retention", 500: "core power collapse"}, \
        f"CPU idle state per control latency: {got}"


def test_adaptive_polling_reaches_past_the_polling_time():
    """A 20 ms inference outlasts a 9999 us polling time: the CPU falls back to the interrupt.
    Adaptive polling (1000 us) predicts the end from the previous inference and polls just in
    time, so from the second execute on the completion is seen at once; a small model (below the
    adaptive threshold) keeps plain polling."""
    polling = rpc.RpcVote(rpc_polling_time_us=9999, rpc_control_latency_us=100)
    adaptive = rpc.RpcVote(rpc_polling_time_us=9999, rpc_control_latency_us=100, adaptive_polling_time_us=1000)
    tl = rpc.DeviceTimeline()
    plain = [tl.execute("big", 20000.0, polling).rpc.completion for _ in range(2)]
    tl = rpc.DeviceTimeline()
    spans = [tl.execute("big", 20000.0, adaptive).rpc for _ in range(2)]
    small = [tl.execute("small", 500.0, adaptive).rpc.completion for _ in range(2)]
    assert plain == ["interrupt", "interrupt"], f"polling alone times out on 20 ms: {plain}"
    assert [s.completion for s in spans] == ["interrupt", "adaptive polling"], \
        f"adaptive polling needs the previous inference's time: {spans}"
    assert spans[1].cpu_polling_us == rpc.ADAPTIVE_WAKE_AHEAD_US < spans[0].cpu_polling_us, \
        "adaptive polling spins only briefly"
    assert small == ["polling", "polling"], f"below the adaptive threshold: plain polling {small}"
    off = rpc.RpcVote(adaptive_polling_time_us=1000)
    tl = rpc.DeviceTimeline()
    assert [tl.execute("big", 20000.0, off).rpc.completion for _ in range(2)] == ["interrupt"] * 2, \
        "adaptive polling without RPC polling has no effect"


def test_rpc_overhead_matches_the_documented_showcases():
    """The profiling showcases report RPC (execute) time 979..1170 us above the accelerator's for
    10-18 ms inferences run by net-run (its default profile, high_performance: sleep latency 100,
    control latency 100, polling 9999 us, which such inferences outlast)."""
    hp = rpc.RpcVote(sleep_latency_us=100, rpc_control_latency_us=100, rpc_polling_time_us=9999)
    for accel in (10481.0, 15190.0, 17700.0):
        tl = rpc.DeviceTimeline()
        tl.execute("showcase", accel, hp)
        steady = tl.execute("showcase", accel, hp)
        assert 979 <= steady.rpc.overhead_us <= 1170, \
            f"{accel} us: modelled RPC - accelerator {steady.rpc.overhead_us} us in the showcases' band"


def test_perf_votes_without_rpc_options_keep_the_defaults(isolated_votes):
    """No vote at all: no polling, no control latency, every low-power mode allowed."""
    assert rpc.current_vote() == rpc.RpcVote(), "no id: the model's defaults"


# ------------------------------------------------------------ item 2: multithreaded inference
def _run_threads(be, graphs, rounds: int) -> list[rpc.ExecuteSpan]:
    """``graphs`` executed by one thread each, strictly in turn (round robin), profiled."""
    turn = [threading.Event() for _ in graphs]
    spans: list[rpc.ExecuteSpan] = []
    errors: list[BaseException] = []

    def worker(i):
        prof = be.profile("basic")
        try:
            for _ in range(rounds):
                turn[i].wait()
                turn[i].clear()
                graphs[i].execute({"x": np.ones((LONG["rows"], LONG["depth"]), np.float32)}, profile=prof)
                spans.append(core_of(graphs[i]).last_schedule.span)
                turn[(i + 1) % len(graphs)].set()
        except BaseException as err:
            errors.append(err)
            for t in turn:
                t.set()
        finally:
            prof.free()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(graphs))]
    for t in threads:
        t.start()
    turn[0].set()
    for t in threads:
        t.join(60)
    assert not errors, f"the workers ran: {errors}"
    return spans


def test_a_second_thread_hides_the_rpc_behind_the_first_ones_inference(backend):
    """Two host threads executing on one device: the second thread's send overlaps the first
    one's accelerator time, so for the same device busy time the virtual wall time shrinks."""
    ctx = backend.context()
    a, b = small_graph(ctx, "a", **LONG), small_graph(ctx, "b", **LONG)
    tl = timeline_of(a)
    tl.reset()
    _run_threads(backend, [a], 8)
    one = tl.summary()
    tl.reset()
    spans = _run_threads(backend, [a, b], 4)
    two = tl.summary()
    assert two["busy_us"] == pytest.approx(one["busy_us"]), "the same eight inferences keep the device as busy"
    accel = spans[0].rpc.accel_us
    assert accel > rpc.RPC_SEND_US, f"setup: the inference ({accel} us) outlasts the send"
    assert two["wall_us"] < 0.75 * one["wall_us"], f"two threads overlap their RPC: {one} vs {two}"
    assert two["utilization"] > one["utilization"], "the device idles less"
    pairs = list(zip(spans, spans[1:]))
    assert all(x.thread != y.thread for x, y in pairs), "the spans alternate threads"
    hidden = [y for x, y in pairs[1:]
              if y.issue_us < x.device_end_us and y.issue_us + y.rpc.send_us > x.device_start_us]
    assert len(hidden) >= (len(pairs) - 1) // 2, \
        f"at least every other send overlaps the other thread's inference: {len(hidden)} of {pairs}"


def test_the_timeline_two_threads_keep_a_long_inference_busy():
    """Deterministic form (thread ids given): with an inference longer than the RPC, two threads
    keep the accelerator busy all the time after the first call; one thread leaves it idle for
    the RPC of every call."""
    for threads, expect_gaps in ((1, True), (2, False)):
        tl = rpc.DeviceTimeline()
        spans = [tl.execute("g", 2000.0, BURST, thread=i % threads) for i in range(8)]
        gaps = [b.device_start_us - a.device_end_us for a, b in zip(spans, spans[1:])]
        if expect_gaps:
            assert min(gaps) >= rpc.RPC_SEND_US + rpc.RPC_RETURN_US, f"one thread: RPC between inferences {gaps}"
        else:
            assert max(gaps) == 0, f"two threads: no idle between inferences {gaps}"
            assert all(s.rpc.dsp_wakeup_us == 0 for s in spans[1:]), "a busy DSP never sleeps: no wake-up"


# -------------------------------------------------------------------- item 4: the tools' keys
@pytest.mark.parametrize("core, expect", [
    ({"perf_profile": "burst"}, rpc.RpcVote(40, False, 100, 9999, 0)),
    ({"perf_profile": "burst", "rpc_polling_time": 0, "rpc_control_latency": 150},
     rpc.RpcVote(40, False, 150, 0, 0)),
    ({"perf_profile": "balanced"}, rpc.RpcVote(1000, False, 100, 0, 0)),
    ({"perf_profile": "high_performance", "adaptive_polling_time": 2000}, rpc.RpcVote(100, False, 100, 9999, 2000)),
    ({"perf_profile": "burst", "hmx_timeout_us": 1000}, rpc.RpcVote(40, False, 100, 9999, 0, 1000)),
])
def test_config_file_core_keys_reach_the_rpc_model(backend, tmp_path, core, expect):
    """devices[0].cores[0] of the backend-extension config (perf_profile, rpc_control_latency,
    rpc_polling_time, adaptive_polling_time, hmx_timeout_us; the profile's sleep latency) are voted by net-run's
    perf session before each inference and decide the execute's modelled RPC."""
    from qnnemu.tools.config import load_backend_config
    path = tmp_path / "htp.json"
    path.write_text(json.dumps({"devices": [{"cores": [core]}]}))
    session = load_backend_config(str(path)).perf_session(backend)
    g = small_graph(backend.context())
    prof = backend.profile("detailed", optrace=True)
    try:
        session.before_stage()
        assert rpc.current_vote() == expect, f"{core}: the voted RPC settings"
        traced_rpc(backend, g, prof)
        r = traced_rpc(backend, g, prof)
        session.after_stage()
    finally:
        session.infrastructure.close()
        prof.free()
    assert r["completion"] == ("polling" if expect.rpc_polling_time_us else "interrupt"), \
        f"{core}: the completion path follows rpc_polling_time: {r}"
    wake = rpc.dsp_wakeup(expect, rpc.RPC_SEND_US + rpc.RPC_RETURN_US)[1]
    assert r["dsp_wakeup_us"] == wake, f"{core}: the profile's sleep latency decides the wake-up: {r}"


# ------------------------------------------- the values the vendor's library takes without a check
# (name, setPowerConfig entries as (option, value | DCVS v3 fields)), what RpcVote they give.
_PROBE = """
import json, sys
from qnnemu.client import Backend
from qnnemu.client.cabi import QnnCallError
from qnnemu.client.perf import PerfInfrastructure
from qnnemu.htp import perf as P
cases = json.loads(sys.argv[2])
out = {}
with Backend(sys.argv[1] or None, log_level=None) as be:
    infra = PerfInfrastructure(be)
    for name, entries in cases.items():
        pid = infra.create_power_config_id()
        votes = []
        for option, value in entries:
            if isinstance(value, dict):
                value = {"contextId": pid, **value}
            votes.append((option, value))
        try:
            infra.set_power(pid, votes)
            out[name] = 0
        except QnnCallError as err:
            out[name] = err.code
        infra.destroy(pid)
print("RESULT " + json.dumps(out))
"""


def _dcvs_fields(**fields) -> dict:
    d = {"setDcvsEnable": 0, "dcvsEnable": 0, "powerMode": 0, "setSleepLatency": 0, "sleepLatency": 0,
         "setSleepDisable": 0, "sleepDisable": 0, "setBusParams": 0, "setCoreParams": 0}
    d.update(fields)
    return d


UNCHECKED = {   # name -> (entries, the RpcVote qnnemu models them as)
    "control latency 0xFFFFFFFF": ([(perf.OPT_RPC_CONTROL_LATENCY, 0xFFFFFFFF)],
                                   rpc.RpcVote(rpc_control_latency_us=0xFFFFFFFF)),
    "polling 0xFFFFFFFF": ([(perf.OPT_RPC_POLLING_TIME, 0xFFFFFFFF)], rpc.RpcVote(rpc_polling_time_us=9999)),
    "adaptive 0xFFFFFFFF, polling 9999": ([(perf.OPT_RPC_POLLING_TIME, 9999), (perf.OPT_ADAPTIVE_POLLING, 0xFFFFFFFF)],
                                          rpc.RpcVote(rpc_polling_time_us=9999, adaptive_polling_time_us=0xFFFFFFFF)),
    "adaptive 5000 above polling 100": ([(perf.OPT_RPC_POLLING_TIME, 100), (perf.OPT_ADAPTIVE_POLLING, 5000)],
                                        rpc.RpcVote(rpc_polling_time_us=100, adaptive_polling_time_us=5000)),
    "adaptive without polling": ([(perf.OPT_ADAPTIVE_POLLING, 1000)], rpc.RpcVote()),
    "sleepLatency 0": ([(perf.OPT_DCVS_V3, _dcvs_fields(setSleepLatency=1, sleepLatency=0))],
                       rpc.RpcVote(sleep_latency_us=10)),
    "sleepLatency 0xFFFFFFFF": ([(perf.OPT_DCVS_V3, _dcvs_fields(setSleepLatency=1, sleepLatency=0xFFFFFFFF))],
                                rpc.RpcVote(sleep_latency_us=65535)),
    "sleepDisable 0xFF": ([(perf.OPT_DCVS_V3, _dcvs_fields(setSleepDisable=1, sleepDisable=0xFF))],
                          rpc.RpcVote(sleep_disabled=True)),
}


def test_unchecked_rpc_values_are_accepted_as_the_vendor_does_and_modelled(backend):
    """What the vendor's x86 library takes without a check (setPowerConfig returns 0 for every
    entry here) qnnemu takes too, and the RPC model reads it as the table says (out-of-range
    sleep latency and polling time with their warning rules, QNNEMU-perf-dcvs-sleep-latency and
    QNNEMU-perf-rpc-polling-range; adaptive polling without polling stays inactive)."""
    for name, (entries, modelled) in UNCHECKED.items():
        pid = backend.perf.create_power_config_id()
        votes = [(o, {"contextId": pid, **v} if isinstance(v, dict) else v) for o, v in entries]
        backend.perf.set_power(pid, votes)    # raises on a non-zero code
        assert rpc.current_vote() == modelled, f"{name}: modelled as {modelled}, got {rpc.current_vote()}"
        backend.perf.destroy(pid)


def test_the_vendor_accepts_the_unchecked_rpc_values():
    import subprocess

    from vendor import vendor_env, vendor_library
    lib = vendor_library()
    if lib is None:
        pytest.skip("onnxruntime_qnn (the vendor's libQnnHtp.so) is not installed")
    cases = json.dumps({name: entries for name, (entries, _) in UNCHECKED.items()})
    got = {}
    for label, path in (("vendor", str(lib)), ("qnnemu", "")):
        proc = subprocess.run([sys.executable, "-c", _PROBE, path, cases], capture_output=True, text=True,
                              timeout=120, env=vendor_env())
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        assert line is not None, f"{label} probe ran: {proc.stderr[-2000:]}"
        got[label] = json.loads(line[len("RESULT "):])
    assert got["vendor"] == dict.fromkeys(UNCHECKED, 0), f"the vendor accepts every entry: {got['vendor']}"
    assert got["qnnemu"] == got["vendor"], f"qnnemu returns what the vendor returns: {got}"


@pytest.mark.parametrize("key, value", [("rpc_polling_time", -5), ("rpc_control_latency", 1 << 32),
                                        ("adaptive_polling_time", -1)])
def test_config_file_core_values_outside_uint32_are_refused(tmp_path, key, value):
    """A cores[] microsecond value the power config's uint32_t cannot hold is a clear tool error
    naming the key (it used to escape as an OverflowError at the first vote)."""
    from qnnemu.tools.config import load_backend_config
    from qnnemu.tools.reporting import ToolError
    path = tmp_path / "htp.json"
    path.write_text(json.dumps({"devices": [{"cores": [{"perf_profile": "burst", key: value}]}]}))
    with pytest.raises(ToolError) as err:
        load_backend_config(str(path))
    assert f"devices[0].cores[0].{key}: {value} is not a microsecond value 0..4294967295" in str(err.value), \
        f"the message names the key and the range: {err.value}"


def test_hmx_timeout_powers_the_hmx_down_between_executes(isolated_votes):
    """HMX timeout (hmx_timeout_us, 100..1000000 us): the HMX powers down after that much idle.
    A 100 us timeout is shorter than the RPC's return + send between one thread's executes, so
    every execute of a graph running on the HMX powers it up again ("Time for HVX + HMX power on
    and acquire" and the modelled RPC); the default 300000 us keeps it up."""
    from qnnemu.client import htp_device_config
    power = Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_RESOURCE_POWER_UP_TIME
    with Backend(None, log_level=None,
                 device_configs=[htp_device_config("SOC", socModel=int(Q.QNN_SOC_MODEL_SM8550))]) as be:
        infra = PerfInfrastructure(be)
        g = be.context().graph("fc16")
        x = g.input("x", (1, 256))
        w = g.static("w", np.random.default_rng(2).standard_normal((256, 256)).astype(np.float32))
        g.node("FullyConnected", [x, w], [("y", (1, 256), np.float32)], app_read=True)
        g.finalize()
        assert rpc.plan_uses_hmx(core_of(g).htp_plan), "setup: float16 math on v73 runs the FullyConnected on HMX"
        prof = be.profile("basic")
        got = {}
        try:
            pid = infra.create_power_config_id()
            for timeout in (300000, 100):
                infra.set_power(pid, [(perf.OPT_HMX_TIMEOUT, timeout)])
                assert rpc.current_vote().hmx_timeout_us == timeout, "the vote reaches the model"
                for _ in range(2):
                    g.execute({"x": np.ones((1, 256), np.float32)}, profile=prof)
                events = {e["type"]: e["value"] for e in prof.events()}
                got[timeout] = (events[power], core_of(g).last_schedule.span.rpc.hmx_power_up_us)
        finally:
            prof.free()
            infra.close()
    assert got == {300000: (0, 0.0), 100: (rpc.HMX_POWER_UP_US, rpc.HMX_POWER_UP_US)}, \
        f"(power-on us in the profile, in the modelled RPC) per HMX timeout: {got}"
