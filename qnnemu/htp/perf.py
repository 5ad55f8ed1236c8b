"""HTP/QnnHtpPerfInfrastructure.h: power-config ids and the performance votes recorded on them
(process-wide, like the DSP's)."""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from ..errors import QnnError
from ..headers import Q


@dataclass
class PowerConfigId:
    device_id: int
    core_id: int
    votes: dict[int, dict] = field(default_factory=dict)


class PerfInfrastructure:
    """Power-config ids and the votes recorded on them (process-wide, like the DSP's)."""

    def __init__(self):
        self._ids = itertools.count(1)
        self.configs: dict[int, PowerConfigId] = {}
        self.memory: dict[tuple[int, int], dict[int, int]] = {}
        self.lock = threading.Lock()

    def create_id(self, device_id: int, core_id: int) -> int:
        with self.lock:
            pid = next(self._ids)
            self.configs[pid] = PowerConfigId(device_id, core_id)
            return pid

    def destroy_id(self, pid: int) -> None:
        with self.lock:
            if self.configs.pop(pid, None) is None:
                raise QnnError(Q.QNN_COMMON_ERROR_INVALID_ARGUMENT,
                               f"destroyPowerConfigId: powerConfigId {pid} does not exist",
                               rule="QNNEMU-perf-id-unknown")

    def set_power(self, pid: int, votes: list[tuple[int, dict]]) -> None:
        with self.lock:
            cfg = self.configs.get(pid)
            if cfg is None:
                raise QnnError(Q.QNN_COMMON_ERROR_INVALID_ARGUMENT,
                               f"setPowerConfig: powerConfigId {pid} does not exist "
                               f"(create it with createPowerConfigId)", rule="QNNEMU-perf-id-unknown")
            for option, values in votes:
                cfg.votes[option] = values


PERF = PerfInfrastructure()


@dataclass(frozen=True)
class Clocks:
    """The clocks the active votes give (what the cost model turns cycles into time with)."""
    core_mhz: float     # HVX / scalar core clock
    hmx_mhz: float      # HMX clock
    bus_mhz: float      # DDR bus clock (DMA bandwidth)
    corner: str         # the voltage corner name of the core vote (e.g. "NOM", "TURBO")


NOMINAL = Clocks(core_mhz=1000.0, hmx_mhz=1000.0, bus_mhz=2000.0, corner="NOM")


def current_clocks(device_id: int = 0, core_id: int = 0) -> Clocks:
    """The clocks of the device/core's active vote; NOMINAL without votes (first version: the
    votes do not move the clocks yet)."""
    return NOMINAL
