"""The C kernels' intra-op thread pool (csrc/pool.c; issue 13): several application threads
split their work at once, each item runs exactly once whoever claims it, and a caller never
depends on a free worker (it runs the items no worker took and takes its tickets back)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from qnnemu.ops import _fast

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")


def _gemm(a, pb, n, k):
    m = a.shape[0]
    y = np.empty((m, n), np.float32)
    rc = _fast._lib.qe_sgemm_packed(m, n, k, _fast._ptr(a), k, 1, _fast._ptr(pb.buf), _fast._ptr(y), n,
                                    _fast._ptr(None))
    assert rc == 0, "the packed GEMM ran"
    return y.tobytes()


@pytest.mark.parametrize("threads", [2, 8])
def test_concurrent_callers_get_the_single_thread_bytes(threads):
    """Four application threads run split GEMMs at once (cffi drops the GIL), 12 times each,
    with the pool allowed ``threads`` threads on a 2-core machine: batches interleave in the
    shared queue, callers take back tickets no worker reached; every result equals the
    one-thread bytes (an item skipped or run on a stale batch would change them)."""
    rng = np.random.default_rng(5)
    m, n, k = 600, 300, 200
    inputs = [rng.standard_normal((m, k)).astype(np.float32) for _ in range(4)]
    pb = _fast.PackedB(rng.standard_normal((k, n)).astype(np.float32))
    lib = _fast._lib
    prev = lib.qe_threads()
    try:
        lib.qe_set_threads(1)
        refs = [_gemm(a, pb, n, k) for a in inputs]
        lib.qe_set_threads(threads)
        bad: list[str] = []

        def run(j):
            for it in range(12):
                if _gemm(inputs[j], pb, n, k) != refs[j]:
                    bad.append(f"caller {j} iteration {it}")

        workers = [threading.Thread(target=run, args=(j,)) for j in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=300)
        assert not any(w.is_alive() for w in workers), "every caller returned (no lost item or ticket)"
    finally:
        lib.qe_set_threads(prev)
    assert not bad, f"results equal to the one-thread bytes with {threads} pool threads: differed in {bad}"


def _split_gemm_once():
    rng = np.random.default_rng(9)
    m, n, k = 600, 300, 200
    a = rng.standard_normal((m, k)).astype(np.float32)
    pb = _fast.PackedB(rng.standard_normal((k, n)).astype(np.float32))
    return _gemm(a, pb, n, k)


def test_idle_workers_stop_spinning():
    """Between calls the pool's workers watch the queue for a short while (so a split op does not
    wait for a sleeping worker to wake up) and then sleep: an idle process must not keep burning a
    core.  After a split GEMM, the whole process may use at most a few ms of CPU time while the
    caller sleeps 300 ms (the spin window is 1 ms; a worker that never stopped spinning would use
    about 300 ms)."""
    import time
    lib = _fast._lib
    prev = lib.qe_threads()
    try:
        lib.qe_set_threads(2)
        _split_gemm_once()
        time.sleep(0.05)     # past the spin window
        _split_gemm_once()   # the workers spin again after this one
        c0 = time.process_time()
        time.sleep(0.3)
        used = time.process_time() - c0
    finally:
        lib.qe_set_threads(prev)
    assert used < 0.06, f"process CPU time while idle for 300 ms after a split call: {used * 1e3:.1f} ms (< 60 ms)"
