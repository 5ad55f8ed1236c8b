"""qnnemu-net-run: runs QNN graphs over an input list and writes their outputs, like qnn-net-run.

Conventions of the SDK's qnn-net-run, for any QNN backend library (ours by default, the
vendor's libQnnHtp.so for comparison):

- the graphs come from a context binary (``--retrieve_context``: contextCreateFromBinary, the
  graphs and their input/output tensors listed by the System library's
  systemContextGetBinaryInfo, graphRetrieve) or from a JSON graph description prepared online
  (``--model``, the format of qnnemu-context-binary-generator: contextCreate, graphCreate,
  graphAddNode, graphFinalize);
- ``--input_list``: one inference per line, the input files separated by spaces, either in
  the graph's input order or as ``<tensor name>:=<path>``; lines starting with ``#`` or ``%``
  are skipped; for several graphs, a comma-separated list of input lists (graph order of the
  binary or description; ``__`` skips a graph);
- input files hold float32 values, quantized (fixed-point inputs) or converted to the input's
  type by the tool; ``--use_native_input_files`` (or ``--native_input_tensor_names a,b``) reads
  them in the tensor's own storage type instead. Outputs are written as float32 (dequantized)
  unless ``--use_native_output_files``;
- ``--output_dir`` (default ``./output``) gets ``Result_<N>/<output tensor>.raw`` per inference
  (``<graph>/Result_<N>/...`` when several graphs run); ``--keep_num_outputs`` bounds how many;
- ``--num_inferences`` / ``--duration`` (seconds) loop over the input list;
- ``--profiling_level basic|detailed|linting``: a QnnProfile of the backend (linting:
  QNN_HTP_PROFILE_LEVEL_LINTING) is passed to contextCreateFromBinary / graphFinalize and every
  graphExecute, and its events are written to ``<output_dir>/qnn-profiling-data.json``;
  ``--profiling_option optrace`` (detailed / linting) adds each execute's optrace document;
  ``--profiling_level backend`` takes the level from the config file's
  ``devices[0].profiling_level`` (e.g. ``"linting"``, as the documentation's linting recipe);
- ``--config_file``: the backend-extension JSON (see :mod:`qnnemu.tools`): device options go
  to deviceCreate, context options to contextCreate[FromBinary], graph options to graphCreate
  (``--model`` only: a binary's graphs were configured when it was prepared);
- ``--log_level``: the backend's QnnLog level and the tool's messages (stderr);
- an LPAI backend (``--backend lpai``: libQnnLpaiEmu.so, or any library with an LPAI provider)
  runs through :mod:`qnnemu.tools.lpai`: scratch and persistent buffers, aligned I/O buffers,
  ``--direct_mode adsp`` and the LPAI ``--config_file`` (``lpai_graph.execute.mem_type``).

``python -m qnnemu.tools.net_run`` runs it too.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .config import load_backend_config
from .libraries import resolve_backend, resolve_system_library
from .raw_io import from_tensor, output_file_name, read_raw
from .reporting import LOG_LEVELS, ToolError, plural, tool_main

PROG = "qnnemu-net-run"
log = logging.getLogger("qnnemu.tools.net_run")

PROFILE_FILE = "qnn-profiling-data.json"
SKIP_GRAPH = "__"


def parse_input_list(path: str, graph) -> list[dict[str, str]]:
    """The inferences of an input list for ``graph``: one ``{input name: file}`` per line."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise ToolError(f"--input_list {path}: {e.strerror or e}") from None
    names = [t.name for t in graph.inputs]
    base = Path(path).resolve().parent
    out = []
    for lineno, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith(("#", "%")):
            continue
        where = f"--input_list {path}:{lineno}"
        tokens = text.split()
        named = [":=" in tok for tok in tokens]
        if any(named) and not all(named):
            raise ToolError(f"{where}: mixes name:=path and plain paths")
        if all(named):
            feeds = {}
            for tok in tokens:
                name, _, file = tok.partition(":=")
                if name not in names:
                    raise ToolError(f"{where}: {name!r} is not an input of graph {graph.name!r} "
                                    f"(inputs: {', '.join(names)})")
                if name in feeds:
                    raise ToolError(f"{where}: input {name!r} is given twice")
                feeds[name] = file
            missing = [n for n in names if n not in feeds]
            if missing:
                raise ToolError(f"{where}: no file for inputs {missing} of graph {graph.name!r}")
        else:
            if len(tokens) != len(names):
                raise ToolError(f"{where}: {len(tokens)} files for the {len(names)} inputs of "
                                f"graph {graph.name!r} ({', '.join(names)})")
            feeds = dict(zip(names, tokens))
        for name, file in feeds.items():
            if not os.path.isabs(file) and not os.path.exists(file) and (base / file).exists():
                feeds[name] = str(base / file)  # relative to the list when not to the cwd
        out.append(feeds)
    if not out:
        raise ToolError(f"--input_list {path}: no inferences (every line empty or a comment)")
    return out


