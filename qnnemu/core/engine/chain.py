"""Element-wise chains of a compiled program (QnnGraph_finalize; issue 13's C engine).

Consecutive C steps that each compute element i of their output from element i of their inputs
(or from a broadcast scalar), all over the same number of elements, are headed by one
``qe_k_chain`` step; ``qe_run`` (csrc/engine.c) then runs them block by block, every step on a
block before any step on the next, the blocks split over the pool's threads.  The values are
those of the steps run one after the other -- each element is computed by the same kernel from
the same operands -- but a block's intermediates are still in L1 when the next step reads them,
and a run of small steps (a HardSwish written as Add, ReluMinMax, Multiply, Divide, each followed
by its float16 rounding in float16 math) splits over the cores as one piece of work.

A step joins a chain only when the blocked run is provably the same computation:

- its kernel is one of ``_BLOCKABLE`` and its operands are whole arrays of the chain's element
  count or single broadcast values;
- every buffer it writes is in the arena, and no two buffers of the chain share bytes unless
  they start at the same offset with the same element size (element i then has one address);
  a broadcast value never shares bytes with a written buffer (the arena reuses bytes whose
  lifetimes do not overlap: a later step could otherwise overwrite a value an earlier step
  still reads in the next block).

A chain never spans a Python fallback node or the output conversions after the last node.
``QNNEMU_ENGINE_CHAINS=0`` turns chains off (the program is then the plain step sequence).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ...ops._fast_eltwise import BINARY, COMPARE
from .program import ARENA, NodeCode

MAX_STEPS = 32        # csrc/engine.c CHAIN_MAX_STEPS
CHAIN_MARK = -1       # csrc/engine.h QE_CHAIN_MARK: a header's buffer count
MAX_PTRS = 8          # CHAIN_MAX_PTRS
MAX_INTS = 16         # CHAIN_MAX_INTS
_COMPARE_CODES = {BINARY[name] for name in COMPARE}


@dataclass
class _Blocked:
    """One step as the chain runs it: element count, where the block's count goes in the
    rewritten int parameters, each buffer's element size (0: broadcast), written buffers."""
    n: int
    n_index: int
    esize: list[int]
    ints: list[int]
    written: list[int]      # positions in the step's buffer list
    n_mult: int = 1         # the parameter at n_index counts elements x n_mult (bytes: 4)


def enabled() -> bool:
    return os.environ.get("QNNEMU_ENGINE_CHAINS", "1") != "0"


