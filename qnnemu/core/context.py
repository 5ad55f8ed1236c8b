"""QnnContext.h: contexts own graphs, context tensors and registered memory (QnnMem.h); freeing a
context frees its graphs and deregisters its memory."""
from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING

from ..headers import Q
from ..htp import runtime as htp_runtime, switching as htp_switching
from ..htp.device_model import DeviceModel
from ..location import Location
from ..rules import fail
from .graph import Graph
from .handles import HANDLES
from .log import NULL_LOGGER
from .tensor import Tensor, TensorDesc, from_desc, validate_desc

if TYPE_CHECKING:
    from .mem import MemRegistration


class Context:
    def __init__(self, backend, device, logger=None, configs=None):
        self.backend = backend
        self.device = device
        self.log = logger or NULL_LOGGER
        self.configs = configs or {}
        self.graphs: dict[str, Graph] = {}  # name -> graph (each knows its handle)
        self.handle = 0   # set by the backend that registers the context
        self.tensors: dict[int, Tensor] = {}
        self.tensor_names: dict[str, int] = {}
        self._ids = itertools.count(1)
        self.lock = threading.Lock()
        self.mem_handles: dict[int, MemRegistration] = {}  # memRegister handle -> its registration
        # Context binaries (qnnemu/abi/context_api.py): the serialized bytes with the content key
        # they were made for, incremental pieces handed out (address -> piece), and what
        # contextFree must do besides freeing graphs (e.g. the DMA data-release callbacks of
        # contextCreateFromBinaryWithCallback).
        self.revision = 0
        self.binary_cache: tuple[object, bytes] | None = None
        self.incremental: dict = {}
        self.on_free: list = []
        # QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT: builds a graph of the binary by name, until
        # contextFinalize built them all (binary.deserialize sets it).
        self.deferred = None
        self.finalized = False
        # The cDSP session it is deserialized into (qnnemu/htp/runtime.py SessionPool; QNN HTP
        # backend documentation, "Model Loading Across Multiple Sessions"): set by enter_session.
        self.session: int | None = None
        self.session_pool = None
        # Graph switching (qnnemu/htp/switching.py; QNN HTP backend documentation, "Graph Switching
        # (Beta)"): the loader records each graph's own bytes of the binary; a context loaded in
        # low-memory mode gets its switcher in enter_session.
        self.binary_graph_bytes: dict[str, int] | None = None
        self.switching: htp_switching.GraphSwitcher | None = None

    def enter_session(self, nbytes: int, io_reserve: int = 0, func: str = "contextCreateFromBinary") -> int:
        """Deserializes into the first cDSP session of the process with room for ``nbytes`` plus
        ``io_reserve`` (IO_MEM_ESTIMATION); raises runtime.SessionError when none has.  Leaving
        it is part of ``free``.  In graph switching's low-memory mode only the graphs loaded at
        deserialization take their room (qnnemu/htp/switching.py)."""
        if self.session_pool is not None and self.session is not None:
            return self.session
        pool = htp_runtime.process_sessions()
        model = self.device.model if self.device is not None else DeviceModel()
        switcher = htp_switching.setup(self, nbytes, func, model.soc)
        if switcher is not None:
            switcher.logger = self.log
            self.session = switcher.place(pool, self, io_reserve)
            self.switching = switcher
            htp_switching.warn_not_preloaded(switcher, func)
        else:
            self.session = pool.place(self, nbytes, io_reserve)
        self.session_pool = pool
        return self.session

    def touch(self) -> None:
        """The content changed in a way graph/tensor counts do not show (e.g. updated tensor
        data): a cached context binary is stale."""
        self.revision += 1

    def reserve_ids(self, next_id: int) -> None:
        """Tensor ids continue from ``next_id`` (a context loaded from a binary keeps its ids)."""
        with self.lock:
            self._ids = itertools.count(next_id)

    def next_tensor_id(self) -> int:
        with self.lock:
            return next(self._ids)

    def find_tensor_by_name(self, name: str) -> Tensor | None:
        tid = self.tensor_names.get(name)
        return self.tensors.get(tid) if tid is not None else None

    def create_graph(self, name: str) -> int:
        """graphCreate: a new empty graph named ``name``; its handle."""
        return self.new_graph(name).handle

    def new_graph(self, name: str) -> Graph:
        if not name:
            fail(Location("graphCreate"), "QNNEMU-graphCreate-name", "graphName is NULL or empty",
                 code=Q.QNN_GRAPH_ERROR_INVALID_NAME)
        if name in self.graphs:
            fail(Location("graphCreate").path("graphName"), "QNNEMU-graphCreate-name-unique",
                 f"a graph named '{name}' already exists in this context", code=Q.QNN_GRAPH_ERROR_INVALID_NAME)
        graph = Graph(self, name, self.log)
        graph.handle = HANDLES.new(graph)
        self.graphs[name] = graph
        return graph

    def discard_graph(self, name: str) -> None:
        """Drops graph ``name`` (one that failed to build) and releases its handle."""
        graph = self.graphs.pop(name, None)
        if graph is not None:
            HANDLES.release(graph.handle)

    def retrieve_graph(self, name: str) -> int:
        graph = self.graphs.get(name or "")
        if graph is None and self.deferred is not None:
            graph = self.deferred.build(name or "")  # deferred init: built at first retrieval
        if graph is None:
            fail(Location("graphRetrieve").path("graphName"), "QNNEMU-graphRetrieve-name",
                 f"no graph named '{name}' in this context "
                 f"(graphs: {sorted(self.graphs) or 'none'})", code=Q.QNN_GRAPH_ERROR_GRAPH_DOES_NOT_EXIST)
        return graph.handle

    def create_tensor(self, d: TensorDesc) -> Tensor:
        func = "tensorCreateContextTensor"
        quant, static = validate_desc(d, func, "tensor")
        if d.name in self.tensor_names:
            fail(Location(func).field(f"tensor.v{d.version}.name"), "QNNEMU-tensor-name-unique",
                 f"a context tensor named '{d.name}' already exists", code=Q.QNN_TENSOR_ERROR_NAME_HASH_COLLISION)
        t = from_desc(d, self.next_tensor_id(), quant, static)
        self.tensors[t.id] = t
        self.tensor_names[t.name] = t.id
        return t

    def free(self) -> None:
        if self.switching is not None:
            self.switching.close()
        if self.session_pool is not None:   # its binary and every I/O mapping leave the session
            self.session_pool.remove(self)
        for graph in list(self.graphs.values()):
            HANDLES.release(graph.handle)
        self.graphs.clear()
        self.tensors.clear()
        self.deferred = None
        self.binary_cache = None
        self.incremental.clear()
        hooks, self.on_free = self.on_free, []
        for hook in hooks:  # e.g. data-release callbacks: after the graphs using the data are gone
            hook()
        with self.lock:
            registrations, self.mem_handles = self.mem_handles, {}
        for handle, reg in registrations.items():  # freeing a context deregisters its memory
            HANDLES.release(handle)
            reg.unmap()
