"""Config structs for qnnemu.client: ``QnnGraph_Config_t``, ``QnnContext_Config_t`` and
``QnnDevice_Config_t`` carrying the HTP backend's custom configs (HTP/QnnHtpGraph.h,
QnnHtpContext.h, QnnHtpDevice.h; QNN HTP backend documentation, "QNN HTP Backend Extensions").
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..headers import Q
from .cabi import ffi

_PRECISIONS = {"fp16": Q.QNN_PRECISION_FLOAT16, "fp32": Q.QNN_PRECISION_FLOAT32}


class GraphConfig:
    """One QNN config struct (``QnnGraph_Config_t``, ``QnnContext_Config_t`` or
    ``QnnDevice_Config_t``) plus whatever it points to (kept alive with it)."""

    def __init__(self, config, keep: Sequence[Any] = ()):
        self.config = config  # cdata "<kind>_Config_t *"
        self._keep = list(keep)


Config = GraphConfig


def _htp_custom_config(kind: str, custom_type: str, prefix: str, option: str | int,
                       field: Mapping[str, Any]) -> GraphConfig:
    if len(field) != 1:
        raise TypeError(f"{custom_type}: give exactly one union member")
    custom = ffi.new(f"{custom_type} *")
    custom.option = option if isinstance(option, int) else getattr(Q, f"{prefix}{option}")
    (member, value), = field.items()
    setattr(custom, member, value)
    config = ffi.new(f"{kind}_Config_t *")
    config.option = getattr(Q, f"QNN_{kind.split('Qnn')[1].upper()}_CONFIG_OPTION_CUSTOM")
    config.customConfig = custom
    return GraphConfig(config, [custom])


def htp_graph_config(option: str | int, **field: Any) -> GraphConfig:
    """An HTP custom graph config (``QnnHtpGraph_CustomConfig_t``, HTP/QnnHtpGraph.h).

    ``option`` is the suffix of ``QNN_HTP_GRAPH_CONFIG_OPTION_*`` (or its value) and exactly one
    keyword names the union member to set, e.g.
    ``htp_graph_config("PRECISION", precision=Q.QNN_PRECISION_FLOAT16)`` or
    ``htp_graph_config("VTCM_SIZE", vtcmSizeInMB=8)``; a struct member takes a dict
    (``optimizationOption={"type": ..., "floatValue": 2.0}``).
    """
    return _htp_custom_config("QnnGraph", "QnnHtpGraph_CustomConfig_t",
                              "QNN_HTP_GRAPH_CONFIG_OPTION_", option, field)


def htp_context_config(option: str | int, **field: Any) -> GraphConfig:
    """An HTP custom context config (``QnnHtpContext_CustomConfig_t``), for
    :meth:`Backend.context` / :meth:`Backend.context_from_binary`, e.g.
    ``htp_context_config("WEIGHT_SHARING_ENABLED", weightSharingEnabled=True)``."""
    return _htp_custom_config("QnnContext", "QnnHtpContext_CustomConfig_t",
                              "QNN_HTP_CONTEXT_CONFIG_OPTION_", option, field)


def htp_device_config(option: str | int, **field: Any) -> GraphConfig:
    """An HTP custom device config (``QnnHtpDevice_CustomConfig_t``), for ``Backend(...,
    device_configs=...)``, e.g. ``htp_device_config("SOC", socModel=43)`` or
    ``htp_device_config("ARCH", arch={"deviceId": 0, "arch": 73})``."""
    return _htp_custom_config("QnnDevice", "QnnHtpDevice_CustomConfig_t",
                              "QNN_HTP_DEVICE_CONFIG_OPTION_", option, field)


def _config_ptrs(configs: Iterable[Any], keep: list) -> list:
    """Config cdata pointers from GraphConfig objects or raw ``*_Config_t *`` cdata."""
    out = []
    for c in configs:
        if isinstance(c, GraphConfig):
            keep.append(c)
            out.append(c.config)
        else:
            out.append(c)
    return out


def graph_priority_config(priority: int) -> GraphConfig:
    """``QNN_GRAPH_CONFIG_OPTION_PRIORITY`` (a ``Qnn_Priority_t`` such as
    ``Q.QNN_PRIORITY_HIGH``), for :meth:`Context.graph`."""
    config = ffi.new("QnnGraph_Config_t *")
    config.option = Q.QNN_GRAPH_CONFIG_OPTION_PRIORITY
    config.priority = priority
    return GraphConfig(config)
