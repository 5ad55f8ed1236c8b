"""HTP/QnnHtpPerfInfrastructure.h: the functions of the QnnHtpDevice_PerfInfrastructure_t that
deviceGetInfrastructure hands out (createPowerConfigId, destroyPowerConfigId, setPowerConfig,
setMemoryConfig).  This layer copies the C structs (every power config option of QNN 2.50,
CENG / DCVS_V3_EXP / CENG_EXP included); the rules and the votes live in qnnemu/htp/perf.py
(docs/htp-perf.md), whose warning rules reach the app's log through qnnemu/rules.py (the entry
wrapper routes them to the call's logger).

Imported by entry.py so that the ``@perf_entry`` functions fill their ``qnnemu_perf_*`` slots.
"""
from __future__ import annotations

from ..htp import perf as htp_perf
from ..htp.perf import PERF, POWER_OPTION_FIELDS
from ..location import Location
from . import marshal
from .library import active_logger as _active_logger, configs as _configs, perf_entry
from .marshal import require

_NULL_RULE = "QNNEMU-perf-arg-null"


@perf_entry
def createPowerConfigId(deviceId, coreId, powerConfigId):
    # The vendor library answers a NULL out-pointer with ERROR_FAILED (measured).
    require(powerConfigId, htp_perf.FAILED, "createPowerConfigId", "powerConfigId", rule=_NULL_RULE)
    pid = PERF.create_id(int(deviceId), int(coreId))
    powerConfigId[0] = pid
    _active_logger().debug(f"createPowerConfigId: id {pid} on device {int(deviceId)} core {int(coreId)}")


@perf_entry
def destroyPowerConfigId(powerConfigId):
    PERF.destroy_id(int(powerConfigId))
    _active_logger().debug(f"destroyPowerConfigId: id {int(powerConfigId)} and all its votes removed")


@perf_entry
def setPowerConfig(powerConfigId, config):
    pid = int(powerConfigId)
    PERF.lookup("setPowerConfig", pid)   # an unknown id is reported before anything else
    require(config, htp_perf.INVALID_INPUT, "setPowerConfig", "config", rule=_NULL_RULE)
    entries = []
    for c in _configs(config, "QnnHtpPerfInfrastructure_PowerConfig_t", Location("setPowerConfig").field("config")):
        option = int(c.option)
        member = POWER_OPTION_FIELDS.get(option)
        entries.append((option, None if member is None else marshal.to_python(getattr(c, member))))
    PERF.set_power(pid, entries)
    cfg = PERF.configs[pid]
    clocks = PERF.clocks(cfg.device_id, cfg.core_id)
    _active_logger().debug(f"setPowerConfig: id {pid}: {len(entries)} vote(s) applied; device "
                           f"{cfg.device_id} core {cfg.core_id} now runs at {clocks}")


@perf_entry
def setMemoryConfig(deviceId, coreId, config):
    require(config, htp_perf.INVALID_INPUT, "setMemoryConfig", "config", rule=_NULL_RULE)
    PERF.set_memory(int(deviceId), int(coreId),
                    [(int(c.option), int(c.memGrowSizeConfig))
                     for c in _configs(config, "QnnHtpPerfInfrastructure_MemoryConfig_t",
                                       Location("setMemoryConfig").field("config"))])
