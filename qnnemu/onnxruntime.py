"""ONNX Runtime's QNN execution provider on qnnemu, in one call.

    import qnnemu.onnxruntime as qort
    sess = qort.session("model.onnx")                  # every node on libQnnHtpEmu.so
    sess = qort.session("model.onnx", provider_options={"enable_htp_shared_memory_allocator": "1"})

- ``provider_options(**overrides)``: QNN EP options with ``backend_path`` set to our
  ``libQnnHtpEmu.so`` and defaults that keep the whole model on the backend;
- ``session(model, ...)``: registers the QNN EP plugin library of the ``onnxruntime-qnn``
  package (once per process), picks its ``QNNExecutionProvider`` device, disables the CPU EP
  fallback (a node the emulator cannot take fails the session instead of silently running on
  the CPU) and creates the ``onnxruntime.InferenceSession``;
- ``preload_rpcmem()``: loads our ``libcdsprpc.so`` with ``RTLD_GLOBAL`` so that the EP's
  ``dlopen("libcdsprpc.so")`` (``enable_htp_shared_memory_allocator=1``) finds it. ``session``
  does this; the backend's first ``QnnInterface_getProviders`` would too (its loader dlopens the
  package's libcdsprpc.so, there is no DT_NEEDED), but the EP looks the library up before it
  loads the backend;
- ``shared_value(sess, shape, dtype)`` / ``run_shared(sess, feeds)``: with
  ``enable_htp_shared_memory_allocator=1``, ``OrtValue``s in the EP's HTP shared memory (rpcmem)
  and a run through IOBinding with every input and output there: the EP registers that memory
  with ``memRegister`` and the backend reads and writes it in place (no copies between ONNX
  Runtime and the backend). ``sess.run`` with numpy feeds works too, through client buffers;
- ``ep_context_model(binary, graph_names)``: an EPContext ONNX model wrapping a context binary
  made anywhere (``qnnemu.client``, ``qnnemu-context-binary-generator``), so that ONNX Runtime
  runs its graphs without preparing anything;
- ``lora_run_options(graph_name, section_path, config_path)``: ``onnxruntime.RunOptions`` that
  make the QNN EP apply a LoRA adapter (a ``QNN_CONTEXT_SECTION_UPDATABLE`` binary section)
  before the run (see the function).
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from .headers import backend_library_path, library_dir

EP_NAME = "QNNExecutionProvider"
QUALCOMM_VENDOR_ID = 0x5143  # the vendor of the EP's "QnnHtpShared" HOST_ACCESSIBLE memory

# Defaults: our backend; graph I/O (de)quantization stays on the QNN EP, so with the CPU fallback
# disabled a quantized model still runs entirely on qnnemu.
DEFAULT_OPTIONS = {
    "offload_graph_io_quantization": "0",
}

_lock = threading.Lock()
_state: dict[str, Any] = {}


def rpcmem_library_path() -> str:
    """Our libcdsprpc.so (rpcmem_alloc, rpcmem_to_fd... on memfds), next to the backend."""
    return os.path.join(library_dir(), "libcdsprpc.so")


def preload_rpcmem() -> ctypes.CDLL:
    """Loads our libcdsprpc.so into global symbol scope (once); returns it."""
    with _lock:
        if "rpcmem" not in _state:
            _state["rpcmem"] = ctypes.CDLL(rpcmem_library_path(), mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        return _state["rpcmem"]


def _option_value(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (str, int, float, os.PathLike)):
        return os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    raise TypeError(f"QNN EP option {key!r}: {value!r} is not a string, number, bool or path")


def provider_options(**overrides: Any) -> dict[str, str]:
    """QNN EP provider options for qnnemu; ``overrides`` win (values become strings)."""
    opts = {"backend_path": backend_library_path(), **DEFAULT_OPTIONS}
    opts.update({k: _option_value(k, v) for k, v in overrides.items()})
    return opts


_provider_options = provider_options


def _ort():
    try:
        import onnxruntime
    except ImportError as e:
        raise ImportError("qnnemu.onnxruntime needs the onnxruntime package (pip install onnxruntime-qnn)") from e
    return onnxruntime


def register_qnn_ep() -> None:
    """Registers the onnxruntime-qnn package's QNN EP plugin library with ONNX Runtime, once."""
    ort = _ort()
    with _lock:
        if _state.get("registered"):
            return
        try:
            import onnxruntime_qnn
        except ImportError as e:
            raise ImportError("the QNN execution provider comes with the onnxruntime-qnn package "
                              "(pip install onnxruntime-qnn)") from e
        try:
            ort.register_execution_provider_library(EP_NAME, onnxruntime_qnn.get_library_path())
        except Exception as e:  # registered earlier in this process by someone else
            if "already" not in str(e).lower():
                raise
        _state["registered"] = True


