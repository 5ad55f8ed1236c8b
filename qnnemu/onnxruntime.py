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
  does this; loading the backend would too (it has a DT_NEEDED on it), but the EP looks the
  library up before it loads the backend;
- ``shared_value(sess, shape, dtype)`` / ``run_shared(sess, feeds)``: with
  ``enable_htp_shared_memory_allocator=1``, ``OrtValue``s in the EP's HTP shared memory (rpcmem)
  and a run through IOBinding with every input and output there: the EP registers that memory
  with ``memRegister`` and the backend reads and writes it in place (no copies between ONNX
  Runtime and the backend). ``sess.run`` with numpy feeds works too, through client buffers.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from . import backend_library_path, library_dir

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
    ``session.disable_cpu_ep_fallback=1``.
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
    return ort.InferenceSession(model, sess_options=so)


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


__all__ = ["EP_NAME", "DEFAULT_OPTIONS", "provider_options", "session", "preload_rpcmem", "register_qnn_ep",
           "qnn_device", "rpcmem_library_path", "shared_value", "run_shared"]
