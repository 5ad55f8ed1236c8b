"""The modelled time of contextCreateFromBinary on the device: reading the binary
(QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET) and initializing its graphs on the HTP
(QNN_HTP_CONTEXT_CONFIG_OPTION_INIT_ACCELERATION); QNN HTP backend documentation, "QNN HTP Context
Config Options" (docs/context-binary.md "Read budget and init acceleration").

The documentation gives no numbers, only the directions: reading in chunks "might" slow
initialization down, init acceleration "allows hardware to utilize maximum resources" and "may not
be effective for small graphs with a few number of ops".  The constants below are the emulator's
own assumptions, chosen so those directions hold and documented as such:

- a read costs ``READ_LATENCY_US`` (the request: page faults of a mapped file, a block I/O
  submission) plus its bytes at ``READ_BYTES_PER_US`` (UFS-class sequential flash reads);
- a graph's initialization costs ``GRAPH_INIT_US`` (its session, VTCM and sequencer set-up,
  serial) plus ``STEP_INIT_US`` per step of its recorded plan (sequencer entries and DMA
  descriptors written); with INIT_ACCELERATION the per-step part is spread over every HVX thread
  of the device, so a graph of few steps gains little.
"""
from __future__ import annotations

from dataclasses import dataclass

from .format import ReadStats

READ_LATENCY_US = 40.0
READ_BYTES_PER_US = 2000.0      # 2 GB/s
GRAPH_INIT_US = 150.0
STEP_INIT_US = 2.0


@dataclass(frozen=True)
class LoadTime:
    read_us: float
    init_us: float
    init_threads: int

    @property
    def total_us(self) -> float:
        return self.read_us + self.init_us


def read_us(read: ReadStats) -> float:
    return read.chunks * READ_LATENCY_US + read.bytes_read / READ_BYTES_PER_US


def init_us(step_counts: list[int], threads: int) -> float:
    """Initialization of graphs with ``step_counts`` plan steps, the per-step part over
    ``threads`` HVX threads (1 without INIT_ACCELERATION)."""
    return sum(GRAPH_INIT_US + steps * STEP_INIT_US / max(1, threads) for steps in step_counts)


def load_time(read: ReadStats, step_counts: list[int], threads: int) -> LoadTime:
    return LoadTime(read_us(read), init_us(step_counts, threads), threads)
