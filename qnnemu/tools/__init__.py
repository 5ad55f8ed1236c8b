"""Command-line tools following the conventions of the QNN SDK tools, for any QNN backend.

- ``qnnemu-net-run`` (:mod:`qnnemu.tools.net_run`): runs graphs of a context binary
  (``--retrieve_context``) or of a JSON graph description (``--model``) over an input list;
- ``qnnemu-context-binary-utility`` (:mod:`qnnemu.tools.context_binary_utility`): a context
  binary's System-library information as JSON;
- ``qnnemu-context-binary-generator`` (:mod:`qnnemu.tools.context_binary_generator`): prepares
  a context binary from a JSON graph description (docs/graph-json.md) or an ONNX model;
- ``qnnemu-profile-viewer`` (:mod:`qnnemu.tools.profile_viewer`): profiling logs, chrometrace
  and QHAS report;
- ``qnnemu-sdk-root`` (:mod:`qnnemu.tools.sdk_root`): a QNN-SDK-shaped tree over the package.

What every tool does the same way (:func:`run_main`): success prints one summary line on stdout
(``<tool>: wrote out/model.bin (25256 bytes, 1 graph)``); a failure prints one
``<tool>: error: ...`` line on stderr (a graph description's errors name the JSON path, a QNN
call's name the function, the code and the library's reason) and exits with status 1; a bad
command line exits with 2 (argparse's usage message), an interrupt with 130. What the QNN
libraries log comes in between as ``<tool>: backend <level>: ...`` (``system library``), each
message once (:class:`_Reporter`).

This module also holds the backend/System library resolution, the backend-extension config
file (the SDK's ``--config_file``: HTP options ``graphs``, ``devices``, ``context``,
``groupContext``, ``memory`` as described in the QNN HTP backend documentation, "QNN HTP
Backend Extensions") and the conversions between raw files and tensors (float32 files
quantized/dequantized at the edges, or "native" files in the tensor's own storage type).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..core import dtypes
from ..headers import Q
from ..spec.quant import Requantize, rounding_for, spec_from_dict
from ..spec.quant import dequantize as spec_dequantize

log = logging.getLogger("qnnemu.tools")

LOG_LEVELS = ("error", "warn", "info", "verbose", "debug")
_PY_LEVELS = {"error": logging.ERROR, "warn": logging.WARNING, "info": logging.INFO,
              "verbose": logging.DEBUG, "debug": logging.DEBUG}


class ToolError(Exception):
    """A user-facing failure: reported as ``<prog>: error: <message>``, exit status 1."""


# ----------------------------------------------------------------------------- running mains
# Exit statuses, the same for every tool (documented in README.md "Tools").
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

_LEVEL_WORDS = {logging.ERROR: "error", logging.WARNING: "warning", logging.INFO: "info"}
# Loggers whose records are the tool's own; everything else under "qnnemu" is a library's: the
# backend's or System library's QnnLog callback (qnnemu.client / qnnemu.system_client) or, when
# qnnemu's libraries run in this very interpreter, their Python-side mirror of the same message.
_CALLBACK_LOGGERS = {"qnnemu.client": "backend", "qnnemu.system_client": "system library"}
_OUR_PREFIX = "qnnemu "  # what qnnemu's QnnLog messages start with (core/log.py)


def _normalized(text: str) -> str:
    text = text.strip()
    return text[len(_OUR_PREFIX):].lstrip() if text.startswith(_OUR_PREFIX) else text


@dataclass
class _Message:
    label: str          # "" for the tool's own messages, else "backend" / "system library"
    levelno: int
    text: str
    in_process: bool    # a Python-side mirror whose QnnLog copy may follow


class _Reporter(logging.Handler):
    """Writes the tools' and the QNN libraries' messages to stderr, one line each:
    ``<prog>: <level>: ...`` for the tool's, ``<prog>: backend <level>: ...`` (or ``system
    library``) for what a library logged.

    A failure is reported once. qnnemu's libraries log each message twice when they run in this
    interpreter (the ``qnnemu`` Python logger, then the QnnLog callback): the second copy is
    dropped. Library errors are held back until the next message or the end of the run: when
    the run fails, those the final error line already quotes (our backend's ``errorGetMessage``
    repeats its log message) are dropped, and the last one completes a final line that has no
    reason of its own (a System library call, which has no errorGetMessage)."""

    def __init__(self, prog: str, stream=None):
        super().__init__()
        self.prog = prog
        self.stream = stream if stream is not None else sys.stderr
        self.held: list[_Message] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            name = record.name
            if name == "qnnemu.tools" or name.startswith("qnnemu.tools."):
                if record.exc_info:
                    text += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip()
                self.flush_held()
                self._write(_Message("", record.levelno, text, False))
                return
            label = _CALLBACK_LOGGERS.get(name)
            message = _Message(label or "backend", record.levelno, _normalized(text), label is None)
            last = self.held[-1] if self.held else None
            if (label is not None and last is not None and last.in_process
                    and last.text == message.text):
                self.held[-1] = message  # the QnnLog copy of the mirror just seen
            else:
                self.held.append(message)
            # Print everything up to the last message that need not wait.
            waiting = [m.levelno >= logging.ERROR or m.in_process for m in self.held]
            if not all(waiting):
                cut = len(waiting) - waiting[::-1].index(False)
                ready, self.held = self.held[:cut], self.held[cut:]
                for m in ready:
                    self._write(m)
        except Exception:  # logging must never break a tool
            self.handleError(record)

    def flush_held(self) -> None:
        held, self.held = self.held, []
        for m in held:
            self._write(m)

    def fail(self, text: str, complete: bool) -> None:
        """The final error line ``text``; ``complete`` False when it gives no reason."""
        held = [m for m in self.held if not (m.levelno >= logging.ERROR and m.text and m.text in text)]
        self.held = []
        if not complete:
            errors = [i for i, m in enumerate(held) if m.levelno >= logging.ERROR]
            if errors:
                text = f"{text}: {held.pop(errors[-1]).text}"
        for m in held:
            self._write(m)
        self._write(_Message("", logging.ERROR, text, False))

    def _write(self, m: _Message) -> None:
        level = _LEVEL_WORDS.get(m.levelno, "debug") if m.levelno < logging.ERROR else "error"
        where = f"{m.label} {level}" if m.label else level
        self.stream.write(f"{self.prog}: {where}: {m.text}\n")
        self.stream.flush()


def setup_logging(prog: str, level: str) -> _Reporter:
    """Messages of the qnnemu loggers (the tools', the clients' and, through the clients'
    QnnLog callbacks, the libraries') to stderr at ``level``; returns the handler to remove."""
    handler = _Reporter(prog)
    root = logging.getLogger("qnnemu")
    root.addHandler(handler)
    root.setLevel(_PY_LEVELS[level])
    handler.setLevel(_PY_LEVELS[level])
    return handler


def error_code_name(code: int) -> str:
    """The QNN name of an error code, when one is unambiguous enough to help (common codes)."""
    return Q.enum("QNN_COMMON_ERROR_").get(code, "")


def _failure_text(e: BaseException) -> tuple[str, bool]:
    """The final error line for ``e`` and whether it carries a reason: a QNN call's error
    (QnnCallError, SystemCallError) is ``<function> failed with error <code>[ (<name>)][:
    <reason>]``; the reason is the library's errorGetMessage, which a System library lacks."""
    text = str(e)
    function, code = getattr(e, "function", None), getattr(e, "code", None)
    prefix = f"{function} failed with error {code}"
    if function is None or not isinstance(code, int) or not text.startswith(prefix):
        return text, True
    rest = text[len(prefix):]
    if not rest and error_code_name(code):
        text = f"{text} ({error_code_name(code)})"
    return text, ": " in rest


def run_main(prog: str, body: Callable[[], int | None], level: str = "warn") -> int:
    """Runs ``body`` with logging set up. A failure is one ``<prog>: error: ...`` line on
    stderr and exit status 1: a user's (bad files, arguments, libraries; a QNN call refusing)
    or not (an internal error: its traceback at debug level). Interrupted: status 130."""
    handler = setup_logging(prog, level)
    try:
        status = int(body() or 0)
        handler.flush_held()
        return status
    except ToolError as e:
        handler.fail(str(e), True)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        handler.fail("interrupted", True)
        return EXIT_INTERRUPTED
    # RuntimeError covers QnnCallError, SystemCallError and "no usable provider" (a library
    # that is not a QNN backend / System library); OSError a library that does not load.
    except (RuntimeError, OSError, ValueError) as e:
        handler.fail(*_failure_text(e))
        log.debug("traceback", exc_info=True)
        return EXIT_FAILURE
    except Exception as e:  # a bug: still one line, the traceback with --log_level debug
        handler.fail(f"internal error: {type(e).__name__}: {e} (--log_level debug shows the "
                     f"traceback; please report it)", True)
        log.debug("traceback", exc_info=True)
        return EXIT_FAILURE
    finally:
        logging.getLogger("qnnemu").removeHandler(handler)
        handler.close()


def plural(count: int, noun: str) -> str:
    """``1 graph``, ``2 graphs``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def parse_args(parser, argv: Sequence[str] | None):
    """argparse, but a bad command line returns (None, status 2) instead of raising
    SystemExit, so that ``main(argv)`` can be called in-process."""
    try:
        return parser.parse_args(argv), 0
    except SystemExit as e:  # argparse has printed the usage and the error
        return None, int(e.code or 0)


# ------------------------------------------------------------------------- library lookup
_OUR_NAMES = {"qnnemu", "htp-emu", "htpemu", "libQnnHtpEmu.so"}


def vendor_library_dir() -> Path | None:
    """The directory of the vendor's QNN libraries of the onnxruntime-qnn package, if any."""
    try:
        import onnxruntime_qnn
    except ImportError:
        return None
    d = Path(onnxruntime_qnn.__file__).resolve().parent
    return d if (d / "libQnnHtp.so").is_file() else None


def resolve_backend(value: str | None) -> str:
    """``--backend``: a path; or a name: ``qnnemu`` / ``libQnnHtpEmu.so`` (ours, the default),
    else a file name looked up in LD_LIBRARY_PATH, then in the onnxruntime-qnn package
    (``libQnnHtp.so``; ``htp`` is short for it)."""
    from .. import backend_library_path
    if value is None or value in _OUR_NAMES:
        return backend_library_path()
    if os.sep in value or os.path.exists(value):
        if not os.path.isfile(value):
            raise ToolError(f"--backend {value}: no such file")
        return os.path.abspath(value)
    name = "libQnnHtp.so" if value == "htp" else value
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    vendor = vendor_library_dir()
    if vendor is not None:
        dirs.append(str(vendor))
    for d in dirs:
        candidate = os.path.join(d, name)
        if os.path.isfile(candidate):
            return candidate
    raise ToolError(f"--backend {value}: not a file, and no {name} in LD_LIBRARY_PATH "
                    f"or the onnxruntime-qnn package")


def resolve_system_library(value: str | None, backend: str | None) -> str:
    """``--system_library``: the given path; else the libQnnSystem.so next to the backend;
    else ours."""
    from .. import system_library_path
    if value is not None:
        if not os.path.isfile(value):
            raise ToolError(f"--system_library {value}: no such file")
        return os.path.abspath(value)
    if backend is not None:
        beside = os.path.join(os.path.dirname(os.path.abspath(backend)), "libQnnSystem.so")
        if os.path.isfile(beside):
            return beside
    return system_library_path()


# ----------------------------------------------------------------- backend-extension config
_PERF_PROFILES = ("low_balanced", "balanced", "default", "high_performance",
                  "sustained_high_performance", "burst", "low_power_saver", "power_saver",
                  "high_power_saver", "extreme_power_saver", "system_settings")

# graphs[] keys -> (HTP graph option, union member, converter)
_GRAPH_KEYS: dict[str, tuple[str, str, Callable[[Any], Any]]] = {
    "vtcm_mb": ("VTCM_SIZE", "vtcmSizeInMB", int),
    "vtcm_size": ("VTCM_SIZE_IN_BYTES", "vtcmSizeInBytes", int),
    "hvx_threads": ("NUM_HVX_THREADS", "numHvxThreads", int),
    "O": ("OPTIMIZATION", "optimizationOption",
          lambda v: {"type": Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_OPTIMIZATION_FLAG,
                     "floatValue": float(v)}),
    "dlbc": ("OPTIMIZATION", "optimizationOption",
             lambda v: {"type": Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_DLBC,
                        "floatValue": float(v)}),
    "dlbc_weights": ("OPTIMIZATION", "optimizationOption",
                     lambda v: {"type": Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_DLBC_WEIGHTS,
                                "floatValue": float(v)}),
    "slc_alloc_enable": ("OPTIMIZATION", "optimizationOption",
                         lambda v: {"type": Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_SLC_ALLOCATOR,
                                    "floatValue": float(v)}),
    "weights_packing": ("WEIGHTS_PACKING", "weightsPacking", bool),
    "num_cores": ("NUM_CORES", "numCores", int),
    "short_depth_conv_on_hmx_off": ("SHORT_DEPTH_CONV_ON_HMX_OFF", "shortDepthConvOnHmxOff", bool),
    "fold_relu_activation_into_conv_off": ("FOLD_RELU_ACTIVATION_INTO_CONV_OFF",
                                           "foldReluActivationIntoConvOff", bool),
}
# context keys -> (HTP context option, union member, converter, used when)
_CONTEXT_KEYS: dict[str, tuple[str, str, Callable[[Any], Any], str]] = {
    "weight_sharing_enabled": ("WEIGHT_SHARING_ENABLED", "weightSharingEnabled", bool, "prepare"),
    "lora_weight_sharing": ("LORA_WEIGHT_SHARING_ENABLED", "loraWeightSharingEnabled", bool, "prepare"),
    "file_read_memory_budget_in_mb": ("FILE_READ_MEMORY_BUDGET", "fileReadMemoryBudgetInMb", int, "load"),
    "io_memory_estimation": ("IO_MEM_ESTIMATION", "ioMemEstimation", bool, "load"),
    "init_acceleration": ("INIT_ACCELERATION", "initAcceleration", bool, "load"),
}
_CONTEXT_IGNORED = {
    "max_spill_fill_buffer_for_group": "spill-fill group registration needs several contexts; "
                                       "the tools load one",
    "group_id": "spill-fill group registration needs several contexts; the tools load one",
}
_DEVICE_IGNORED = {
    "device_id": "the emulated platform has one device",
    "core_id": "the emulated device has one core",
    "core_type": "the emulated device has one (NSP) core",
    "use_client_context": "power contexts are not modelled",
    "profiling_level": "the extension's profiling_level is not read; pass --profiling_level basic|detailed|linting",
}
_CORE_KEYS = ("perf_profile", "rpc_control_latency", "rpc_polling_time", "hmx_timeout_us",
              "adaptive_polling_time")


@dataclass
class BackendConfig:
    """The parsed ``--config_file``: configs for graphs, contexts and the device."""
    path: str | None = None
    graphs: list[tuple[list[str] | None, list[tuple[str, str, Any]]]] = field(default_factory=list)
    context: list[tuple[str, str, Any, str]] = field(default_factory=list)
    device: list[tuple[str, str, Any]] = field(default_factory=list)
    raw: dict = field(default_factory=dict)

    def graph_configs(self, graph_name: str) -> list:
        """HTP graph configs (client GraphConfig objects) for graph ``graph_name``: the
        ``graphs`` entries naming it in ``graph_names``, or naming no graph."""
        from ..client import htp_graph_config
        out = []
        for names, options in self.graphs:
            if names is None or graph_name in names:
                out += [htp_graph_config(opt, **{member: value}) for opt, member, value in options]
        return out

    def context_configs(self, when: str) -> list:
        """HTP context configs for ``when`` = "prepare" (contextCreate) or "load"
        (contextCreateFromBinary)."""
        from ..client import htp_context_config
        return [htp_context_config(opt, **{member: value})
                for opt, member, value, used in self.context if used == when]

    def device_configs(self) -> list:
        from ..client import htp_device_config
        return [htp_device_config(opt, **{member: value}) for opt, member, value in self.device]

    def warn_unused(self, when: str) -> None:
        """Warns about context options that do not apply to ``when`` ("prepare"/"load")."""
        for opt, _, _, used in self.context:
            if used != when:
                log.warning("config file: context option %s applies when a context is %s; "
                            "ignored here", opt, "prepared" if used == "prepare" else
                            "loaded from a binary")


def _expect(value, kinds, where: str):
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in
                                        (kinds if isinstance(kinds, tuple) else (kinds,))):
        names = "/".join(k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
        raise ToolError(f"config file: {where}: expected {names}, got {json.dumps(value)}")
    return value


def _dsp_arch(value: Any) -> int:
    text = str(value).strip().lower()
    if text.startswith("v"):
        text = text[1:]
    if not text.isdigit() or getattr(Q, f"QNN_HTP_DEVICE_ARCH_V{text}", None) is None:
        raise ToolError(f"config file: devices[].dsp_arch: {json.dumps(value)} is not an HTP "
                        f"architecture (v68, v69, v73, v75, v79, v81, v85)")
    return int(text)


def read_json(path: str, option: str) -> Any:
    """The JSON document at ``path`` (given with ``option``); unreadable or invalid: ToolError."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise ToolError(f"{option} {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ToolError(f"{option} {path}: invalid JSON: {e}") from None


def load_backend_config(path: str | None) -> BackendConfig:
    """Reads ``--config_file``: the SDK's outer ``{"backend_extensions": {"shared_library_path",
    "config_file_path"}}`` form (the shared library is not loaded: qnnemu maps the options
    itself) or directly the HTP backend config. Unknown keys are refused; keys the emulator
    has no model for are accepted with a warning naming them."""
    cfg = BackendConfig(path=path)
    if path is None:
        return cfg
    data = read_json(path, "--config_file")
    _expect(data, dict, "top level")
    if "backend_extensions" in data:
        outer = _expect(data["backend_extensions"], dict, "backend_extensions")
        unknown = set(data) - {"backend_extensions", "context_configs", "graph_configs"}
        if unknown:
            raise ToolError(f"config file {path}: unknown top-level keys {sorted(unknown)}")
        for key in set(data) - {"backend_extensions"}:
            log.warning("config file: %s is not supported by the qnnemu tools; ignored", key)
        if "shared_library_path" in outer:
            log.info("config file: backend_extensions.shared_library_path %s is not loaded; "
                     "qnnemu applies the HTP options itself", outer["shared_library_path"])
        inner = outer.get("config_file_path")
        if not isinstance(inner, str):
            raise ToolError(f"config file {path}: backend_extensions.config_file_path "
                            f"(the HTP config JSON) is missing")
        inner_path = Path(inner)
        if not inner_path.is_absolute() and not inner_path.exists():
            inner_path = Path(path).resolve().parent / inner
        try:
            data = json.loads(inner_path.read_text())
        except OSError as e:
            raise ToolError(f"config file {path}: config_file_path {inner}: "
                            f"{e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise ToolError(f"config file {inner_path}: invalid JSON: {e}") from None
        _expect(data, dict, f"{inner_path}: top level")
    cfg.raw = data
    unknown = set(data) - {"graphs", "devices", "context", "groupContext", "memory"}
    if unknown:
        raise ToolError(f"config file: unknown keys {sorted(unknown)} (expected graphs, devices, "
                        f"context, groupContext, memory)")
    for i, g in enumerate(_expect(data.get("graphs", []), list, "graphs")):
        _expect(g, dict, f"graphs[{i}]")
        names = g.get("graph_names")
        if names is not None:
            _expect(names, list, f"graphs[{i}].graph_names")
            names = [str(n) for n in names]
        options = []
        for key, value in g.items():
            if key == "graph_names":
                continue
            if key == "fp16_relaxed_precision":
                log.warning("config file: graphs[%d].fp16_relaxed_precision is deprecated (QNN "
                            "2.35); mapped to the PRECISION=FLOAT16 graph config", i)
                if _expect(value, (bool, int, float), f"graphs[{i}].{key}"):
                    options.append(("PRECISION", "precision", Q.QNN_PRECISION_FLOAT16))
                continue
            if key not in _GRAPH_KEYS:
                raise ToolError(f"config file: graphs[{i}].{key}: unknown graph option "
                                f"(known: graph_names, fp16_relaxed_precision, "
                                f"{', '.join(_GRAPH_KEYS)})")
            option, member, convert = _GRAPH_KEYS[key]
            _expect(value, (bool, int, float), f"graphs[{i}].{key}")
            options.append((option, member, convert(value)))
        cfg.graphs.append((names, options))
    for i, d in enumerate(_expect(data.get("devices", []), list, "devices")):
        _expect(d, dict, f"devices[{i}]")
        if i > 0:
            log.warning("config file: devices[%d]: only the first device is used", i)
            continue
        for key, value in d.items():
            where = f"devices[{i}].{key}"
            if key in ("soc_model", "soc_id"):
                if key == "soc_id":
                    log.warning("config file: %s is deprecated; used as soc_model", where)
                cfg.device.append(("SOC", "socModel", int(_expect(value, int, where))))
            elif key == "dsp_arch":
                cfg.device.append(("ARCH", "arch", {"deviceId": 0, "arch": _dsp_arch(value)}))
            elif key == "pd_session":
                if value not in ("signed", "unsigned"):
                    raise ToolError(f"config file: {where}: {json.dumps(value)} is not "
                                    f"\"signed\" or \"unsigned\"")
                cfg.device.append(("SIGNEDPD", "useSignedProcessDomain",
                                   {"deviceId": 0, "useSignedProcessDomain": value == "signed"}))
            elif key in _DEVICE_IGNORED:
                log.warning("config file: %s ignored: %s", where, _DEVICE_IGNORED[key])
            elif key == "cores":
                for j, core in enumerate(_expect(value, list, where)):
                    _expect(core, dict, f"{where}[{j}]")
                    for ckey, cvalue in core.items():
                        if ckey not in _CORE_KEYS:
                            raise ToolError(f"config file: {where}[{j}].{ckey}: unknown core "
                                            f"option (known: {', '.join(_CORE_KEYS)})")
                        if ckey == "perf_profile" and cvalue not in _PERF_PROFILES:
                            raise ToolError(f"config file: {where}[{j}].perf_profile: "
                                            f"{json.dumps(cvalue)} is not one of "
                                            f"{', '.join(_PERF_PROFILES)}")
                        log.warning("config file: %s[%d].%s ignored: performance votes do not "
                                    "change emulated results", where, j, ckey)
            else:
                raise ToolError(f"config file: {where}: unknown device option (known: soc_model, "
                                f"soc_id, dsp_arch, pd_session, cores, "
                                f"{', '.join(_DEVICE_IGNORED)})")
    context = _expect(data.get("context", {}), dict, "context")
    for key, value in context.items():
        if key in _CONTEXT_KEYS:
            option, member, convert, used = _CONTEXT_KEYS[key]
            _expect(value, (bool, int), f"context.{key}")
            cfg.context.append((option, member, convert(value), used))
        elif key in _CONTEXT_IGNORED:
            log.warning("config file: context.%s ignored: %s", key, _CONTEXT_IGNORED[key])
        else:
            raise ToolError(f"config file: context.{key}: unknown context option (known: "
                            f"{', '.join(list(_CONTEXT_KEYS) + list(_CONTEXT_IGNORED))})")
    group = _expect(data.get("groupContext", {}), dict, "groupContext")
    for key in group:
        if key != "share_resources":
            raise ToolError(f"config file: groupContext.{key}: unknown option (known: share_resources)")
        log.warning("config file: groupContext.share_resources ignored: the tools load one context")
    memory = _expect(data.get("memory", {}), dict, "memory")
    for key, value in memory.items():
        if key != "mem_type":
            raise ToolError(f"config file: memory.{key}: unknown option (known: mem_type)")
        if value != "shared_buffer":
            raise ToolError(f"config file: memory.mem_type: {json.dumps(value)} is not "
                            f"\"shared_buffer\"")
        raise ToolError("config file: memory.mem_type \"shared_buffer\" (multi-tensor shared "
                        "I/O buffers) is not supported by the qnnemu tools; they pass inputs "
                        "and outputs as client buffers")
    return cfg


# -------------------------------------------------------------------------- raw tensor data
def _spec(quant: dict):
    try:
        return spec_from_dict(quant)
    except ValueError:
        raise ToolError(f"quantization encoding {quant.get('encoding')} is not supported for "
                        f"graph inputs/outputs by the qnnemu tools") from None


def quantize(x: np.ndarray, qtype: int, quant: dict) -> np.ndarray:
    """float -> fixed-point codes exactly as the backend's Quantize op computes them (QNN: real
    = scale * (code + offset); qnnemu.spec.quant, the Quantize op's vendor-matched rounding),
    saturated to the type's (or bitwidth's) range."""
    return Requantize(_spec(quant), qtype, rounding_for("Quantize"))(np.asarray(x, np.float32))


def dequantize(q: np.ndarray, quant: dict) -> np.ndarray:
    """fixed-point codes -> float32: ``scale * (code + offset)`` (qnnemu.spec.quant)."""
    return spec_dequantize(q, _spec(quant))


def _bfloat16_bits(x: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest, ties to even
    return rounded.astype(np.uint16)


def to_tensor(x: np.ndarray, tensor) -> np.ndarray:
    """A float32 array -> the tensor's storage type (quantizing fixed-point tensors)."""
    qtype = tensor.dtype
    if qtype in dtypes.FIXED_POINT_TYPES:
        if not tensor.quant:
            raise ToolError(f"tensor {tensor.name!r} is {dtypes.name(qtype)} without a "
                            f"quantization encoding; use native input files")
        return quantize(x, qtype, tensor.quant)
    if qtype == Q.QNN_DATATYPE_BFLOAT_16:
        return _bfloat16_bits(x)
    return x.astype(dtypes.numpy_dtype(qtype))


