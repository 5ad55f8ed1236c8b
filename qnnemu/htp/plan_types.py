"""What the HTP prepare pipeline (QNN HTP backend documentation, "Scheduling and Allocation")
leaves behind at graphFinalize: memory blocks, the runlist of steps (ops, spills, fills,
launch/wait pairs, the tiles of ops split to fit VTCM) with their schedule, VTCM offsets and the
ordering constraints overlapping offsets create.

``Graph.htp_plan`` holds one ``PreparedPlan``; the System library, contextGetProperty,
profiling and the chrometrace viewer read it.  ``PreparedPlan.to_optrace()`` is the documented
JSON document (``format: qnnemu.optrace``) that optrace profiling hands out and
``qnnemu-profile-viewer`` reads.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

TCM = "TCM"        # a block living in VTCM
PLAIN = "Plain"    # a block in DDR (graph I/O, weights not streamed, spilled copies)

# "service": the HTP's System Service steps (qnnemu/htp/services.py), appended after the re-schedule
STEP_KINDS = ("op", "spill", "fill", "launch", "wait", "service")
RESOURCES = ("HVX", "HMX", "DMA", "CPU")


@dataclass
class Block:
    """One block of data registered with the allocator ("Scheduling and Allocation" step 1)."""
    name: str
    kind: str                       # TCM or PLAIN
    size: int                       # bytes (rounded up to ``align``)
    align: int
    tensor_id: int | None = None    # the tensor it holds (None: scratch / spill copy)
    offset: int | None = None       # VTCM offset (TCM blocks, after allocation)
    first_step: int | None = None   # first runlist step that needs it in VTCM
    last_step: int | None = None    # last such step
    # Added by the prepare pipeline (issue 5):
    role: str = "tensor"            # "tensor", "fill" (a refilled VTCM copy), "spill" (the DDR copy
                                    # in the spill-fill buffer), "scratch" (per-op working memory)
                                    # or "tile" (one tile's input or output slices of a tiled op)
    ddr_offset: int | None = None   # offset of a "spill" block in the spill-fill buffer


@dataclass
class Step:
    """One runlist entry with its schedule (cycles at the graph's clocks)."""
    index: int
    kind: str                        # one of STEP_KINDS
    name: str                        # op name; "<tensor>:spill" / ":fill"; "<op>:launch" / ":wait"
    op_type: str | None = None       # QNN op type for kind "op"/"launch"/"wait"
    node_index: int | None = None    # index into Graph.nodes (None for spill/fill)
    resource: str = "HVX"            # one of RESOURCES
    inputs: list[str] = field(default_factory=list)    # block names read
    outputs: list[str] = field(default_factory=list)   # block names written
    vtcm_bytes: int = 0              # bytes of TCM blocks live while this step runs
    cycles: int = 0                  # cost-model cycles of the step itself
    start_cycle: int = 0
    end_cycle: int = 0
    thread: int = 0                  # HVX thread / HMX unit / DMA queue index in the schedule
    wait_cycles: int = 0             # cycles it was ready but waited for the scheduler
    overlap_cycles: int = 0          # cycles it ran overlapped with other steps
    overlap_steps: list[int] = field(default_factory=list)
    # Added by the prepare pipeline (issue 5):
    resources: list[str] = field(default_factory=list)  # every resource it uses (e.g. HMX, DMA)
    threads: int = 1                 # HVX threads it is split across (units of ``resource`` held)
    pair: int | None = None          # launch <-> wait partner step index
    bytes: int = 0                   # bytes a spill/fill copies; DDR bytes an op streams
    deps: list[int] = field(default_factory=list)      # steps it waits for (data, launch->wait)
    ready_cycle: int = 0             # when its dependencies and constraints were satisfied
    overlap_wait_cycles: int = 0     # of its wait_cycles, those other steps were running in
    overlap_wait_steps: list[int] = field(default_factory=list)
    note: str = ""                   # cost-model remark (why HVX, folded relu, ...)
    # Tiling (an op whose working set exceeds the VTCM budget, docs/htp-prepare.md "Tiling"):
    tile: int | None = None          # the tile this step fills, computes or spills (None: no tile)
    tile_node: int | None = None     # index into Graph.nodes of the tiled op (DMA steps too)
    tile_shape: list[int] = field(default_factory=list)  # the tile's box of the op's iteration space


@dataclass
class Tiling:
    """How one op whose working set exceeds the VTCM budget is split into tiles: each tile's
    input slices are filled into VTCM by DMA, computed, and its output slices spilled to DDR
    (docs/htp-prepare.md "Tiling")."""
    node: str
    node_index: int
    op_type: str
    rule: str                        # the op family's access rule ("elementwise", "window", ...)
    axis: int                        # iteration-space axis split in chunks (tileable axes before it:
                                     # one index per tile)
    tiles: int                       # number of tiles
    tile_shape: list[int]            # the first tile's box (the largest)
    last_tile_shape: list[int]
    iteration_space: list[int]       # the op's first output (Split: its input)
    buffers: int                     # 2: tile i+1 fills while tile i computes; 1: one tile at a time
    working_set_bytes: int           # VTCM the tiled op needs: buffers x (tile inputs + outputs) + scratch
    untiled_working_set_bytes: int   # what the whole op would need
    tile_in_bytes: int               # VTCM of one tile's input slices (2 KiB croutons)
    tile_out_bytes: int              # VTCM of one tile's output slices
    scratch_bytes: int
    fill_bytes_per_tile: int         # DMA bytes filled for the largest tile
    spill_bytes_per_tile: int        # DMA bytes spilled for the largest tile
    fill_bytes: int                  # all tiles (halo rows of windows read twice)
    spill_bytes: int
    fill_cycles_per_tile: int        # cost model, largest tile
    compute_cycles_per_tile: int
    spill_cycles_per_tile: int
    serial_cycles: int               # cost model: every tile's fill, compute and spill one after another
    pipelined_cycles: int            # cost model: fills and spills on the DMA queue overlapping compute
    steps: list[int] = field(default_factory=list)   # the op's tile steps (runlist indices)


@dataclass
class PreparedPlan:
    graph: str
    soc_model: int
    arch: int
    vtcm_budget_bytes: int
    blocks: list[Block] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    prescheduled_order: list[int] = field(default_factory=list)   # node indices (the "runlist")
    constraints: list[tuple[int, int]] = field(default_factory=list)  # (step a, step b): a before b
    peak_vtcm_bytes: int = 0
    spill_bytes: int = 0
    fill_bytes: int = 0
    spill_fill_buffer_bytes: int = 0
    total_cycles: int = 0
    critical_path_cycles: int = 0
    passes: list[str] = field(default_factory=list)   # one line per pass: what it did
    # Added by the prepare pipeline (issue 5):
    graph_order_peak_bytes: int = 0      # live VTCM peak of the ops in graph order (no spills)
    runlist_peak_bytes: int = 0          # the same for the pre-scheduled runlist
    partitions: list[list[int]] = field(default_factory=list)  # runlist segments (node indices)
    planning_budget_bytes: int = 0       # budget the spill pass kept (<= vtcm_budget_bytes)
    hvx_threads: int = 0
    hmx: bool = False
    reference_clocks: dict = field(default_factory=dict)  # clocks the cycles are counted at (MHz)
    aliases: dict[str, str] = field(default_factory=dict)  # in-place output tensor -> block it shares
    # Tiling (spill_bytes / fill_bytes above include the tiles' spills and fills):
    tilings: list[Tiling] = field(default_factory=list)
    tiles: int = 0                       # tiles of all tiled ops
    tile_fill_bytes: int = 0             # bytes the tiles fill (part of fill_bytes)
    tile_spill_bytes: int = 0            # bytes the tiles spill (part of spill_bytes)
    # FINALIZE_OPTIMIZATION_FLAG (1: graph order, first plan that fits, runlist priority;
    # 2: the searches; 3 with the SoC configured: deeper search, both priority rules)
    optimization_level: int = 2
    schedule_policy: str = "critical-path"
    cores: int = 1                       # NUM_CORES the schedule spreads over

    def tiling_of(self, node: str) -> Tiling | None:
        return next((t for t in self.tilings if t.node == node), None)

    def step_named(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.name == name), None)

    def block_named(self, name: str) -> Block | None:
        return next((b for b in self.blocks if b.name == name), None)

    def to_optrace(self) -> dict:
        """The optrace document: plain JSON types only, keys documented in docs/htp-prepare.md."""
        return {"format": "qnnemu.optrace", "version": 1, "graph": self.graph,
                "soc_model": self.soc_model, "arch": self.arch,
                "vtcm_budget_bytes": self.vtcm_budget_bytes, "peak_vtcm_bytes": self.peak_vtcm_bytes,
                "spill_bytes": self.spill_bytes, "fill_bytes": self.fill_bytes,
                "spill_fill_buffer_bytes": self.spill_fill_buffer_bytes,
                "total_cycles": self.total_cycles, "critical_path_cycles": self.critical_path_cycles,
                "blocks": [asdict(b) for b in self.blocks], "steps": [asdict(s) for s in self.steps],
                "constraints": [list(c) for c in self.constraints], "passes": list(self.passes),
                "graph_order_peak_bytes": self.graph_order_peak_bytes,
                "runlist_peak_bytes": self.runlist_peak_bytes,
                "prescheduled_order": list(self.prescheduled_order),
                "partitions": [list(p) for p in self.partitions],
                "planning_budget_bytes": self.planning_budget_bytes,
                "hvx_threads": self.hvx_threads, "hmx": self.hmx,
                "reference_clocks": dict(self.reference_clocks), "aliases": dict(self.aliases),
                "tilings": [asdict(t) for t in self.tilings], "tiles": self.tiles,
                "tile_fill_bytes": self.tile_fill_bytes, "tile_spill_bytes": self.tile_spill_bytes}
