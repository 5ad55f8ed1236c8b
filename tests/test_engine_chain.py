"""Element-wise chains of the C engine (qnnemu/core/engine/chain.py, csrc/engine.c qe_run; issue
13): consecutive element-wise steps run block by block give the bytes of the steps run one after
the other, and a chain is made only where that is provable (same element count, whole or
broadcast-scalar operands, no partially shared arena bytes)."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, GraphBuilder, new_context
from hypothesis import given, settings, strategies as st

from qnnemu.core.engine import chain
from qnnemu.headers import Q
from qnnemu.ops import _fast

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")
STATIC = Q.QNN_TENSOR_TYPE_STATIC


def hard_swish_graph(shape, links: int, scalar_first: bool):
    """x -> (Add 3 -> ReluMinMax 0..6 -> Multiply by x -> Divide by 6) x links -> y: the
    HardSwish a framework exporter writes as four element-wise nodes."""
    b = GraphBuilder(new_context(), "hswish")
    x = b.tensor("x", shape, type_=APP_WRITE)
    three = b.tensor("three", (1,), type_=STATIC, data=np.array([3.0], np.float32))
    six = b.tensor("six", (1,), type_=STATIC, data=np.array([6.0], np.float32))
    prev = x
    for k in range(links):
        last = k == links - 1
        a = b.tensor(f"a{k}", shape)
        b.node("ElementWiseAdd", f"add{k}", [three, prev] if scalar_first else [prev, three], [a])
        r = b.tensor(f"r{k}", shape)
        b.node("ReluMinMax", f"relu6_{k}", [a], [r], min_value=0.0, max_value=6.0)
        m = b.tensor(f"m{k}", shape)
        b.node("ElementWiseMultiply", f"mul{k}", [prev, r], [m])
        out = b.tensor("y" if last else f"h{k}", shape, type_=APP_READ if last else Q.QNN_TENSOR_TYPE_NATIVE)
        b.node("ElementWiseDivide", f"div{k}", [m, six], [out])
        prev = out
    b.graph.finalize()
    return b.graph


def run_graph(graph, x):
    i = {t.name: t.id for t in graph.tensors.values()}
    out = graph.plan.engine.run({i["x"]: x}, [i["y"]])
    return out[i["y"]]


@pytest.mark.parametrize("math", ["float32", "float16"])
@settings(deadline=None)
@given(n=st.sampled_from([1, 63, 64, 4095, 4097, 20000, 70001]), links=st.integers(1, 3),
       scalar_first=st.booleans(), seed=st.integers(0, 2**31))
def test_chained_program_gives_the_bytes_of_the_plain_program(math, n, links, scalar_first, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 5).astype(np.float32)
    x[rng.integers(0, n, max(1, n // 50))] = rng.choice(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-6,
                                                                  7e4, -3.0], np.float32), max(1, n // 50))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QNNEMU_FLOAT_MATH", math)
        mp.setenv("QNNEMU_ENGINE_CHAINS", "0")
        plain = hard_swish_graph((n,), links, scalar_first)
        mp.setenv("QNNEMU_ENGINE_CHAINS", "1")
        chained = hard_swish_graph((n,), links, scalar_first)
    assert plain.plan.engine.summary()["chains"] == 0, "QNNEMU_ENGINE_CHAINS=0 makes no chain"
    assert chained.plan.engine.summary()["chains"] >= 1, \
        f"the HardSwish steps ({math} math) form a chain: {chained.plan.engine.summary()}"
    a, b = run_graph(plain, x), run_graph(chained, x)
    assert a.tobytes() == b.tobytes(), f"chained and plain programs give the same bytes ({math}, n={n})"
    # and the Python plan (the reference) agrees with both
    i = {t.name: t.id for t in chained.tensors.values()}
    with np.errstate(all="ignore"):
        ref = chained.plan._run({i["x"]: x}, [i["y"]], None)[i["y"]]
    assert ref.tobytes() == b.tobytes(), "the chained program equals the Python plan"


def test_node_by_node_runs_do_not_use_the_chain(monkeypatch):
    """An observed (profiled) execute runs node by node: a chain header whose steps run past the
    node's range is skipped and each step runs alone -- the observer still sees every node."""
    monkeypatch.setenv("QNNEMU_FLOAT_MATH", "float16")
    graph = hard_swish_graph((5000,), 2, False)
    assert graph.plan.engine.summary()["chains"] >= 1, "a chain was made"
    i = {t.name: t.id for t in graph.tensors.values()}
    x = np.linspace(-8, 8, 5000, dtype=np.float32)
    seen = []
    out = graph.execute({i["x"]: x}, [i["y"]], observer=lambda step, s: seen.append(step.node.name))
    assert seen == [f"{op}{k}" for k in range(2) for op in ("add", "relu6_", "mul", "div")], \
        "the observer sees each of the 8 nodes once, in order"
    assert np.asarray(out[i["y"]]).tobytes() == run_graph(graph, x).tobytes(), \
        "node-by-node and chained runs give the same bytes"


# -- the rule that decides which buffers may share a chain ---------------------------------------

def test_buffers_sharing_bytes_at_another_offset_end_a_chain():
    """The arena reuses the bytes of dead values: a step that writes where an earlier step of
    the chain still reads (for the next block) at another offset must not join the chain."""
    read_a = [(0, 4096, 4, False)]
    assert chain._Chains.compatible(read_a, [(1024, 4096, 4, True)]) is False, \
        "writing bytes an earlier step reads at another offset ends the chain"
    assert chain._Chains.compatible(read_a, [(0, 4096, 4, True)]) is True, \
        "writing the very elements an earlier step read (same offset, same size) is fine"
    assert chain._Chains.compatible(read_a, [(4096, 4096, 4, True)]) is True, "disjoint bytes are fine"
    assert chain._Chains.compatible([(0, 64, 0, False)], [(0, 4096, 4, True)]) is False, \
        "a broadcast value never shares bytes with a written buffer"
    assert chain._Chains.compatible([(0, 4096, 1, False)], [(0, 4096, 4, True)]) is False, \
        "the same offset with another element size is not the same elements"
    assert chain._Chains.compatible([(0, 4096, 4, False)], [(1024, 64, 4, False)]) is True, \
        "two reads may overlap anyhow"


def test_binary_steps_with_a_real_broadcast_are_not_chained():
    """[N, C] * [1, C] reads its second operand per channel: not element i of a length-N*C
    array nor one scalar, so it is not blockable."""
    full, scalar, per_channel = [3, 1], [0, 0], [0, 1]
    dims = [4, 3]
    assert chain._binary([2, 2, *dims, *full, *scalar], 3) is not None, "full x scalar is blockable"
    assert chain._binary([2, 2, *dims, *full, *per_channel], 3) is None, "a per-channel broadcast is not"
    assert chain._binary([2, 2, *dims, *full], 3) is None, "a malformed parameter list is not"