def _contiguous_strides(dims: list[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return out[::-1]


def _binary(ints: list[int], np_: int) -> _Blocked | None:
    # ints: op, rank r, out dims[r], in[0] strides[r], in[1] strides[r] [, folded activation]
    if np_ != 3 or len(ints) < 2:
        return None
    op, r = ints[0], ints[1]
    if r < 1 or len(ints) not in (2 + 3 * r, 3 + 3 * r):
        return None
    act = ints[2 + 3 * r:]
    dims, sa, sb = ints[2:2 + r], ints[2 + r:2 + 2 * r], ints[2 + 2 * r:2 + 3 * r]
    full = _contiguous_strides(dims)
    kinds = []
    for strides in (sa, sb):
        if strides == full:
            kinds.append(1)
        elif all(v == 0 for v in strides):
            kinds.append(0)
        else:
            return None
    n = int(np.prod(dims, dtype=np.int64))
    if n == 1:
        kinds = [1, 1]    # (one element: a "broadcast" operand is element 0 of a length-1 array)
    return _Blocked(n, 2, [4 * kinds[0], 4 * kinds[1], 1 if op in _COMPARE_CODES else 4],
                    [op, 1, n, kinds[0], kinds[1], *act], [2])


def _unary(ints: list[int], np_: int) -> _Blocked | None:
    if np_ != 2 or len(ints) != 2:      # op, n
        return None
    return _Blocked(ints[1], 1, [4, 4], list(ints), [1])


def _n_first(np_expected: int, nints: int, written: list[int]):
    def parse(ints: list[int], np_: int) -> _Blocked | None:
        if np_ != np_expected or len(ints) != nints:
            return None
        return _Blocked(ints[0], 0, [4] * np_, list(ints), written)
    return parse


def _silu(ints: list[int], np_: int) -> _Blocked | None:
    # x, s, y or (the plan's SiLU fold) x, y
    return _n_first(np_, 2, [1, 2] if np_ == 3 else [1])(ints, np_) if np_ in (2, 3) else None


def _copy(ints: list[int], np_: int) -> _Blocked | None:
    # (bytes): blocked as float32 elements when the byte count is a whole number of them
    if np_ != 2 or len(ints) != 1 or ints[0] % 4:
        return None
    return _Blocked(ints[0] // 4, 0, [4, 4], [ints[0]], [1], n_mult=4)


# kernel -> parser of its step into the blocked form (None: this step cannot be blocked)
_BLOCKABLE = {
    "qe_k_binary_f32": _binary,
    "qe_k_unary_f32": _unary,
    "qe_k_fp16_round": _n_first(2, 2, [1]),       # n, even
    "qe_k_fp16_to_fp32": _n_first(2, 1, [1]),     # n
    "qe_k_silu_f32": _silu,                        # n, x_first
    "qe_k_copy": _copy,
}


class _Chains:
    def __init__(self, builder):
        self.b = builder
        self.region_size = {buf: builder.regions[r][0] for buf, r in builder.region_of_buf.items()}

    def blocked(self, k: int) -> _Blocked | None:
        name = self.b.kernel_names[k]
        row = self.b.steps[k]
        ints = self.b.ints[row[3]:row[3] + row[4]]
        parse = _BLOCKABLE.get(name)
        if parse is None:
            return None
        blk = parse(ints, row[2])
        if blk is None or row[2] > MAX_PTRS or len(blk.ints) > MAX_INTS:
            return None
        return blk

    def accesses(self, k: int, blk: _Blocked):
        """(offset, size, element size, written) of the step's arena buffers; None if it
        writes outside the arena."""
        row = self.b.steps[k]
        ids = self.b.pbuf[row[1]:row[1] + row[2]]
        out = []
        for pos, buf in enumerate(ids):
            kind, value = self.b.bufs[buf]
            written = pos in blk.written
            if kind != ARENA:
                if written:
                    return None
                continue
            # the bytes the step touches: its region's (the arena may place several values in
            # one region), at least the n elements it reads or writes (a buffer without a region
            # of its own, e.g. a view into another value's bytes, has just those)
            touched = blk.n * blk.esize[pos] if blk.esize[pos] else 4
            out.append((int(value), max(int(self.region_size.get(buf, 0)), touched), blk.esize[pos], written))
        return out

    @staticmethod
    def compatible(acc: list, new: list) -> bool:
        for o1, s1, e1, w1 in new:
            for o2, s2, e2, w2 in acc:
                if not (w1 or w2):
                    continue
                if o1 + s1 <= o2 or o2 + s2 <= o1:
                    continue                      # disjoint
                if o1 == o2 and e1 == e2 and e1 > 0:
                    continue                      # the same elements
                return False
        # within the step itself: a written buffer against its own other operands
        for i, (o1, s1, e1, w1) in enumerate(new):
            for o2, s2, e2, w2 in new[i + 1:]:
                if not (w1 or w2) or o1 + s1 <= o2 or o2 + s2 <= o1:
                    continue
                if o1 == o2 and e1 == e2 and e1 > 0:
                    continue
                return False
        return True


def fuse(builder, nodes: list[NodeCode], epilogue: tuple[int, int]):
    """Inserts chain headers into ``builder``'s steps; returns the nodes and epilogue with their
    step ranges shifted, and the chains made [(first step, steps)]."""
    if not enabled() or "qe_k_chain" not in dir(builder.lib):
        return nodes, epilogue, []
    ch = _Chains(builder)
    # the step ranges chains may cover: consecutive C nodes (a fallback node ends a run)
    runs: list[tuple[int, int]] = []
    start = None
    last = 0
    for code in nodes:
        if code.fallback:
            if start is not None:
                runs.append((start, last))
            start = None
            continue
        if code.last > code.first:
            if start is None:
                start = code.first
            last = code.last
    if start is not None:
        runs.append((start, last))
    chains: list[tuple[int, int, list]] = []   # (first step, count, header ints)
    for lo, hi in runs:
        k = lo
        while k < hi:
            members: list[tuple[int, _Blocked]] = []
            real = 0              # members that are not a folded activation's qe_k_nop
            acc: list = []
            n = None
            j = k
            while j < hi and len(members) < MAX_STEPS:
                if n is not None and builder.kernel_names[j] == "qe_k_nop" and builder.steps[j][2] == 0:
                    members.append((j, _Blocked(n, 0, [], [n], [])))   # (qe_k_nop ignores its n)
                    j += 1
                    continue
                blk = ch.blocked(j)
                if blk is None or (n is not None and blk.n != n) or blk.n <= 0:
                    break
                a = ch.accesses(j, blk)
                if a is None or not ch.compatible(acc, a):
                    break
                members.append((j, blk))
                real += 1
                acc += a
                n = blk.n
                j += 1
            if real >= 2 and n is not None:
                header = [len(members), int(n)]
                for step, blk in members:
                    row = builder.steps[step]
                    header += [blk.n_index, blk.n_mult, row[2], *blk.esize, len(blk.ints), *blk.ints]
                chains.append((members[0][0], len(members), header))
                k = j
            else:
                k = max(j, k + 1)
    if not chains:
        return nodes, epilogue, []
    # rebuild the step table with the headers in front of their chains
    steps, names = [], []
    position = []         # old step index -> new index
    headers_at = {first: header for first, _, header in chains}
    addr = builder.fn_address("qe_k_chain")
    for k, row in enumerate(builder.steps):
        head = headers_at.get(k)
        if head is not None:
            steps.append([addr, len(builder.pbuf), CHAIN_MARK, len(builder.ints), len(head), len(builder.dbls), 0])
            names.append("qe_k_chain")
            builder.ints.extend(int(v) for v in head)
        position.append(len(steps))
        steps.append(row)
        names.append(builder.kernel_names[k])
    position.append(len(steps))
    builder.steps[:] = steps
    builder.kernel_names[:] = names

    def pos(i: int) -> int:
        # a header belongs to what starts at its step: the node whose first step it heads
        return position[i] - (1 if i in headers_at else 0)

    out = [NodeCode(pos(c.first), pos(c.last), c.fallback) for c in nodes]
    new_epilogue = (pos(epilogue[0]), pos(epilogue[1]))
    return out, new_epilogue, [(pos(f), m) for f, m, _ in chains]


__all__ = ["fuse", "enabled"]
