"""Loads a context binary, applies a LoRA adapter (a binary section) and runs an input list:
the on-target flow of the QNN LoRA documentation ("Online Flow: QNN Call Flow") as a small
QNN application on qnnemu.client, for any QNN backend library.

QNN calls: contextCreateFromBinary; the graph's inputs and outputs from the System library
(systemContextGetBinaryInfo); graphRetrieve; contextApplyBinarySection(context, graph,
QNN_CONTEXT_SECTION_UPDATABLE, section file); then graphExecute once per input-list line.
Input lists, raw files and the outputs (``<output_dir>/Result_<N>/<output>.raw``, float32)
follow qnnemu-net-run, whose helpers it uses; so does the one summary line on stdout and the
one ``apply_adapter: error: ...`` line on stderr (exit status 1) on failure.

    python examples/apply_adapter.py --retrieve_context examples/out/mlp.bin \
        --section examples/out/mlp.mlp.lora.section.bin \
        --input_list examples/input_list.txt --output_dir examples/out/lora
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from qnnemu.client import Backend
from qnnemu.system_client import SystemLibrary
from qnnemu.tools import (
    LOG_LEVELS,
    ToolError,
    from_tensor,
    output_file_name,
    parse_args,
    plural,
    read_raw,
    resolve_backend,
    resolve_system_library,
    run_main,
)
from qnnemu.tools.net_run import parse_input_list

PROG = "apply_adapter"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Loads a context binary, applies a binary "
                                "section (LoRA adapter) to one of its graphs and runs an input list.")
    p.add_argument("--retrieve_context", required=True, metavar="FILE", help="the context binary")
    p.add_argument("--section", required=True, metavar="FILE",
                   help="the UPDATABLE binary section to apply (qnnemu-context-binary-generator --adapter)")
    p.add_argument("--graph", help="the graph the section is for (default: the binary's only graph)")
    p.add_argument("--input_list", required=True, metavar="FILE", help="one inference per line")
    p.add_argument("--output_dir", default="./output", help="output directory (default ./output)")
    p.add_argument("--backend", help="QNN backend library (default: qnnemu's; 'htp': the vendor's)")
    p.add_argument("--log_level", choices=LOG_LEVELS, default="warn")
    return p


def main(argv: list[str] | None = None) -> int:
    args, status = parse_args(build_parser(), argv)
    if args is None:
        return status

    def body() -> int:
        try:
            blob = Path(args.retrieve_context).read_bytes()
            section = Path(args.section).read_bytes()
        except OSError as e:
            raise ToolError(f"{e.filename}: {e.strerror or e}") from None
        backend_path = resolve_backend(args.backend)
        info = SystemLibrary(resolve_system_library(None, backend_path)).binary_info(blob)
        graphs = {g["name"]: g for g in info["graphs"]}
        name = args.graph or (next(iter(graphs)) if len(graphs) == 1 else None)
        if name not in graphs:
            raise ToolError(f"--graph {args.graph}: give one of the binary's graphs {sorted(graphs)}")
        with Backend(backend_path, log_level=args.log_level) as be:
            ctx = be.context_from_binary(blob)
            spec = graphs[name]
            graph = ctx.retrieve_graph(name, spec["inputs"], spec["outputs"])
            ctx.apply_binary_section(section, graph)
            inputs = {t.name: t for t in graph.inputs}
            runs = parse_input_list(args.input_list, graph)
            for n, files in enumerate(runs):
                outputs = graph.execute({k: read_raw(path, inputs[k], False) for k, path in files.items()})
                result_dir = os.path.join(args.output_dir, f"Result_{n}")
                os.makedirs(result_dir, exist_ok=True)
                for t in graph.outputs:
                    np.ascontiguousarray(from_tensor(outputs[t.name], t)).tofile(
                        os.path.join(result_dir, output_file_name(t.name)))
        print(f"{PROG}: applied {args.section} to graph {name}, ran {plural(len(runs), 'inference')}: "
              f"outputs in {os.path.normpath(args.output_dir)}/Result_*")
        return 0

    return run_main(PROG, body, args.log_level)


if __name__ == "__main__":
    sys.exit(main())
