"""The HTP settings a graph is prepared and run with: its QnnHtpGraph_CustomConfig_t options
(seed 002 "QNN HTP Backend API", graph options) resolved against its device's SoC.

``graph_settings(graph)`` is what the prepare pipeline, the cost model and profiling read;
the config rules themselves (ranges, when an option may change) are checked where the configs
arrive (graphCreate / graphSetConfig)."""
from __future__ import annotations

from dataclasses import dataclass

from ..core.device import DeviceModel
from ..headers import Q

MIB = 1 << 20


@dataclass(frozen=True)
class GraphSettings:
    vtcm_bytes: int            # VTCM budget of the graph
    hvx_threads: int
    precision_fp16: bool
    optimization_level: int    # FINALIZE_OPTIMIZATION_FLAG (1..3)
    dlbc: bool
    weights_packing: bool
    fold_relu_into_conv: bool
    short_depth_conv_on_hmx: bool
    num_cores: int


def device_model(graph) -> DeviceModel:
    """The device the graph's context was created on (the default device without one)."""
    dev = getattr(getattr(graph, "context", None), "device", None)
    return dev.model if dev is not None else DeviceModel()


def _htp(graph, option: str, member: str, default):
    cfg = (getattr(graph, "configs", None) or {}).get("htp", {}).get(option)
    if isinstance(cfg, dict) and member in cfg:
        return cfg[member]
    return default


def graph_settings(graph) -> GraphSettings:
    model = device_model(graph)
    vtcm = model.vtcm_mb * MIB
    mb = _htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB", "vtcmSizeInMB", None)
    if mb is None:
        mb = _htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE", "vtcmSizeInMB", None)
    if mb:  # 0 = the SoC's maximum
        vtcm = min(vtcm, int(mb) * MIB)
    nbytes = _htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_BYTES", "vtcmSizeInBytes", None)
    if nbytes:
        vtcm = min(vtcm, int(nbytes))
    precision = _htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION", "precision", None)
    return GraphSettings(
        vtcm_bytes=vtcm,
        hvx_threads=int(_htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS", "numHvxThreads", 0) or 4),
        precision_fp16=precision == Q.QNN_PRECISION_FLOAT16,
        optimization_level=2,
        dlbc=False,
        weights_packing=bool(_htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING", "weightsPacking", False)),
        fold_relu_into_conv=not _htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_FOLD_RELU_ACTIVATION_INTO_CONV_OFF",
                                     "foldReluActivationIntoConvOff", False),
        short_depth_conv_on_hmx=not _htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_SHORT_DEPTH_CONV_ON_HMX_OFF",
                                         "shortDepthConvOnHmxOff", False),
        num_cores=int(_htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_NUM_CORES", "numCores", 0) or 1),
    )