class _ProfileLog:
    """Collects a QnnProfile's events after every profiled call; written as JSON."""

    def __init__(self, backend, level: str | None, backend_path: str, optrace: bool = False):
        self.profile = backend.profile(level, optrace=optrace) if level else None
        self.doc = {"backend": backend_path, "profiling_level": level, "optrace": optrace, "calls": []}

    def record(self, call: str, **where) -> None:
        if self.profile is not None:
            self.doc["calls"].append({"call": call, **where, "events": self.profile.events()})

    def write(self, output_dir: str) -> None:
        if self.profile is not None:
            path = os.path.join(output_dir, PROFILE_FILE)
            Path(path).write_text(json.dumps(self.doc, indent=1) + "\n")
            log.info("profiling events written to %s", path)


def _load_graphs(args, be, config, profiler: _ProfileLog, backend_path: str):
    if args.retrieve_context:
        from ..system_client import SystemLibrary
        try:
            blob = Path(args.retrieve_context).read_bytes()
        except OSError as e:
            raise ToolError(f"--retrieve_context {args.retrieve_context}: {e.strerror or e}") from None
        system_path = resolve_system_library(args.system_library, backend_path)
        log.info("reading the binary's graphs with %s", system_path)
        info = SystemLibrary(system_path, log_level=args.log_level).binary_info(blob)
        if config.graphs:
            log.warning("config file: graph options apply when graphs are prepared; the graphs "
                        "of --retrieve_context are used as prepared")
        config.warn_unused("load")
        ctx = be.context_from_binary(blob, config.context_configs("load"),
                                     profile=profiler.profile)
        profiler.record("contextCreateFromBinary")
        if not info["graphs"]:
            raise ToolError(f"--retrieve_context {args.retrieve_context}: the binary has no graphs")
        graphs = {g["name"]: g for g in info["graphs"]}
        enabled = config.enabled_graphs   # context_configs.enable_graphs: only those, in that order
        chosen = [graphs[n] for n in enabled if n in graphs] if enabled is not None else info["graphs"]
        return [ctx.retrieve_graph(g["name"], g["inputs"], g["outputs"]) for g in chosen]
    from .context_binary_generator import build_graphs, finalize_graphs, load_graph_description
    specs = load_graph_description(args.model)
    config.warn_unused("prepare")
    ctx = be.context(config.context_configs("prepare"))
    graphs = build_graphs(ctx, specs, config)
    finalize_graphs(graphs, specs, profiler.profile,
                    after=lambda g: profiler.record("graphFinalize", graph=g.name))
    return graphs


def _input_lists(args, graphs) -> list[str | None]:
    lists = [p.strip() for p in args.input_list.split(",")]
    if len(lists) != len(graphs):
        raise ToolError(f"--input_list: {len(lists)} input list(s) for {len(graphs)} graphs "
                        f"({', '.join(g.name for g in graphs)}); give one per graph, "
                        f"comma-separated, {SKIP_GRAPH} to skip a graph")
    return [None if p == SKIP_GRAPH else p for p in lists]