def qnn_device():
    """The QNN EP's ``OrtEpDevice`` (registering the EP library first)."""
    register_qnn_ep()
    devices = [d for d in _ort().get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        raise RuntimeError(f"ONNX Runtime lists no {EP_NAME} device after registering onnxruntime-qnn's library")
    return devices[0]


def session(model, *, provider_options: dict | None = None, session_options=None,
            disable_cpu_fallback: bool = True):
    """An ``onnxruntime.InferenceSession`` of ``model`` on the QNN EP with qnnemu as the backend.

    ``model``: a path, the serialized bytes, or an ``onnx.ModelProto``. ``provider_options``
    override ``provider_options()``. ``session_options`` (an ``onnxruntime.SessionOptions``)
    is used as given, plus the QNN EP and, with ``disable_cpu_fallback``,
    ``session.disable_cpu_ep_fallback=1`` (and the Python-level retry of a failed run on the
    CPU EP is turned off: a failing run raises the EP's error).
    """
    ort = _ort()
    device = qnn_device()
    preload_rpcmem()
    so = session_options if session_options is not None else ort.SessionOptions()
    if disable_cpu_fallback:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices([device], _provider_options(**(provider_options or {})))
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    elif isinstance(model, os.PathLike):
        model = os.fspath(model)
    sess = ort.InferenceSession(model, sess_options=so)
    if disable_cpu_fallback:
        # The Python InferenceSession answers an EP failure in run() (EP_FAIL, e.g. a LoRA
        # section the backend refuses) by re-creating the session on the CPU EP, which the
        # disabled fallback then refuses: the caller would see that error instead of the EP's,
        # and the session would lose its state. Let the EP's error through.
        sess.disable_fallback()
    return sess


_ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
              "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int16)": "int16",
              "tensor(uint16)": "uint16", "tensor(int32)": "int32", "tensor(uint32)": "uint32",
              "tensor(int64)": "int64", "tensor(uint64)": "uint64", "tensor(bool)": "bool"}


def shared_value(sess, shape, dtype="float32"):
    """An ``OrtValue`` of ``shape`` x ``dtype`` in ``sess``'s HTP shared memory (rpcmem).

    Needs a session created with ``enable_htp_shared_memory_allocator=1``."""
    import numpy as np
    ort = _ort()
    C = ort.capi._pybind_state
    device = C.OrtDevice(int(ort.OrtMemoryInfoDeviceType.CPU), int(ort.OrtDeviceMemoryType.HOST_ACCESSIBLE),
                         QUALCOMM_VENDOR_ID, 0)
    try:
        value = sess._sess.create_ortvalue_from_shape_and_type([int(n) for n in shape], np.dtype(dtype).type, device)
    except Exception as e:
        raise RuntimeError(f"no HTP shared-memory allocator in this session ({e}); create it with "
                           f"provider_options={{'enable_htp_shared_memory_allocator': '1'}}") from e
    return ort.OrtValue(value, session=sess._sess)


def run_shared(sess, feeds: dict, output_names: list[str] | None = None) -> list:
    """Runs ``sess`` with every input and (static-shape) output in HTP shared memory; returns
    the outputs as numpy arrays (copies)."""
    import numpy as np
    binding = sess.io_binding()
    keep = []
    for inp in sess.get_inputs():
        array = np.ascontiguousarray(feeds[inp.name])
        value = shared_value(sess, array.shape, array.dtype)
        value.update_inplace(array)
        binding.bind_ortvalue_input(inp.name, value)
        keep.append(value)
    outputs = [o for o in sess.get_outputs() if output_names is None or o.name in output_names]
    for out in outputs:
        if all(isinstance(n, int) for n in out.shape) and out.type in _ORT_TYPES:
            value = shared_value(sess, out.shape, _ORT_TYPES[out.type])
            binding.bind_ortvalue_output(out.name, value)
            keep.append(value)
        else:  # dynamic shape: ONNX Runtime allocates it
            binding.bind_output(out.name)
    sess.run_with_iobinding(binding)
    return [np.array(v.numpy(), copy=True) for v in binding.get_outputs()]


