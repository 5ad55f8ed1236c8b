"""The graph object of qnnemu.client (QnnGraph.h, QnnTensor.h): create or retrieve a graph, add
tensors and nodes, update tensors, validate, finalize and execute.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core import dtypes
from ..headers import Q
from .cabi import QnnCallError, _contiguous, _null_terminated, _set_buffer, ffi
from .configs import GraphConfig
from .opconfig import op_config, set_scalar
from .quant import quant_json
from .tensors import Tensor, TensorStructs

if TYPE_CHECKING:
    from .backend import Context
    from .profile import Profile


class Graph:
    """A QNN graph under construction, then finalized and executable.

    ``tensor_version`` selects ``Qnn_TensorV2_t`` (default) or ``Qnn_TensorV1_t`` structs.
    """

    def __init__(self, context: Context, name: str, configs: Sequence[GraphConfig] = (),
                 tensor_version: int = 2, retrieve: bool = False):
        self.context = context
        self.backend = context.backend
        self.name = name
        self.tensor_version = tensor_version
        self._keep: list[Any] = list(configs)
        self._structs = TensorStructs(tensor_version, self._keep)
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.tensors: dict[str, Tensor] = {}
        self._nodes = 0
        cfg = _null_terminated([c.config for c in configs], "QnnGraph_Config_t")
        self._keep.append(cfg)
        cname = ffi.new("char[]", name.encode())
        self._keep.append(cname)
        out = ffi.new("Qnn_GraphHandle_t *")
        if retrieve:
            self.backend.call("graphRetrieve", context.handle, cname, out)
        else:
            self.backend.call("graphCreate", context.handle, cname, cfg, out)
        self.handle = out[0]

    # -- tensors ------------------------------------------------------------------------
    def _tensor(self, name: str, shape, dtype, type_: int, data: np.ndarray | None = None,
                quant: tuple[float, int] | dict | None = None) -> Tensor:
        if name in self.tensors:
            raise ValueError(f"graph {self.name}: tensor {name!r} already exists")
        shape = tuple(int(d) for d in shape)
        qtype = dtype if isinstance(dtype, int) else dtypes.from_numpy(dtype)
        quant = quant_json(quant)
        t, v = self._structs.new(name, shape, qtype, type_, quant)
        if data is not None:
            self._structs.attach(v, name, data, dtypes.numpy_dtype(qtype), shape, self._keep)
        self.backend.call("tensorCreateGraphTensor", self.handle, t)
        tensor = Tensor(t, name, shape, qtype, type_, quant)
        self.tensors[name] = tensor
        return tensor

    def _described_tensor(self, spec: Mapping[str, Any]) -> Tensor:
        """A Tensor for a graph input/output of a retrieved graph, from a system-client dict."""
        try:
            name, qtype, type_ = str(spec["name"]), int(spec["dataType"]), int(spec["type"])
            shape = tuple(int(d) for d in spec["dims"])
            tensor_id = int(spec["id"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"graph {self.name}: tensor description {dict(spec)!r} lacks or "
                             f"has a bad name/id/type/dataType/dims ({e})") from None
        if not dtypes.is_known(qtype):
            raise ValueError(f"graph {self.name}: tensor {name!r}: unknown dataType {qtype}")
        quant = spec.get("quant")
        t, _ = self._structs.new(name, shape, qtype, type_, quant_json(quant or None), tensor_id)
        tensor = Tensor(t, name, shape, qtype, type_, dict(quant) if quant else None)
        self.tensors[name] = tensor
        return tensor

    def input(self, name: str, shape, dtype=np.float32,
              quant: tuple[float, int] | dict | None = None) -> Tensor:
        """An APP_WRITE tensor, fed by :meth:`execute`.  ``quant``: ``(scale, offset)`` per
        tensor (``(scale, offset, bitwidth)``: the BW_SCALE_OFFSET form), or a dict ``{"axis",
        "scales", "offsets"}`` per axis (``"bitwidth"`` makes it the BW_ form), or the JSON form
        of qnnemu.client.quant."""
        t = self._tensor(name, shape, dtype, Q.QNN_TENSOR_TYPE_APP_WRITE, quant=quant)
        self.inputs.append(t)
        return t

    def static(self, name: str, data: np.ndarray, dtype=None,
               quant: tuple[float, int] | dict | None = None, updatable: bool = False) -> Tensor:
        """A STATIC tensor holding ``data`` (its dtype unless ``dtype`` is given). With
        ``updatable`` it is ``QNN_TENSOR_TYPE_UPDATEABLE_STATIC``: computed the same way, but its
        data (and quantization) can be replaced after finalize with :meth:`update_tensors` or a
        binary section (:meth:`Context.binary_section`, :meth:`Context.apply_binary_section`)."""
        data = np.asarray(data)
        type_ = Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC if updatable else Q.QNN_TENSOR_TYPE_STATIC
        return self._tensor(name, data.shape, data.dtype if dtype is None else dtype,
                            type_, data=data, quant=quant)

    def update_tensors(self, values: Mapping[str, np.ndarray],
                       quant: Mapping[str, Any] | None = None) -> None:
        """tensorUpdateGraphTensors: new data for UPDATEABLE_STATIC tensors of this graph
        (``values``: tensor name -> array of the tensor's shape, converted to its storage type)
        and, in ``quant`` (tensor name -> a quant argument as for :meth:`static`), new
        quantization for fixed-point ones; a tensor with new data but no new quant keeps its
        quantization. All updates are one atomic call; they take effect for the next execute."""
        unknown = [n for n in list(values) + list(quant or {}) if n not in self.tensors]
        if unknown:
            raise KeyError(f"graph {self.name}: no tensors {sorted(set(unknown))}")
        quant = {name: quant_json(q) for name, q in (quant or {}).items()}
        keep: list[Any] = []
        structs = []
        for name in dict.fromkeys(list(values) + list(quant)):
            t = self.tensors[name]
            q = quant[name] if name in quant else quant_json(t.quant or None)
            struct, v = self._structs.new(name, t.shape, t.dtype, t.type, q, t.id)
            if name in values:
                self._structs.attach(v, name, values[name], t.numpy_dtype, t.shape, keep, "update")
            structs.append(struct)
        ptrs = ffi.new("Qnn_Tensor_t *[]", structs)
        self.backend.call("tensorUpdateGraphTensors", self.handle, ptrs, len(structs))
        for name, q in quant.items():
            self.tensors[name].quant = q

    # -- nodes --------------------------------------------------------------------------
    def _outputs(self, outputs: Sequence[Any], app_read: bool | Iterable[str]) -> list[Tensor]:
        """The node's output tensors from ``(name, shape, dtype[, quant])`` tuples: NATIVE, or
        APP_READ graph outputs when ``app_read`` is True or names them."""
        read = ({o[0] for o in outputs} if app_read is True
                else set() if app_read is False else set(app_read))
        out_tensors = []
        for spec in outputs:
            oname, shape, dtype = spec[:3]
            quant = spec[3] if len(spec) > 3 else None
            type_ = Q.QNN_TENSOR_TYPE_APP_READ if oname in read else Q.QNN_TENSOR_TYPE_NATIVE
            t = self._tensor(oname, shape, dtype, type_, quant=quant)
            if oname in read:
                self.outputs.append(t)
            out_tensors.append(t)
        return out_tensors

    def _params(self, node: str, params: Mapping[str, Any], keep: list[Any]):
        """``Qnn_Param_t[]`` of ``params``: an ``np.ndarray`` with ``ndim >= 1`` becomes a
        STATIC tensor named ``<node>.<param>`` (as QNN requires), a Tensor is passed as is,
        anything else is a scalar (qnnemu.client.opconfig)."""
        cparams = ffi.new("Qnn_Param_t[]", max(len(params), 1))
        keep.append(cparams)
        for i, (pname, value) in enumerate(params.items()):
            p = cparams[i]
            pn = ffi.new("char[]", pname.encode())
            keep.append(pn)
            p.name = pn
            if isinstance(value, np.ndarray) and value.ndim >= 1:
                value = self._tensor(f"{node}.{pname}", value.shape, value.dtype,
                                     Q.QNN_TENSOR_TYPE_STATIC, data=value)
            if isinstance(value, Tensor):
                p.paramType = Q.QNN_PARAMTYPE_TENSOR
                p.tensorParam = value.struct[0]
            else:
                set_scalar(p, value)
        return cparams

    def node(self, op_type: str, inputs: Sequence[Tensor], outputs: Sequence[Any],
             params: Mapping[str, Any] | None = None, name: str | None = None,
             package: str = "qti.aisw", app_read: bool | Iterable[str] = False,
             validate: bool = False):
        """graphAddNode. ``outputs`` are ``(name, shape, dtype[, (scale, offset)])`` tuples;
        they become NATIVE tensors, or APP_READ graph outputs when ``app_read`` is True or
        names them. With ``validate`` the op config first goes through
        ``backendValidateOpConfig`` (the vendor's graphAddNode accepts unknown op types and
        only graphFinalize rejects them). Returns the output Tensor (a list if several)."""
        name = name or f"{op_type}_{self._nodes}"
        self._nodes += 1
        params = dict(params or {})
        out_tensors = self._outputs(outputs, app_read)
        keep: list[Any] = []
        cparams = self._params(name, params, keep)
        op = op_config(name, package, op_type, cparams, len(params),
                       [t.struct for t in inputs], [t.struct for t in out_tensors], keep)
        self._keep += keep
        if validate:
            self.backend.call("backendValidateOpConfig", self.backend.handle, op)
        self.backend.call("graphAddNode", self.handle, op)
        return out_tensors[0] if len(out_tensors) == 1 else out_tensors

    # -- validate / finalize / execute -----------------------------------------------------
    def validate(self) -> dict:
        """graphValidate (QNN 2.50): what graphAddNode / graphFinalize would say about each node,
        without finalizing. Returns ``{"overall": code, "message": errorGetMessage(code) or None,
        "nodes": [{"name", "supported", "code", "message"}, ...]}`` (graph order); the backend's
        result is released with graphFreeValidationResult before returning."""
        out = ffi.new("QnnGraph_ValidationResult_t **")
        self.backend.call("graphValidate", self.handle, ffi.NULL, out)
        r = out[0]
        try:
            nodes = []
            for i in range(r.numResults):
                n = r.results[i]
                nodes.append({
                    "name": ffi.string(n.nodeName).decode() if n.nodeName != ffi.NULL else None,
                    "supported": int(n.status) == Q.QNN_GRAPH_NODE_VALIDATION_STATUS_SUPPORTED,
                    "code": int(n.errorCode),
                    "message": (ffi.string(n.errorMessage).decode("utf-8", "replace")
                                if n.errorMessage != ffi.NULL else None)})
            overall = int(r.overallStatus)
        finally:
            self.backend.call("graphFreeValidationResult", r)
        message = self.backend.error_message(overall) if overall != Q.QNN_SUCCESS else None
        return {"overall": overall, "message": message, "nodes": nodes}

    def finalize(self, profile: Profile | None = None) -> None:
        self.backend.call("graphFinalize", self.handle,
                          profile.handle if profile is not None else ffi.NULL, ffi.NULL)

    def execute(self, feeds: Mapping[str, np.ndarray],
                profile: Profile | None = None) -> dict[str, np.ndarray]:
        """graphExecute with ``feeds`` (input name -> array in the input's storage type, see
        ``Tensor.numpy_dtype``); returns output name -> array. ``profile`` collects the
        call's events."""
        cin, n_in, cout, n_out, results, _keep = self._io(feeds)
        self.backend.call("graphExecute", self.handle, cin, n_in, cout, n_out,
                          profile.handle if profile is not None else ffi.NULL, ffi.NULL)
        return results

    def execute_async(self, feeds: Mapping[str, np.ndarray], profile: Profile | None = None) -> AsyncExecute:
        """graphExecuteAsync: queues the execute and returns at once; ``.wait()`` on the result
        gives the outputs once the backend's notify function reported (raising QnnCallError with
        the notified error code), ``.status`` the code.  The buffers stay alive with it."""
        cin, n_in, cout, n_out, results, keep = self._io(feeds)
        pending = AsyncExecute(results)
        keep += [cin, cout, pending._callback]
        pending._keep = keep
        self.backend.call("graphExecuteAsync", self.handle, cin, n_in, cout, n_out,
                          profile.handle if profile is not None else ffi.NULL, ffi.NULL,
                          pending._callback, ffi.NULL)
        return pending

    def _io(self, feeds: Mapping[str, np.ndarray]):
        missing = [t.name for t in self.inputs if t.name not in feeds]
        if missing:
            raise KeyError(f"graph {self.name}: no data for inputs {missing}")
        keep = []
        cin = ffi.new("Qnn_Tensor_t[]", max(len(self.inputs), 1))
        for i, t in enumerate(self.inputs):
            arr = _contiguous(feeds[t.name], t.numpy_dtype)
            if arr.shape != t.shape:
                raise ValueError(f"input {t.name!r}: shape {arr.shape} != {t.shape}")
            keep.append(arr)
            cin[i] = t.struct[0]
            _set_buffer(cin[i], ffi.from_buffer(arr), arr.nbytes, keep)
        results = {}
        cout = ffi.new("Qnn_Tensor_t[]", max(len(self.outputs), 1))
        for i, t in enumerate(self.outputs):
            arr = np.zeros(t.shape, dtype=t.numpy_dtype)
            results[t.name] = arr
            cout[i] = t.struct[0]
            _set_buffer(cout[i], ffi.from_buffer(arr), arr.nbytes, keep)
        return cin, len(self.inputs), cout, len(self.outputs), results, keep


class AsyncExecute:
    """One graphExecuteAsync in flight (Graph.execute_async)."""

    def __init__(self, results: dict[str, np.ndarray]):
        import threading
        self.results = results
        self.status: int | None = None
        self._done = threading.Event()
        self._keep: list = []

        def notify(_param, status):
            self.status = int(status.error)
            self._done.set()
        self._callback = ffi.callback("void(void *, Qnn_NotifyStatus_t)", notify)

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> dict[str, np.ndarray]:
        if not self._done.wait(timeout):
            raise TimeoutError("graphExecuteAsync: no notification yet")
        if self.status != Q.QNN_SUCCESS:
            raise QnnCallError("graphExecuteAsync (notified)", int(self.status or 0), None)
        return self.results
