"""HTP/QnnHtpPerfInfrastructure.h through the C ABI, for tools and applications: the functions
``deviceGetInfrastructure`` hands out (createPowerConfigId, setPowerConfig, destroyPowerConfigId)
on any backend library the client loaded (QNN HTP backend documentation, "QNN HTP Performance
Infrastructure API"; the votes of a named perf profile come from qnnemu.htp.perf.profile_votes,
as "QNN HTP Backend Extensions" places them).

``PerfInfrastructure(backend).set_power(pid, votes)`` has the signature of
``qnnemu.htp.perf.PerfInfrastructure.set_power``, so ``qnnemu.htp.perf.ProfileSession`` drives a
perf profile through the C ABI of the loaded library with it."""
from __future__ import annotations

from ..headers import Q
from ..htp import perf as htp_perf
from .cabi import QnnCallError, ffi


class PerfInfrastructure:
    """The perf infrastructure of ``backend`` (a qnnemu.client.Backend)."""

    def __init__(self, backend):
        out = ffi.new("QnnHtpDevice_Infrastructure_t **")
        backend.call("deviceGetInfrastructure", out)
        if out[0] == ffi.NULL:
            raise QnnCallError("deviceGetInfrastructure", Q.QNN_COMMON_ERROR_NOT_SUPPORTED,
                               "no infrastructure returned")
        self._infra = out[0].perfInfra
        self.ids: list[int] = []

    def create_power_config_id(self, device_id: int = 0, core_id: int = 0) -> int:
        out = ffi.new("uint32_t *")
        self._check("createPowerConfigId", self._infra.createPowerConfigId(device_id, core_id, out))
        self.ids.append(int(out[0]))
        return int(out[0])

    def set_power(self, power_config_id: int, votes) -> None:
        """``votes``: (option, value) pairs as qnnemu.htp.perf.profile_votes gives them (a dict
        for a struct member such as DCVS v3, a number for a scalar one)."""
        keep = []
        for option, value in votes:
            c = ffi.new("QnnHtpPerfInfrastructure_PowerConfig_t *")
            c.option = option
            member = htp_perf.POWER_OPTION_FIELDS[option]
            if isinstance(value, dict):
                for key, v in value.items():
                    setattr(getattr(c, member), key, v)
            else:
                setattr(c, member, value)
            keep.append(c)
        if not keep:
            return
        array = ffi.new("const QnnHtpPerfInfrastructure_PowerConfig_t *[]", [*keep, ffi.NULL])
        self._check("setPowerConfig", self._infra.setPowerConfig(power_config_id, array))

    def destroy(self, power_config_id: int) -> None:
        self._check("destroyPowerConfigId", self._infra.destroyPowerConfigId(power_config_id))
        if power_config_id in self.ids:
            self.ids.remove(power_config_id)

    def close(self) -> None:
        """Destroys every id this object created (their votes go with them)."""
        for pid in list(self.ids):
            self.destroy(pid)

    @staticmethod
    def _check(function: str, code: int) -> None:
        if code != Q.QNN_SUCCESS:
            raise QnnCallError(function, code, None)