def _run_graph(args, graph, inferences, out_dir: str, profiler: _ProfileLog, votes=None) -> int:
    """Runs the inferences of one graph; ``votes`` (a qnnemu.htp.perf.ProfileSession) votes the
    config file's perf profile before each inference and its idle state after it, as the SDK's
    net-run extension does ("QNN HTP Backend Extensions")."""
    native = {n for n in (args.native_input_tensor_names or "").split(",") if n}
    unknown = native - {t.name for t in graph.inputs}
    if unknown and args.native_input_tensor_names:
        log.warning("--native_input_tensor_names: %s are not inputs of graph %r",
                    sorted(unknown), graph.name)
    by_name = {t.name: t for t in graph.inputs}
    feeds_per_line = []
    for files in inferences:
        feeds_per_line.append({
            name: read_raw(path, by_name[name], args.use_native_input_files or name in native)
            for name, path in files.items()})
    limit = args.num_inferences if args.num_inferences is not None else len(feeds_per_line)
    keep = args.keep_num_outputs
    start = time.perf_counter()
    count = 0
    while True:
        if args.duration is not None:
            if count and time.perf_counter() - start >= args.duration:
                break
        elif count >= limit:
            break
        feeds = feeds_per_line[count % len(feeds_per_line)]
        if votes is not None:
            votes.before_stage()
        outputs = graph.execute(feeds, profile=profiler.profile)
        if votes is not None:
            votes.after_stage()
        profiler.record("graphExecute", graph=graph.name, inference=count)
        if keep is None or count < keep:
            result_dir = os.path.join(out_dir, f"Result_{count}")
            os.makedirs(result_dir, exist_ok=True)
            for t in graph.outputs:
                data = outputs[t.name]
                if not args.use_native_output_files:
                    data = from_tensor(data, t)
                np.ascontiguousarray(data).tofile(os.path.join(result_dir, output_file_name(t.name)))
        count += 1
    elapsed = time.perf_counter() - start
    log.info("graph %s: %d inference(s) in %.3f s (%.3f ms each)", graph.name, count, elapsed,
             1e3 * elapsed / max(count, 1))
    return count


def _ran_text(graph, count: int, keep: int | None, out_dir: str) -> str:
    """``ran 2 inferences of graph g: outputs in out/Result_0 .. out/Result_1 (1 file each)``."""
    kept = count if keep is None else min(count, keep)
    text = f"ran {plural(count, 'inference')} of graph {graph.name}"
    if not kept:
        return text + ": no outputs kept (--keep_num_outputs 0)"
    first = os.path.normpath(os.path.join(out_dir, "Result_0"))
    where = first if kept == 1 else f"{first} .. {os.path.normpath(os.path.join(out_dir, f'Result_{kept - 1}'))}"
    files = plural(len(graph.outputs), "file")
    return f"{text}: outputs in {where} ({files}{'' if kept == 1 else ' each'})"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Runs QNN graphs (a context binary or a JSON graph description) "
        "on a QNN backend library over an input list, writing Result_N/<output>.raw files.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--retrieve_context", metavar="FILE", help="context binary to load")
    src.add_argument("--model", metavar="FILE",
                     help="JSON graph description (docs/graph-json.md) to prepare online")
    p.add_argument("--input_list", required=True, metavar="FILE",
                   help="input list file(s): one inference per line; comma-separated per graph")
    p.add_argument("--backend", help="QNN backend library: a path or a name "
                   "(default: qnnemu's libQnnHtpEmu.so; 'htp' is the vendor's libQnnHtp.so; "
                   "'lpai' is qnnemu's libQnnLpaiEmu.so)")
    p.add_argument("--system_library", metavar="FILE", help="libQnnSystem.so reading the binary "
                   "(default: the one next to the backend, else qnnemu's)")
    p.add_argument("--output_dir", default="./output", help="output directory (default ./output)")
    p.add_argument("--use_native_input_files", action="store_true",
                   help="input files are in the tensors' own data types (default: float32)")
    p.add_argument("--native_input_tensor_names", metavar="NAMES",
                   help="comma-separated inputs whose files are in their own data types")
    p.add_argument("--use_native_output_files", action="store_true",
                   help="write outputs in the tensors' own data types (default: float32)")
    p.add_argument("--num_inferences", type=int, metavar="N",
                   help="number of inferences, looping over the input list")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help="run for this long, looping over the input list")
    p.add_argument("--keep_num_outputs", type=int, metavar="N",
                   help="write the outputs of the first N inferences only")
    p.add_argument("--profiling_level", choices=("basic", "detailed", "linting", "backend"),
                   help="backend: the level of the config file's devices[0].profiling_level")
    p.add_argument("--profiling_option", choices=("optrace",),
                   help="optrace: one optrace document per execute (needs detailed or linting)")
    p.add_argument("--config_file", metavar="FILE",
                   help="backend-extension JSON (HTP graphs/devices/context options; LPAI: "
                   "lpai_graph.execute.mem_type)")
    p.add_argument("--direct_mode", choices=("adsp",),
                   help="LPAI backend: ADSP direct mode (TCM memory becomes available)")
    p.add_argument("--log_level", choices=LOG_LEVELS, default="warn")
    return p


