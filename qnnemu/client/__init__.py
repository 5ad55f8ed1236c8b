"""A small Pythonic client that drives any QNN backend library through its C ABI.

It uses cffi in ABI mode (``ffi.dlopen``) with declarations generated from our own headers
(``qnnemu.headers.cdef()``), so it works with our ``libQnnHtpEmu.so`` as well as with the
vendor's ``libQnnHtp.so``/``libQnnSaver.so``::

    from qnnemu.client import Backend
    with Backend(path) as be:                       # None -> qnnemu.backend_library_path()
        ctx = be.context()
        g = ctx.graph("g0", precision="fp16")       # HTP custom graph config
        x = g.input("x", (1, 8, 8, 3), np.float32)  # APP_WRITE
        w = g.static("w", weights)                  # STATIC
        y = g.node("Conv2d", [x, w, b], params={"stride": np.array([1, 1], np.uint32), ...},
                   outputs=[("y", (1, 8, 8, 4), np.float32)], app_read=True)
        g.finalize()
        out = g.execute({"x": arr})                 # {"y": ndarray}
        blob = ctx.get_binary()                     # contextGetBinarySize + contextGetBinary

    with Backend(path) as be:                       # later, maybe in another process
        ctx = be.context_from_binary(blob)          # contextCreateFromBinary
        info = SystemLibrary().binary_info(blob)    # qnnemu.system_client: graphs and tensors
        g = ctx.retrieve_graph("g0", info["graphs"][0]["inputs"], info["graphs"][0]["outputs"])
        out = g.execute({"x": arr})                 # graphRetrieve'd graphs execute the same way

The package's modules: :mod:`.cabi` (the FFI, log callback, QnnCallError), :mod:`.configs`
(HTP custom configs), :mod:`.backend` (Backend, Context), :mod:`.graph` (Graph),
:mod:`.tensors` (Tensor, the tensor structs), :mod:`.opconfig` (parameters, op configs),
:mod:`.quant` (quantization encodings <-> ``Qnn_QuantizeParams_t``), :mod:`.profile` (Profile).

Graph inputs and outputs are fed and returned in the tensor's own storage type
(``Tensor.numpy_dtype``): a quantized tensor takes and gives its fixed-point codes, quantization
is the caller's (``Tensor.quant`` holds its encoding in the JSON form of :mod:`.quant`).

Parameter rule (``Graph.node(params=...)``):

- an ``np.ndarray`` with ``ndim >= 1`` becomes a tensor parameter: a STATIC tensor created
  with ``tensorCreateGraphTensor`` (named ``<node>.<param>``), as QNN requires;
- a numpy scalar (or 0-d array) becomes a scalar of the matching QNN type
  (``np.uint32`` -> ``QNN_DATATYPE_UINT_32``, ``np.float32`` -> ``FLOAT_32``,
  ``np.bool_`` -> ``BOOL_8``, ...);
- a Python ``bool`` -> ``BOOL_8``; a Python ``float`` -> ``FLOAT_32``; a Python ``int`` ->
  ``UINT_32`` when non-negative (most QNN integer parameters, e.g. ``group`` and ``axis``, are
  ``uint32``), else ``INT_32``. Pass ``np.int32(...)`` to force ``INT_32``.

Every QNN call's status is checked; a failure raises :class:`QnnCallError` carrying the API
function name, the code and the backend's own ``errorGetMessage`` text. All memory handed to
the backend (names, dimensions, static data, configs) stays referenced by the owning
graph/context/backend object until that object is freed; handles are freed in reverse order
of creation (contexts, which free their graphs, then device, backend, log).
"""
from __future__ import annotations

from .backend import Backend, Context

# Everything qnnemu.client offered as one module stays importable from it (the helpers too:
# qnnemu.system_client and tests use them).
from .cabi import (  # noqa: F401
                   _LOG_LEVELS,
                   _PY_LEVELS,
                   ApiVersion,
                   QnnCallError,
                   _contiguous,
                   _libc,
                   _null_terminated,
                   _set_buffer,
                   ffi,
                   log,
                   make_log_callback,
)
from .configs import (  # noqa: F401
    Config,
    GraphConfig,
    graph_priority_config,
    htp_context_config,
    htp_device_config,
    htp_graph_config,
)
from .graph import Graph
from .profile import Profile
from .tensors import Tensor

__all__ = ["Backend", "Context", "Graph", "Tensor", "Profile", "QnnCallError", "ApiVersion",
           "GraphConfig", "htp_graph_config", "htp_context_config", "htp_device_config", "ffi"]
