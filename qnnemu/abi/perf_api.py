"""HTP/QnnHtpPerfInfrastructure.h: the functions of the QnnHtpDevice_PerfInfrastructure_t that
deviceGetInfrastructure hands out (createPowerConfigId, destroyPowerConfigId, setPowerConfig,
setMemoryConfig); the votes live in qnnemu/htp/perf.py.

Imported by entry.py so that the ``@perf_entry`` functions fill their ``qnnemu_perf_*`` slots.
"""
from __future__ import annotations

from ..errors import QnnError
from ..headers import Q
from ..htp.perf import PERF
from . import marshal
from .entry import _configs, perf_entry
from .marshal import require


@perf_entry
def createPowerConfigId(deviceId, coreId, powerConfigId):
    require(powerConfigId, Q.QNN_COMMON_ERROR_INVALID_ARGUMENT, "createPowerConfigId", "powerConfigId")
    powerConfigId[0] = PERF.create_id(int(deviceId), int(coreId))


@perf_entry
def destroyPowerConfigId(powerConfigId):
    PERF.destroy_id(int(powerConfigId))


_POWER_FIELDS = {
    Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_DCVS_V3: "dcvsV3Config",
    Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_RPC_CONTROL_LATENCY: "rpcControlLatencyConfig",
    Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_RPC_POLLING_TIME: "rpcPollingTimeConfig",
    Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_HMX_TIMEOUT_INTERVAL_US: "hmxTimeoutIntervalUsConfig",
    Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_HMX_V2: "hmxV2Config",
    Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_ADAPTIVE_POLLING_TIME: "adaptivePollingTimeConfig",
    Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_DDR_PERF_MODE: "ddrPerfModeConfig",
}


@perf_entry
def setPowerConfig(powerConfigId, config):
    require(config, Q.QNN_COMMON_ERROR_INVALID_ARGUMENT, "setPowerConfig", "config")
    votes = []
    for i, c in enumerate(_configs(config, "QnnHtpPerfInfrastructure_PowerConfig_t")):
        field = _POWER_FIELDS.get(int(c.option))
        if field is None:
            raise QnnError(Q.QNN_COMMON_ERROR_INVALID_ARGUMENT,
                           f"setPowerConfig: config[{i}].option: unknown power config option {int(c.option)}",
                           rule="QNNEMU-perf-option")
        votes.append((int(c.option), marshal.to_python(getattr(c, field))))
    PERF.set_power(int(powerConfigId), votes)


@perf_entry
def setMemoryConfig(deviceId, coreId, config):
    require(config, Q.QNN_COMMON_ERROR_INVALID_ARGUMENT, "setMemoryConfig", "config")
    for i, c in enumerate(_configs(config, "QnnHtpPerfInfrastructure_MemoryConfig_t")):
        if int(c.option) != Q.QNN_HTP_PERF_INFRASTRUCTURE_MEMORY_CONFIGOPTION_GROW_SIZE:
            raise QnnError(Q.QNN_COMMON_ERROR_INVALID_ARGUMENT,
                           f"setMemoryConfig: config[{i}].option: unknown memory config option {int(c.option)}",
                           rule="QNNEMU-perf-memory-option")
        PERF.memory.setdefault((int(deviceId), int(coreId)), {})[int(c.option)] = int(c.memGrowSizeConfig)