def from_tensor(y: np.ndarray, tensor) -> np.ndarray:
    """An output in the tensor's storage type -> float32 (dequantizing fixed-point ones)."""
    qtype = tensor.dtype
    if qtype in dtypes.FIXED_POINT_TYPES and tensor.quant:
        return dequantize(y, tensor.quant)
    if qtype == Q.QNN_DATATYPE_BFLOAT_16:
        return (y.astype(np.uint32) << 16).view(np.float32)
    return y.astype(np.float32)


def read_raw(path: str, tensor, native: bool) -> np.ndarray:
    """A raw input file for ``tensor``: float32 (converted) or, ``native``, its storage type."""
    file_dtype = tensor.numpy_dtype if native else np.dtype(np.float32)
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise ToolError(f"input {tensor.name!r}: cannot read {path}: {e.strerror or e}") from None
    count = int(np.prod(tensor.shape, dtype=np.int64))
    expected = count * file_dtype.itemsize
    if data.size != expected:
        raise ToolError(f"input {tensor.name!r}: {path} has {data.size} bytes, expected "
                        f"{expected} ({count} x {file_dtype.name}"
                        f"{'' if native else ', float32 file; --use_native_input_files for the tensor type'})")
    array = data.view(file_dtype).reshape(tensor.shape)
    return array if native else to_tensor(array, tensor)


def output_file_name(tensor_name: str) -> str:
    """``<tensor>.raw`` with characters that are unsafe in file names replaced by '_'."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in tensor_name)
    return (safe or "_") + ".raw"
