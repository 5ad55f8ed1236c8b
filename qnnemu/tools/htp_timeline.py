"""``qnnemu-htp-timeline SCENARIO.json`` (also ``python3 -m qnnemu.tools.htp_timeline``): the
shared HTP's timeline of a scenario of QNN graphs and non-QNN clients (QNN "HTP Yielding and
Pre-Emption"; qnnemu/htp/timeline.py describes the scenario format).

Prints the resource table (Time, HMX, HVX0.., VTCM 0..) and the yield counts and pre-emption
waits, and writes a chrometrace JSON (Trace Event Format; open it in chrome://tracing or
Perfetto) to ``-o`` (default: SCENARIO with the suffix ``.chrometrace.json``).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

from ..htp.timeline import ScenarioError, run_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qnnemu-htp-timeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", help="scenario JSON (qnnemu/htp/timeline.py)")
    parser.add_argument("-o", "--output", help="chrometrace JSON to write")
    args = parser.parse_args(argv)
    try:
        timeline = run_file(args.scenario)
    except (OSError, ScenarioError) as exc:
        print(f"qnnemu-htp-timeline: {exc}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.output) if args.output else pathlib.Path(args.scenario).with_suffix(".chrometrace.json")
    out.write_text(json.dumps(timeline.chrometrace(), indent=1), encoding="utf-8")
    sys.stdout.write(timeline.table())
    for label, count in sorted(timeline.yields.items()):
        print(f"{label}: pre-empted {count} time(s)")
    for label, wait in sorted(timeline.preemption_wait.items()):
        print(f"{label}: waited {wait:g} for evictions")
    print(f"end: {timeline.end:g}; chrometrace: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
