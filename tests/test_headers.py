"""include/QNN against the ABI facts (tests/data/qnn-abi-2.43.json): layouts, values, strings;
and the headers' hygiene: each compiles alone as C11 and C++17, in any include order.
"""
from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

import qnnemu
from qnnemu.headers import constants

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = json.loads((ROOT / "tests" / "data" / "qnn-abi-2.43.json").read_text())
INCLUDE = Path(qnnemu.include_dir()) / "QNN"
HEADERS = sorted(MANIFEST["headers"])

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _variant_headers(variant: str) -> list[str]:
    # HTP and LPAI both define struct _QnnDevice_DeviceInfoExtension_t: never together.
    other = "LPAI/" if variant == "htp" else "HTP/"
    return [h for h in HEADERS if not h.startswith(other)]


def _in_variant(header: str, variant: str) -> bool:
    return header.startswith("LPAI/") == (variant == "lpai")


def _fact_program(variant: str) -> tuple[str, list[tuple[str, str, tuple]]]:
    """A C program printing every fact of one variant, and the expected values."""
    home = {n: h for h, names in MANIFEST["headers"].items() for n in names}
    lines = ["#include <stdio.h>", "#include <stddef.h>"]
    lines += [f'#include "{h}"' for h in _variant_headers(variant)]
    lines.append("int main(void) {")
    facts = []
    for name, s in MANIFEST["structs"].items():
        if not _in_variant(s["header"], variant):
            continue
        facts.append(("S", name, (s["size"], s["align"])))
        lines.append(f'printf("S %s %zu %zu\\n", "{name}", sizeof({name}), _Alignof({name}));')
        for f in s["fields"]:
            if "name" in f:
                key = f"{name}.{f['name']}"
                facts.append(("F", key, (f["offset"], f["size"])))
                lines.append(f'printf("F %s %zu %zu\\n", "{key}", offsetof({name}, {f["name"]}), '
                             f'sizeof((({name} *)0)->{f["name"]}));')
    for ename, e in MANIFEST["enums"].items():
        if _in_variant(e["header"], variant):
            for k, v in e["values"].items():
                facts.append(("E", k, (v,)))
                lines.append(f'printf("E %s %lld\\n", "{k}", (long long)({k}));')
    for k, v in MANIFEST["constants"].items():
        if _in_variant(home[k], variant):
            facts.append(("M", k, (v,)))
            lines.append(f'printf("M %s %lld\\n", "{k}", (long long)({k}));')
    for k, v in MANIFEST["strings"].items():
        if _in_variant(home[k], variant):
            facts.append(("T", k, (v,)))
            lines.append(f'printf("T %s %s\\n", "{k}", {k});')
    lines += ["return 0;", "}"]
    return "\n".join(lines), facts


@pytest.mark.parametrize("variant", ["htp", "lpai"])
def test_every_abi_fact_holds(tmp_path, variant):
    source, facts = _fact_program(variant)
    (tmp_path / "facts.c").write_text(source)
    exe = tmp_path / "facts"
    build = subprocess.run(["gcc", "-std=c11", "-w", "-I", str(INCLUDE), str(tmp_path / "facts.c"),
                            "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, f"the fact program compiles against include/QNN:\n{build.stderr[:2000]}"
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    got = {}
    for line in out.splitlines():
        kind, name, *values = line.split(" ", 2)
        got[(kind, name)] = tuple(values[0].split(" ")) if kind != "T" else tuple(values)
    wrong = [f"{kind} {name}: want {want}, have {got.get((kind, name))}"
             for kind, name, want in facts if got.get((kind, name)) != tuple(str(w) for w in want)]
    assert not wrong, f"{len(wrong)} of {len(facts)} {variant} facts differ: " + "; ".join(wrong[:10])


def test_fact_count_matches_manifest():
    _, htp = _fact_program("htp")
    _, lpai = _fact_program("lpai")
    assert len(htp) + len(lpai) == 2433, f"htp {len(htp)} + lpai {len(lpai)} facts are the manifest's 2433"


@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize("std", ["c11", "c++17"])
def test_header_compiles_alone(tmp_path, header, std):
    cxx = std.startswith("c++")
    src = tmp_path / ("one.cpp" if cxx else "one.c")
    src.write_text(f'#include "{header}"\nint main(void) {{ return 0; }}\n')
    cmd = ["g++" if cxx else "gcc", f"-std={std}", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
           "-I", str(INCLUDE), str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{header} compiles on its own as {std} with -Wall -Wextra -Werror:\n{r.stderr[:1500]}"


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("variant", ["htp", "lpai"])
def test_headers_in_any_order(tmp_path, seed, variant):
    order = _variant_headers(variant)
    random.Random(seed).shuffle(order)
    src = tmp_path / "all.cpp"
    src.write_text("".join(f'#include "{h}"\n' for h in order) + "int main() { return 0; }\n")
    for compiler, std, name in (("gcc", "c11", "all.c"), ("g++", "c++17", "all.cpp")):
        path = tmp_path / name
        path.write_text(src.read_text())
        r = subprocess.run([compiler, f"-std={std}", "-Wall", "-Werror", "-fsyntax-only", "-I", str(INCLUDE),
                            str(path)], capture_output=True, text=True)
        assert r.returncode == 0, f"all {variant} headers in shuffled order {seed} compile as {std}:\n{r.stderr[:1500]}"


def test_headers_are_generated_from_the_manifest():
    r = subprocess.run(["python3", str(ROOT / "tools" / "gen_headers.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, f"include/QNN matches tools/gen_headers.py output: {r.stdout}{r.stderr}"


def test_python_constants_match_manifest():
    c = constants()
    for section in ("constants", "strings"):
        for k, v in MANIFEST[section].items():
            assert c.get(k) == v, f"qnnemu.headers.constants()[{k!r}] is the manifest's {v!r}"
    for e in MANIFEST["enums"].values():
        for k, v in e["values"].items():
            assert c.get(k) == v, f"enum value {k} read from our headers is {v}"


def test_no_vendor_text_in_headers():
    for path in INCLUDE.rglob("*.h"):
        text = path.read_text()
        assert "Qualcomm Technologies" not in text and "Confidential" not in text, \
            f"{path.name} carries no vendor copyright or confidentiality text"