def _profiling_level(level: str | None, config) -> str | None:
    """``--profiling_level backend`` takes the backend-extension config's
    ``devices[0].profiling_level`` (QNN HTP backend documentation, "Detailed and Linting
    Profiling": ``{"devices": [{"profiling_level": "linting"}]}`` with ``--profiling_level
    backend`` gives the linting report); without one in the config, BASIC."""
    if level == "backend":
        if config.profiling_level is None:
            log.warning("--profiling_level backend: the config file sets no devices[0].profiling_level; "
                        "profiling at basic level")
            return "basic"
        log.info("--profiling_level backend: %s (config file devices[0].profiling_level)",
                 config.profiling_level)
        return config.profiling_level
    if config.profiling_level is not None:
        log.warning("config file: devices[0].profiling_level %s is used with --profiling_level backend only",
                    config.profiling_level)
    return level


def main(argv: Sequence[str] | None = None) -> int:
    def body(args) -> int:
        for name in ("num_inferences", "keep_num_outputs"):
            value = getattr(args, name)
            if value is not None and value < 1 and not (name == "keep_num_outputs" and value == 0):
                raise ToolError(f"--{name} {value}: must be at least 1")
        if args.duration is not None and not args.duration > 0:
            raise ToolError(f"--duration {args.duration}: must be a positive number of seconds")
        if args.duration is not None and args.num_inferences is not None:
            raise ToolError("--duration and --num_inferences are exclusive")
        from ..client import Backend
        from . import lpai
        backend_path = lpai.resolve(args.backend) or resolve_backend(args.backend)
        if lpai.provides_lpai(backend_path):
            from .context_binary_generator import build_graphs, load_graph_description
            if args.profiling_level == "backend":   # the LPAI config file has no profiling level
                log.warning("--profiling_level backend: the LPAI backend has no backend-specific level; "
                            "profiling at basic level")
                args.profiling_level = "basic"
            return lpai.net_run(args, backend_path, lpai.RunHelpers(
                PROG, PROFILE_FILE, SKIP_GRAPH, parse_input_list, _input_lists, _ProfileLog, _ran_text,
                load_graph_description, build_graphs))
        if args.direct_mode:
            raise ToolError(f"--direct_mode {args.direct_mode}: ADSP direct mode is the LPAI backend's; "
                            f"{backend_path} has no LPAI provider")
        config = load_backend_config(args.config_file)
        args.profiling_level = _profiling_level(args.profiling_level, config)
        for path in args.input_list.split(","):
            if path.strip() != SKIP_GRAPH and not os.path.isfile(path.strip()):
                raise ToolError(f"--input_list {path.strip()}: no such file")
        os.makedirs(args.output_dir, exist_ok=True)
        with Backend(backend_path, log_level=args.log_level,
                     device_configs=config.device_configs()) as be:
            if args.profiling_option == "optrace" and args.profiling_level not in ("detailed", "linting"):
                raise ToolError("--profiling_option optrace needs --profiling_level detailed or linting")
            profiler = _ProfileLog(be, args.profiling_level, backend_path, args.profiling_option == "optrace")
            graphs = _load_graphs(args, be, config, profiler, backend_path)
            lists = _input_lists(args, graphs)
            plans = [(g, parse_input_list(lst, g)) for g, lst in zip(graphs, lists) if lst]
            ran = []
            votes = config.perf_session(be)    # devices[0].cores[0].perf_profile
            try:
                for graph, inferences in plans:
                    out_dir = (args.output_dir if len(graphs) == 1 else
                               os.path.join(args.output_dir, output_file_name(graph.name)[:-4]))
                    count = _run_graph(args, graph, inferences, out_dir, profiler, votes)
                    ran.append(_ran_text(graph, count, args.keep_num_outputs, out_dir))
            finally:
                if votes is not None:
                    votes.infrastructure.close()
            profiler.write(args.output_dir)
        summary = "; ".join(ran)
        if profiler.profile is not None:
            summary += f"; profiling events in {os.path.normpath(os.path.join(args.output_dir, PROFILE_FILE))}"
        print(f"{PROG}: {summary}")
        return 0

    return tool_main(PROG, build_parser(), argv, body)


if __name__ == "__main__":
    raise SystemExit(main())
