"""Project vocabulary (issue 12, item 7; docs/references.md "How to cite them"): the vendor
documents the project implements are cited by their public title and section (e.g. QNN HTP
backend documentation, "Graph Priority"), never by the private nicknames of the copies the
project was written from, which a reader of the repository cannot resolve."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The tracked areas a reader sees (README.md is a file, the rest are directories).
AREAS = ("qnnemu", "csrc", "tests", "docs", "samples", "benchmarks", "tools", "README.md")
# Built from pieces so that this file does not match itself.
NICKNAME = re.compile("se" + r"ed\s+0" + r"0\d", re.IGNORECASE)


def tracked_text_files() -> list[Path]:
    """The git-tracked files of AREAS that are UTF-8 text (binaries and data blobs skipped)."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", *AREAS],
                             capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"not a git checkout ({exc}): the tracked files are unknown")
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file():
            try:
                path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            files.append(path)
    return files


def test_pattern_matches_the_nicknames_and_not_ordinary_seeds():
    for word, gap, digit in (("seed", " ", 2), ("Seed", " ", 1), ("SEED", " ", 0),
                             ("(seed", " ", 4), ("seed", "\t", 3)):
        text = f"{word}{gap}00{digit}"
        assert NICKNAME.search(text), f"the pattern finds the nickname in {text!r}"
    for text in ("seed=0", "np.random.default_rng(seed)", "seed 1234", "the seed's value",
                 "seed 010", "SEED_002_THREADS"):
        assert not NICKNAME.search(text), f"the pattern leaves {text!r} alone"


def test_no_vendor_document_nicknames():
    files = tracked_text_files()
    assert any(p.name == "test_vocabulary.py" for p in files), \
        f"the scan sees the tracked files (this one included); found {len(files)}"
    hits = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
            for path in files
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if NICKNAME.search(line)]
    assert not hits, ("vendor documents are cited by public title and section (docs/references.md"
                      ' "How to cite them"), e.g. QNN HTP backend documentation, "Graph Priority";'
                      " found:\n" + "\n".join(hits))