# ---------------------------------------------------------------------------- EPContext models
# The EPContext contrib op (domain com.microsoft) as the QNN EP writes and reads it.
EP_CONTEXT_DOMAIN = "com.microsoft"
EP_CONTEXT_SOURCE = EP_NAME  # the EP takes EPContext nodes whose source is "QNN" or its own name
LORA_CONFIG_RUN_OPTION = "qnn.lora_config"


def _onnx_elem_type(qnn_dtype: int, tensor_name: str) -> int:
    """The ONNX element type the QNN EP exchanges for a graph I/O of ``qnn_dtype``: float types
    as they are, fixed-point types as their storage integers (the EP passes the bytes as they
    are when the graph I/O is quantized)."""
    from onnx import TensorProto

    from .core import dtypes
    from .headers import Q
    if qnn_dtype == Q.QNN_DATATYPE_FLOAT_32:
        return TensorProto.FLOAT
    if qnn_dtype == Q.QNN_DATATYPE_FLOAT_16:
        return TensorProto.FLOAT16
    if qnn_dtype == Q.QNN_DATATYPE_BOOL_8:
        return TensorProto.BOOL
    if not dtypes.is_known(qnn_dtype):
        raise ValueError(f"tensor {tensor_name!r}: unknown Qnn_DataType_t {qnn_dtype:#x}")
    storage = dtypes.numpy_dtype(qnn_dtype)
    elem = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int16": TensorProto.INT16,
            "uint16": TensorProto.UINT16, "int32": TensorProto.INT32, "uint32": TensorProto.UINT32,
            "int64": TensorProto.INT64, "uint64": TensorProto.UINT64, "float64": TensorProto.DOUBLE,
            "float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}.get(storage.name)
    if elem is None:
        raise ValueError(f"tensor {tensor_name!r}: {dtypes.name(qnn_dtype)} has no ONNX element type")
    return elem


