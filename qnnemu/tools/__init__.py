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

Every tool runs, reports and exits the same way (:func:`run_main`, :mod:`.reporting`).

What the tools share lives in named modules, re-exported here:

- :mod:`.reporting`: running a tool's main, its messages and exit statuses (``run_main``,
  ``ToolError``, ``parse_args``);
- :mod:`.libraries`: the backend/System library resolution (``--backend``, ``--system_library``);
- :mod:`.config`: the backend-extension config file (the SDK's ``--config_file``);
- :mod:`.quantization`: float <-> fixed-point codes with the backend's quantizer;
- :mod:`.raw_io`: raw input/output files <-> tensors;
- :mod:`.viewer`: the profile viewer's renderers (chrometrace, QHAS report);
- :mod:`.lpai`: the LPAI backend in net-run and the generator (offline prepare, scratch and
  persistent buffers, ADSP direct mode and TCM; docs/lpai.md).
"""
from __future__ import annotations

from .config import BackendConfig, load_backend_config, read_json
from .libraries import resolve_backend, resolve_system_library, vendor_library_dir
from .quantization import dequantize, quantize
from .raw_io import from_tensor, output_file_name, read_raw, to_tensor
from .reporting import (
                        EXIT_FAILURE,
                        EXIT_INTERRUPTED,
                        EXIT_OK,
                        EXIT_USAGE,
                        LOG_LEVELS,
                        ToolError,
                        error_code_name,
                        log,
                        parse_args,
                        plural,
                        run_main,
                        setup_logging,
                        tool_main,
)

__all__ = ["BackendConfig", "load_backend_config", "read_json", "resolve_backend", "resolve_system_library",
           "vendor_library_dir", "dequantize", "quantize", "from_tensor", "output_file_name", "read_raw",
           "to_tensor", "EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "LOG_LEVELS", "ToolError",
           "error_code_name", "log", "parse_args", "plural", "run_main", "setup_logging", "tool_main"]
