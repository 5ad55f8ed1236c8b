"""Per-op timings of the conv / pool / matmul ops, "fast" kernels against "reference" numpy.

The ops run as a finalized graph runs them: built once (static weights, so the fast path packs
them at creation) and called through ``Op.run`` on float32 NHWC arrays.

    python benchmarks/bench_ops.py               # ResNet-18 convs, pools, FC, MobileNet
                                                 # depthwise, transformer MatMuls
    python benchmarks/bench_ops.py --quick       # fewer repetitions, no reference column
    python benchmarks/bench_ops.py --no-ref      # no reference column
    python benchmarks/bench_ops.py --only resnet18
    python benchmarks/bench_ops.py --only bert-threads   # small GEMMs: 1 thread vs split,
                                                         # quiet and beside one busy process

The headline is the sum of the 20 convolutions of ResNet-18 (batch 1, 224x224, float32).
Times are the best of ``--runs`` calls (after one warm-up), in milliseconds.  The GEMM backend
("c" or "blas", see qnnemu/ops/_fast.py) can be forced with QNNEMU_GEMM=c|blas, the C GEMM's
threads with QNNEMU_NUM_THREADS.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qnnemu import ops
from qnnemu.core import dtypes
from qnnemu.headers import Q
from qnnemu.ops import Param, TensorSpec, _fast

RNG = np.random.default_rng(0)


def _param(name, value) -> Param:
    if isinstance(value, bool):
        return Param(name, "scalar", Q.QNN_DATATYPE_BOOL_8, value)
    if isinstance(value, int):
        return Param(name, "scalar", Q.QNN_DATATYPE_UINT_32, value)
    return Param(name, "tensor", Q.QNN_DATATYPE_UINT_32, np.asarray(value, np.uint32))


def make_op(op_type: str, arrays, params, static=(1, 2)):
    """The op as graphFinalize creates it; inputs at indices ``static`` are STATIC tensors."""
    cls = ops.get(op_type)
    ps = {k: _param(k, v) for k, v in params.items()}
    specs = [TensorSpec(a.shape, dtypes.from_numpy(a.dtype), data=a if i in static else None)
             for i, a in enumerate(arrays)]
    outs = cls.check(specs, ps)
    return cls(cls.parse_params(ps), specs, outs)


def best_ms(fn, runs: int) -> float:
    fn()
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def timed(op, arrays, runs: int, reference: bool) -> tuple[float, float | None]:
    old = ops.config.kernels
    try:
        ops.config.kernels = "fast"
        fast = best_ms(lambda: op.run(*arrays), runs)
        ref = None
        if reference:
            ops.config.kernels = "reference"
            ref = best_ms(lambda: op.run(*arrays), max(1, runs // 3))
    finally:
        ops.config.kernels = old
    return fast, ref


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv_case(h, c_in, c_out, k, s, p, op_type="Conv2d", mult=1):
    x = rand(1, h, h, c_in)
    if op_type == "DepthWiseConv2d":
        w = rand(k, k, 1, c_in * mult)
        c_out = c_in * mult
    else:
        w = rand(k, k, c_in, c_out)
    params = {"stride": [s, s], "pad_amount": [[p, p], [p, p]]}
    return op_type, [x, w, rand(c_out)], params, f"{op_type} {h}x{h}x{c_in} {k}x{k}/{s} -> {c_out}"


# ResNet-18 (torchvision layout), batch 1, 224x224: conv1, 4 layers of 2 basic blocks
# (3x3 convs), 1x1 stride-2 downsamples at the start of layers 2-4.  20 convolutions.
RESNET18 = [conv_case(224, 3, 64, 7, 2, 3)]
RESNET18 += [conv_case(56, 64, 64, 3, 1, 1)] * 4
for h, c in ((56, 64), (28, 128), (14, 256)):
    RESNET18 += [conv_case(h, c, 2 * c, 3, 2, 1), conv_case(h // 2, 2 * c, 2 * c, 3, 1, 1),
                 conv_case(h, c, 2 * c, 1, 2, 0)]
    RESNET18 += [conv_case(h // 2, 2 * c, 2 * c, 3, 1, 1)] * 2
assert len(RESNET18) == 20

MOBILENET_DW = [conv_case(h, c, c, 3, s, 1, "DepthWiseConv2d")
                for h, c, s in ((112, 32, 1), (112, 96, 2), (56, 144, 1), (56, 144, 2),
                                (28, 192, 1), (28, 192, 2), (14, 384, 1), (14, 576, 1),
                                (14, 576, 2), (7, 960, 1))]
MOBILENET_PW = [conv_case(112, 32, 16, 1, 1, 0), conv_case(56, 24, 144, 1, 1, 0),
                conv_case(28, 32, 192, 1, 1, 0), conv_case(14, 96, 576, 1, 1, 0),
                conv_case(7, 320, 1280, 1, 1, 0)]


def other_cases():
    cases = []
    x = rand(1, 112, 112, 64)
    cases.append(("PoolMax2d", [x], {"filter_size": [3, 3], "stride": [2, 2],
                                     "pad_amount": [[1, 1], [1, 1]]},
                  "PoolMax2d 112x112x64 3x3/2 (ResNet-18)"))
    cases.append(("PoolAvg2d", [rand(1, 7, 7, 512)], {"filter_size": [7, 7], "stride": [1, 1]},
                  "PoolAvg2d 7x7x512 global (ResNet-18)"))
    cases.append(("FullyConnected", [rand(1, 512), rand(1000, 512), rand(1000)], {},
                  "FullyConnected 512 -> 1000 (ResNet-18)"))
    cases.append(("TransposeConv2d", [rand(1, 28, 28, 128), rand(4, 4, 128, 64), rand(64)],
                  {"stride": [2, 2], "pad_amount": [[1, 1], [1, 1]]},
                  "TransposeConv2d 28x28x128 4x4/2 -> 56x56x64"))
    cases.append(("Conv3d", [rand(1, 8, 28, 28, 32), rand(3, 3, 3, 32, 32), rand(32)],
                  {"pad_amount": [[1, 1]] * 3}, "Conv3d 8x28x28x32 3x3x3 -> 32"))
    # BERT-base, sequence 128
    cases.append(("FullyConnected", [rand(128, 768), rand(3072, 768), rand(3072)], {},
                  "FullyConnected 128x768 -> 3072 (BERT FFN)"))
    cases.append(("MatMul", [rand(1, 128, 768), rand(768, 768)], {},
                  "MatMul [1,128,768] x [768,768] static"))
    q, k = rand(1, 12, 128, 64), rand(1, 12, 128, 64)
    cases.append(("MatMul", [q, k], {"transpose_in1": True},
                  "MatMul QK^T [1,12,128,64] x [1,12,128,64]^T"))
    cases.append(("MatMul", [rand(1, 12, 128, 128), rand(1, 12, 128, 64)], {},
                  "MatMul attn.V [1,12,128,128] x [1,12,128,64]"))
    return cases


def _median_ms(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def _bert_graphs(be):
    """One-node graphs (qnnemu.client) with the FullyConnected / MatMul shapes of the benchmark
    BERT encoder: uint8 and uint16 activations, asymmetric per-tensor uint8 weights, int32 bias,
    as ONNX Runtime's QNN quantizer makes them.  Yields (label, graph, feeds)."""
    rng = np.random.default_rng(0)
    for act in (np.uint8, np.uint16):
        bits = np.dtype(act).itemsize * 8
        xs, off = 4.0 / (2**bits - 1), -(2**bits // 2)
        for n_in, n_out, what in ((256, 1024, "FFN in"), (1024, 256, "FFN out"), (256, 256, "Q/K/V")):
            ctx = be.context()
            g = ctx.graph("g")
            x = g.input("x", (128, n_in), act, quant=(xs, off))
            wr = rng.standard_normal((n_out, n_in)) * 0.05 + 0.01
            ws = float((wr.max() - wr.min()) / 255)
            wo = int(np.round(wr.min() / ws))
            w = g.static("w", np.clip(np.round(wr / ws) - wo, 0, 255).astype(np.uint8), np.uint8,
                         quant=(ws, wo))
            bs = float(np.float32(xs) * np.float32(ws))
            b = g.static("b", (rng.standard_normal(n_out) * 0.1 / bs).astype(np.int32),
                         Q.QNN_DATATYPE_SFIXED_POINT_32, quant=(bs, 0))
            g.node("FullyConnected", [x, w, b], outputs=[("y", (128, n_out), act, (8.0 / (2**bits - 1), off))],
                   app_read=True)
            g.finalize()
            yield (f"{np.dtype(act).name} FC [128,{n_in}] x [{n_in},{n_out}] ({what})", (ctx, g),
                   {"x": rng.integers(0, 2**bits, (128, n_in)).astype(act)})
        ctx = be.context()
        g = ctx.graph("g")
        a = g.input("a", (1, 4, 128, 64), act, quant=(xs, off))
        k = g.input("k", (1, 4, 64, 128), act, quant=(xs, off))
        g.node("MatMul", [a, k], outputs=[("y", (1, 4, 128, 128), act, (16.0 / (2**bits - 1), off))],
               app_read=True)
        g.finalize()
        yield (f"{np.dtype(act).name} MatMul [1,4,128,64] x [1,4,64,128]", (ctx, g),
               {"a": rng.integers(0, 2**bits, (1, 4, 128, 64)).astype(act),
                "k": rng.integers(0, 2**bits, (1, 4, 64, 128)).astype(act)})


def bert_threads(runs: int) -> None:
    """The FullyConnected and attention MatMul steps of the benchmark BERT encoder
    (benchmarks/model_set.py ``bert``), as one-node graphs executed through the C ABI
    (qnnemu.client): "split" is the behaviour before ``_fast.SINGLE_THREAD_MAX_FMAS`` (every
    GEMM split over the GEMM's threads), "1 thread" the current one.  Each is timed on the
    machine as it is and beside one busy process started here (median of ``runs`` executes;
    both columns in one run, so the ratio compares like with like).  A graph executes numpy
    work between its GEMMs, so BLAS's worker threads go to sleep and must be woken per GEMM --
    which a busy core delays; a bare GEMM loop keeps them awake and does not show it."""
    import subprocess

    from qnnemu.client import Backend
    print(f"\nBERT FullyConnected / MatMul graphs, {_fast.gemm_backend()} backend, "
          f"{_fast.threads()} GEMM threads: median ms of {runs} executes")
    print(f"  {'graph':50s} {'':8s} {'split':>8s} {'1 thread':>9s} {'split/1':>8s}")
    default = _fast.SINGLE_THREAD_MAX_FMAS
    with Backend(None) as be:
        graphs = list(_bert_graphs(be))
        for load in ("as is", "+1 busy"):
            busy = None
            if load != "as is":
                busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                time.sleep(0.3)
            try:
                tot = [0.0, 0.0]
                for label, (_, g), feeds in graphs:
                    ms = []
                    for limit in (0, default):
                        _fast.SINGLE_THREAD_MAX_FMAS = limit
                        ms.append(_median_ms(lambda g=g, feeds=feeds: g.execute(feeds), runs))
                    _fast.SINGLE_THREAD_MAX_FMAS = default
                    tot = [tot[0] + ms[0], tot[1] + ms[1]]
                    print(f"  {label:50s} {load:8s} {ms[0]:8.3f} {ms[1]:9.3f} {ms[0] / ms[1]:7.1f}x")
                print(f"  {'sum':50s} {load:8s} {tot[0]:8.3f} {tot[1]:9.3f} {tot[0] / tot[1]:7.1f}x")
                # all graphs in turn, as a model's steps follow each other
                ms = []
                for limit in (0, default):
                    _fast.SINGLE_THREAD_MAX_FMAS = limit
                    ms.append(_median_ms(lambda: [g.execute(f) for _, (_, g), f in graphs], runs))
                _fast.SINGLE_THREAD_MAX_FMAS = default
                print(f"  {'all in turn (one pass)':50s} {load:8s} {ms[0]:8.3f} {ms[1]:9.3f} "
                      f"{ms[0] / ms[1]:7.1f}x")
            finally:
                _fast.SINGLE_THREAD_MAX_FMAS = default
                if busy is not None:
                    busy.kill()
                    busy.wait()


def run_group(title, cases, runs, reference, static=(1, 2)):
    print(f"\n{title}")
    print(f"  {'op':58s} {'fast ms':>9s} {'ref ms':>9s} {'speed-up':>8s}")
    tot_f = tot_r = 0.0
    for op_type, arrays, params, label in cases:
        st = () if op_type == "MatMul" and "static" not in label else static
        op = make_op(op_type, arrays, params, static=st)
        f, r = timed(op, arrays, runs, reference)
        tot_f += f
        tot_r += r or 0.0
        rs = f"{r:9.3f} {r / f:7.1f}x" if r is not None else ""
        print(f"  {label:58s} {f:9.3f} {rs}")
    rs = f"{tot_r:9.3f} {tot_r / tot_f:7.1f}x" if reference else ""
    print(f"  {'total':58s} {tot_f:9.3f} {rs}")
    return tot_f


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="3 runs, no reference timings")
    ap.add_argument("--no-ref", action="store_true", help="no reference timings")
    ap.add_argument("--only", choices=["resnet18", "mobilenet", "other", "bert-threads"])
    args = ap.parse_args(argv)
    runs = 3 if args.quick else args.runs
    reference = not (args.quick or args.no_ref)
    core, blas_threads = _fast.blas_core()
    print(f"C kernels: {'built, ' + _fast.isa() if _fast.available() else 'not built'}; "
          f"numpy {np.__version__}, OpenBLAS core {core} ({blas_threads} threads); "
          f"GEMM backend: {_fast.gemm_backend()} ({_fast.threads()} threads)")
    if args.only in (None, "resnet18"):
        total = run_group("ResNet-18 convolutions (batch 1, 224x224, float32)", RESNET18, runs,
                          reference)
        print(f"\nResNet-18, 20 conv layers, fast kernels: {total:.1f} ms")
    if args.only in (None, "mobilenet"):
        run_group("MobileNetV2-style depthwise 3x3", MOBILENET_DW, runs, reference)
        run_group("MobileNetV2-style pointwise 1x1", MOBILENET_PW, runs, reference)
    if args.only in (None, "other"):
        run_group("Pooling, FullyConnected, TransposeConv2d, Conv3d, transformer MatMuls",
                  other_cases(), runs, reference)
    if args.only in (None, "bert-threads"):
        bert_threads(max(runs, 20))
    return 0


if __name__ == "__main__":
    sys.exit(main())
