"""include/QNN against the ABI facts: every fact of the QNN 2.50 manifest
(tests/data/qnn-abi-2.50.json), and every fact of the 2.43 manifest that the 2.43 -> 2.50 delta
did not change (clients built with 2.43 headers keep working); the headers' hygiene: each
compiles alone as C11 and C++17, in any include order, with the build systems' -DQNN_API=.
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
MANIFEST = json.loads((ROOT / "tests" / "data" / "qnn-abi-2.50.json").read_text())
MANIFEST_243 = json.loads((ROOT / "tests" / "data" / "qnn-abi-2.43.json").read_text())
MANIFESTS = {"2.50": MANIFEST, "2.43": MANIFEST_243}
INCLUDE = Path(qnnemu.include_dir()) / "QNN"
HEADERS = sorted(MANIFEST["headers"])
# Headers applications include that no manifest lists.
EXTRA_HEADERS = ["Saver/QnnSaver.h"]

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _variant_headers(variant: str) -> list[str]:
    # HTP and LPAI both define struct _QnnDevice_DeviceInfoExtension_t: never together.
    other = "LPAI/" if variant == "htp" else "HTP/"
    return [h for h in HEADERS + EXTRA_HEADERS if not h.startswith(other)]


def _in_variant(header: str, variant: str) -> bool:
    return header.startswith("LPAI/") == (variant == "lpai")


def _facts(manifest: dict, variant: str) -> list[tuple[str, str, tuple]]:
    """(kind, name, expected values) of every fact of one variant of a manifest."""
    home = {n: h for h, names in manifest["headers"].items() for n in names}
    facts = []
    for name, s in manifest["structs"].items():
        if not _in_variant(s["header"], variant):
            continue
        facts.append(("S", name, (s["size"], s["align"])))
        for f in s["fields"]:
            if "name" in f:
                facts.append(("F", f"{name}.{f['name']}", (f["offset"], f["size"])))
    for e in manifest["enums"].values():
        if _in_variant(e["header"], variant):
            facts += [("E", k, (v,)) for k, v in e["values"].items()]
    facts += [("M", k, (v,)) for k, v in manifest["constants"].items() if _in_variant(home[k], variant)]
    facts += [("T", k, (v,)) for k, v in manifest["strings"].items() if _in_variant(home[k], variant)]
    return facts


def _changed_by_delta(variant: str) -> set[tuple[str, str]]:
    """The 2.43 facts that 2.50 changed or removed (DELTA-2.43-2.50.md)."""
    new = {(k, n): v for k, n, v in _facts(MANIFEST, variant)}
    return {(k, n) for k, n, v in _facts(MANIFEST_243, variant) if new.get((k, n)) != v}


def _fact_program(facts: list[tuple[str, str, tuple]], variant: str) -> str:
    """A C program printing the value of each fact."""
    lines = ["#include <stdio.h>", "#include <stddef.h>"]
    lines += [f'#include "{h}"' for h in _variant_headers(variant)]
    lines.append("int main(void) {")
    for kind, name, _ in facts:
        if kind == "S":
            lines.append(f'printf("S %s %zu %zu\\n", "{name}", sizeof({name}), _Alignof({name}));')
        elif kind == "F":
            struct, field = name.split(".")
            lines.append(f'printf("F %s %zu %zu\\n", "{name}", offsetof({struct}, {field}), '
                         f'sizeof((({struct} *)0)->{field}));')
        elif kind in ("E", "M"):
            lines.append(f'printf("{kind} %s %lld\\n", "{name}", (long long)({name}));')
        else:
            lines.append(f'printf("T %s %s\\n", "{name}", {name});')
    lines += ["return 0;", "}"]
    return "\n".join(lines)


def _check_facts(tmp_path, facts, variant: str, what: str) -> None:
    (tmp_path / "facts.c").write_text(_fact_program(facts, variant))
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
    assert not wrong, f"{len(wrong)} of {len(facts)} {what} facts differ: " + "; ".join(wrong[:10])


@pytest.mark.parametrize("variant", ["htp", "lpai"])
def test_every_abi_fact_holds(tmp_path, variant):
    _check_facts(tmp_path, _facts(MANIFEST, variant), variant, f"2.50 {variant}")


@pytest.mark.parametrize("variant", ["htp", "lpai"])
def test_unchanged_243_facts_hold(tmp_path, variant):
    changed = _changed_by_delta(variant)
    facts = [f for f in _facts(MANIFEST_243, variant) if (f[0], f[1]) not in changed]
    _check_facts(tmp_path, facts, variant, f"2.43 {variant} (unchanged by the delta)")


def test_fact_count_matches_manifest():
    for version, manifest, total in (("2.50", MANIFEST, 2815), ("2.43", MANIFEST_243, 2433)):
        n = len(_facts(manifest, "htp")) + len(_facts(manifest, "lpai"))
        assert n == total, f"{version}: htp + lpai facts ({n}) are the manifest's {total}"
    changed = len(_changed_by_delta("htp")) + len(_changed_by_delta("lpai"))
    # DELTA-2.43-2.50.md: 91 facts removed or renamed (the V2_32/V1_7 tables, the device config's
    # old offsets), 15 changed values (versions, sizes, QNN_PARAMTYPE_UNDEFINED, build id).
    assert changed == 106, f"the delta changes 106 of the 2.43 facts, not {changed}"


@pytest.mark.parametrize("header", HEADERS + EXTRA_HEADERS)
@pytest.mark.parametrize("std", ["c11", "c++17"])
def test_header_compiles_alone(tmp_path, header, std):
    cxx = std.startswith("c++")
    src = tmp_path / ("one.cpp" if cxx else "one.c")
    src.write_text(f'#include "{header}"\nint main(void) {{ return 0; }}\n')
    # -DQNN_API=...: the SDK's sample-app build passes it; the headers must not redefine it.
    cmd = ["g++" if cxx else "gcc", f"-std={std}", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
           "-DQNN_API=__attribute__((visibility(\"default\")))", "-DQNN_SYSTEM_API=",
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
