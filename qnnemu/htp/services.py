"""The HTP's "System Service" steps in the prepared plan (QNN HTP backend documentation, "Post
Process (Chrometrace Generation)", the note on ops classified as "System Service"; "QNN HTP
Analysis Summary (QHAS)", the Dominant Path priorities).

DramToTcm / TcmToDram are the plan's fill and spill steps already.  The other services are added
by :func:`add_system_services`, the one hook the prepare pipeline calls after its re-schedule
(qnnemu/htp/prepare.py), as steps of kind ``"service"`` appended to the runlist (their indices
follow the other steps'; ``op_type`` names the service):

* ``DmaCheckpointSet`` -- at the end of every DMA copy (spill, fill, a tile's fill or spill): the
  producer marks the data written; ``DmaCheckpointWait`` -- where the copy's wait step runs: the
  consumer waits for that checkpoint.  Both on the DMA queue that made the copy.
* ``SyncOp`` -- where an HVX op depends on an HVX op of another thread (data or an ordering
  constraint of the allocator): "an ordering for HVX ops to resolve dependencies between ops".
* ``BlockZapOp`` -- before the first writer of a VTCM tensor whose data is not a multiple of the
  2 KiB block: the block's tail is padded with the zero value.
* ``SystemService`` (L2 prefetch) -- while an op streams DDR data (weights, graph inputs): chunks
  are prefetched into L2 ahead of the op, at ``L2_PREFETCH_BYTES_PER_CYCLE``.

Every service is a marker on the existing schedule: the checkpoints, sync ops and zaps take 0
cycles (the cost model prices their work inside the copies and ops), and the prefetch runs on its
own lane (resource ``CPU``, thread ``PREFETCH_THREAD``: no HVX, HMX or DMA unit) beside the op,
so the makespan, the critical path and every other step's schedule are unchanged.  ``step.note``
says what each one does.
"""
from __future__ import annotations

from .plan_types import TCM, PreparedPlan, Step

SERVICE_KIND = "service"
SYSTEM_SERVICES = ("DmaCheckpointSet", "DmaCheckpointWait", "SyncOp", "BlockZapOp", "SystemService")
BLOCK_BYTES = 2048                  # the VTCM block (crouton) a tensor's data is padded to
L2_PREFETCH_BYTES_PER_CYCLE = 64    # one L2 line per cycle
PREFETCH_THREAD = 1                 # the prefetch lane (the wait steps use CPU thread 0)


def add_system_services(plan: PreparedPlan, raw_bytes: dict[int, int]) -> int:
    """Appends the service steps of ``plan`` (scheduled, see the module docstring);
    ``raw_bytes``: tensor id -> bytes of its data (before rounding to blocks).  Returns how many
    were added; their counts end the re-schedule's line of ``plan.passes``."""
    steps = plan.steps
    first_new = len(steps)
    added: list[Step] = []

    def add(service: str, name: str, at: int, cycles: int, resource: str, thread: int, deps: list[int],
            note: str, bytes_: int = 0) -> None:
        added.append(Step(index=first_new + len(added), kind=SERVICE_KIND, name=name, op_type=service,
                          node_index=None, resource=resource, cycles=cycles, start_cycle=at, end_cycle=at + cycles,
                          thread=thread, resources=[resource], deps=deps, ready_cycle=at, note=note,
                          bytes=bytes_))

    preds: dict[int, set[int]] = {s.index: set(s.deps) for s in steps}
    for a, b in plan.constraints:
        preds[b].add(a)
    for s in list(steps):
        if s.kind in ("spill", "fill") and s.pair is not None:
            w = steps[s.pair]
            add("DmaCheckpointSet", f"{s.name}:checkpoint_set", s.end_cycle, 0, "DMA", s.thread, [s.index],
                f"{s.name} finished writing {s.bytes} B")
            add("DmaCheckpointWait", f"{w.name}:checkpoint_wait", w.start_cycle, 0, "DMA", s.thread,
                [added[-1].index], f"{w.name} waits for {s.name}'s checkpoint")
        if s.kind == "op" and s.resource == "HVX":
            others = sorted(p for p in preds[s.index]
                            if steps[p].kind == "op" and steps[p].resource == "HVX" and steps[p].thread != s.thread)
            if others:
                add("SyncOp", f"{s.name}:sync", s.start_cycle, 0, "HVX", s.thread, others,
                    f"orders {s.name} (thread {s.thread}) after "
                    + ", ".join(f"{steps[p].name} (thread {steps[p].thread})" for p in others))
        if s.kind in ("op", "launch") and s.bytes > 0 and s.cycles > 0:
            cycles = max(1, min(s.cycles, -(-s.bytes // L2_PREFETCH_BYTES_PER_CYCLE)))
            add("SystemService", f"{s.name}:l2_prefetch", s.start_cycle, cycles, "CPU", PREFETCH_THREAD, [],
                f"prefetches {s.bytes} B of DDR data of {s.name} into L2", bytes_=s.bytes)
    zapped = set()
    for blk in plan.blocks:
        raw = raw_bytes.get(blk.tensor_id, 0) if blk.tensor_id is not None else 0
        padded = raw % BLOCK_BYTES == 0
        if blk.kind != TCM or blk.role != "tensor" or blk.first_step is None or not raw or padded or blk.name in zapped:
            continue
        zapped.add(blk.name)
        writer = steps[blk.first_step]
        pad = -raw % BLOCK_BYTES
        add("BlockZapOp", f"{blk.name}:block_zap", writer.start_cycle, 0, "HVX", writer.thread, [],
            f"pads {pad} B of {blk.name}'s last {BLOCK_BYTES} B block with the zero value", bytes_=pad)
    steps.extend(added)
    counts = {name: sum(1 for s in added if s.op_type == name) for name in SYSTEM_SERVICES}
    # on the re-schedule's line: the passes are the six of "Scheduling and Allocation"
    line = ("; system services: " + ", ".join(f"{n} {name}" for name, n in counts.items())
            + " (0-cycle markers, L2 prefetch on its own lane: the schedule is unchanged)")
    if plan.passes:
        plan.passes[-1] += line
    else:
        plan.passes.append(line[2:])
    return len(added)


def is_background_service(op_type: str | None) -> bool:
    """Services the main thread does not run itself (the DMA checkpoint set, the L2 prefetch)."""
    return op_type in ("DmaCheckpointSet", "SystemService")