def ep_context_model(binary: bytes, graph_names=None, path=None, embed: bool = True, *,
                     system_library=None, source: str = EP_CONTEXT_SOURCE,
                     opset: int = 17, ir_version: int = 8):
    """An ONNX model of EPContext nodes running the graphs of a context ``binary`` on the QNN EP.

    - ``graph_names``: the graphs to expose (a name or a list; None: every graph, in binary
      order). Each becomes one ``com.microsoft`` EPContext node named after the graph (the EP
      finds the QNN graph by the node name) with ``partition_name`` the same name; the first
      node is the main context (``main_context=1``) and holds the binary, the others
      (``main_context=0``) share it, as in the models the EP dumps with ``ep.context_enable``.
    - The node inputs/outputs and the model's inputs/outputs are the graphs' input and output
      tensors as ``qnnemu.system_client.SystemLibrary(system_library).binary_info(binary)``
      reports them (names, dims; fixed-point types as their storage integer types). Graphs may
      share an input name (one model input feeds both); output names must be unique.
    - ``embed``: the binary goes into ``ep_cache_context`` (``embed_mode=1``); otherwise
      (``embed_mode=0``) it is written next to ``path`` as ``<model stem>_qnn.bin`` and
      ``ep_cache_context`` holds that relative file name (the EP refuses absolute paths and
      ``..``). ``path`` is required then.
    - ``path``: the model is saved there too. Returns the ``onnx.ModelProto``.
    """
    import onnx
    from onnx import helper

    from .system_client import SystemLibrary
    blob = bytes(binary)
    with SystemLibrary(system_library) as system:
        info = system.binary_info(blob)
    graphs = {g["name"]: g for g in info["graphs"]}
    if graph_names is None:
        names = list(graphs)
    elif isinstance(graph_names, str):
        names = [graph_names]
    else:
        names = list(graph_names)
    if not names:
        raise ValueError("ep_context_model: no graphs to wrap")
    missing = [n for n in names if n not in graphs]
    if missing:
        raise ValueError(f"ep_context_model: graphs {missing} are not in the binary (it has {list(graphs)})")
    if len(set(names)) != len(names):
        raise ValueError(f"ep_context_model: graph names repeat: {names}")
    if not embed and path is None:
        raise ValueError("ep_context_model: embed=False writes the binary next to the model: give path")

    if embed:
        cache, embed_mode = blob, 1
    else:
        path = os.fspath(path)
        bin_name = os.path.splitext(os.path.basename(path))[0] + "_qnn.bin"
        with open(os.path.join(os.path.dirname(os.path.abspath(path)), bin_name), "wb") as f:
            f.write(blob)
        cache, embed_mode = bin_name, 0

    def value_info(t: dict):
        return helper.make_tensor_value_info(t["name"], _onnx_elem_type(int(t["dataType"]), t["name"]),
                                             [int(d) for d in t["dims"]])

    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    nodes = []
    for i, name in enumerate(names):
        g = graphs[name]
        for t in g["inputs"]:
            vi = value_info(t)
            if t["name"] in inputs and inputs[t["name"]] != vi:
                raise ValueError(f"ep_context_model: input {t['name']!r} of graph {name!r} differs in "
                                 f"type or shape from the same-named input of another graph")
            inputs.setdefault(t["name"], vi)
        for t in g["outputs"]:
            if t["name"] in outputs or t["name"] in inputs:
                raise ValueError(f"ep_context_model: output {t['name']!r} of graph {name!r} is produced "
                                 f"twice or is also an input")
            outputs[t["name"]] = value_info(t)
        attrs = {"main_context": 1 if i == 0 else 0, "embed_mode": embed_mode, "source": source,
                 "partition_name": name, "max_size": 0}
        if i == 0:
            attrs["ep_cache_context"] = cache
            if info.get("build_id"):
                attrs["ep_sdk_version"] = info["build_id"]
        nodes.append(helper.make_node("EPContext", [t["name"] for t in g["inputs"]],
                                      [t["name"] for t in g["outputs"]], name=name,
                                      domain=EP_CONTEXT_DOMAIN, **attrs))
    graph = helper.make_graph(nodes, "qnn_context", list(inputs.values()), list(outputs.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(EP_CONTEXT_DOMAIN, 1)],
                              producer_name="qnnemu")
    model.ir_version = ir_version
    if path is not None:
        onnx.save(model, os.fspath(path))
    return model


def lora_run_options(graph_name: str, section_path, config_path, run_options=None):
    """``onnxruntime.RunOptions`` making the QNN EP apply a LoRA adapter before the run.

    The EP (OnRunStart) reads the run config entry ``qnn.lora_config``: the path of a text file
    whose first line is ``<graph name>;<adapter file path>``. It reads the adapter file,
    finds the graph with ``graphRetrieve`` in its contexts and calls
    ``contextApplyBinarySection(context, graph, QNN_CONTEXT_SECTION_UPDATABLE, ...)``. A failing
    apply fails the run; a config file that cannot be opened is only logged by the EP. The
    applied values stay until the next section is applied -- later runs without the option
    keep them. This writes ``config_path`` and returns ``run_options`` (a new
    ``RunOptions`` if None) with the entry set."""
    ort = _ort()
    line = f"{graph_name};{os.fspath(section_path)}"
    if "\n" in line or ";" in graph_name:
        raise ValueError(f"lora_run_options: graph name {graph_name!r} / path {section_path!r} cannot "
                         f"be written to the one-line '<graph>;<path>' config")
    with open(config_path, "w") as f:
        f.write(line + "\n")
    ro = run_options if run_options is not None else ort.RunOptions()
    ro.add_run_config_entry(LORA_CONFIG_RUN_OPTION, os.fspath(config_path))
    return ro


__all__ = ["EP_NAME", "DEFAULT_OPTIONS", "provider_options", "session", "preload_rpcmem", "register_qnn_ep",
           "qnn_device", "rpcmem_library_path", "shared_value", "run_shared", "ep_context_model",
           "lora_run_options", "LORA_CONFIG_RUN_OPTION"]
