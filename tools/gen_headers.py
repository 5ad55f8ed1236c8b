"""Writes include/QNN/ from the ABI facts in tests/data/qnn-abi-2.50.json.

The QNN headers are facts (names, layouts, values), so we emit them from the manifest rather
than typing 41 files by hand; the prose in them is ours.  Run after editing the manifest copy:

    python tools/gen_headers.py [--check] [--manifest PATH] [--out DIR]

--check exits non-zero when the headers in the output directory differ from what would be
generated.  --manifest / --out write another ABI's headers elsewhere, e.g. the QNN 2.43 layout
for clients of older SDKs (tests/test_abi_compat.py):

    python tools/gen_headers.py --manifest tests/data/qnn-abi-2.43.json --out /tmp/qnn243/QNN
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "data" / "qnn-abi-2.50.json"
OUT = ROOT / "include" / "QNN"

# One line of our own describing each header.
PURPOSE = {
    "QnnCommon.h": "Handles, error-code layout, API version numbers and the common error codes.",
    "QnnTypes.h": "Data types, tensors, quantization encodings, op configs and parameters.",
    "QnnBackend.h": "Backend component: lifetime, configuration, op packages, supported ops.",
    "QnnContext.h": "Context component: creation, binaries, binary sections, async loading.",
    "QnnDevice.h": "Device component: platform/hardware info and device infrastructure.",
    "QnnError.h": "Error component: messages for error handles.",
    "QnnGlobalConfig.h": "Process-wide configuration.",
    "QnnGraph.h": "Graph component: creation, nodes, finalize and execute.",
    "QnnInterface.h": "The provider table an application obtains with QnnInterface_getProviders.",
    "QnnLog.h": "Log component: application callbacks and levels.",
    "QnnMem.h": "Memory registration of application buffers (ion / dma-buf / custom).",
    "QnnOpDef.h": "Op type names and parameter names of the QNN op definitions.",
    "QnnOpPackage.h": "Op package interface implemented by op libraries.",
    "QnnProfile.h": "Profiling component: levels, events and their data.",
    "QnnProperty.h": "Capability keys answered by QnnProperty_hasCapability.",
    "QnnSdkBuildId.h": "Build identifier of the SDK these facts come from.",
    "QnnSignal.h": "Signals that abort or time out long-running calls.",
    "QnnTensor.h": "Tensor creation and updates.",
    "HTP/QnnHtpCommon.h": "HTP backend id, provider name and backend API version.",
    "HTP/QnnHtpContext.h": "HTP custom context configurations and properties.",
    "HTP/QnnHtpDevice.h": "HTP device-info extension and the device infrastructure (perf votes).",
    "HTP/QnnHtpDeviceConfigShared.h": "HTP custom device configurations (SoC, arch, PD, async, partitioning).",
    "HTP/QnnHtpGraph.h": "HTP custom graph configurations (optimization, precision, VTCM, ...).",
    "HTP/QnnHtpMem.h": "HTP shared-memory descriptors.",
    "HTP/QnnHtpPerfInfrastructure.h": "HTP power/performance votes (DCVS, HMX, RPC, memory).",
    "HTP/QnnHtpProfile.h": "HTP profiling event types and levels.",
    "HTP/QnnHtpProperty.h": "HTP-specific capability keys.",
    "HTP/QnnHtpSystemContext.h": "HTP graph blob information reported by the System library.",
    "LPAI/QnnLpaiBackend.h": "LPAI backend custom configurations.",
    "LPAI/QnnLpaiCommon.h": "LPAI backend id, provider name and backend API version.",
    "LPAI/QnnLpaiContext.h": "LPAI custom context configurations.",
    "LPAI/QnnLpaiDevice.h": "LPAI device-info extension.",
    "LPAI/QnnLpaiGraph.h": "LPAI custom graph configurations and properties.",
    "LPAI/QnnLpaiMem.h": "LPAI memory descriptors.",
    "LPAI/QnnLpaiTypes.h": "LPAI common types.",
    "System/QnnSystemCommon.h": "System library handles, versions and common error codes.",
    "System/QnnSystemContext.h": "System library: context binary inspection.",
    "System/QnnSystemDlc.h": "System library: DLC file handling.",
    "System/QnnSystemInterface.h": "The System library provider table.",
    "System/QnnSystemLog.h": "System library logging.",
    "System/QnnSystemProfile.h": "System library profile serialization.",
    "System/QnnSystemTensor.h": "System library tensor helpers.",
}

# Backend-specific definitions of structs that the core headers only forward-declare.
STRUCT_TAGS = {
    "QnnHtpDevice_DeviceInfoExtension_t": "_QnnDevice_DeviceInfoExtension_t",
    "QnnLpaiDevice_DeviceInfoExtension_t": "_QnnDevice_DeviceInfoExtension_t",
    "QnnHtpDevice_Infrastructure_t": "_QnnDevice_Infrastructure_t",
}

# Macros the manifest does not place in a header's list: where we put them.
MACRO_HOME = {
    "QNN_API": "QnnCommon.h",
    "QNN_GET_ERROR_CODE": "QnnCommon.h",
    "QNN_PASTE_THREE": "QnnCommon.h",
    "QNN_SYSTEM_API": "System/QnnSystemCommon.h",
    "QNN_LPAI_CORE_AFFINITY": "LPAI/QnnLpaiGraph.h",
}


# Headers that the vendor's headers include although none of their declarations needs them;
# applications rely on getting these declarations through QnnInterface.h.
EXTRA_INCLUDES = {
    "QnnInterface.h": ["QnnOpDef.h", "QnnOpPackage.h", "QnnTensor.h"],
}

# Structs the manifests' conventions leave out: typedef'd as incomplete types and completed by a
# separately tagged definition (facts from DELTA-2.43-2.50.md, "Facts outside the manifests'
# conventions"; QnnSystemProfile_ProfileEventV1_t: 80 bytes in 2.43, fields from public code).
TAGGED_STRUCTS = {
    "QnnTypes.h": ("Qnn_ArrayOf_t", [
        ("Qnn_QuantizationEncoding_t", "quantizationEncoding"),
        ("uint32_t", "numElements"),
        ("Qnn_Tensor_t *", "indexTensor"),
        ("Qnn_QuantizeParams_t **", "vectorElements"),
    ]),
    "System/QnnSystemProfile.h": ("QnnSystemProfile_ProfileEventV1_t", [
        ("QnnSystemProfile_EventDataType_t", "type"),
        ("union", [("QnnProfile_EventData_t", "eventData"),
                   ("QnnProfile_ExtendedEventData_t", "extendedEventData")]),
        ("QnnSystemProfile_ProfileEventV1_t *", "profileSubEventData"),
        ("uint32_t", "numSubEvents"),
    ]),
}

def macro_home(name: str) -> str:
    if name in MACRO_HOME:
        return MACRO_HOME[name]
    if name.startswith("QNN_SYSTEM_INTERFACE"):
        return "System/QnnSystemInterface.h"
    if name.startswith("QNN_INTERFACE"):
        return "QnnInterface.h"
    raise KeyError(name)


IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def c_int(value: int) -> str:
    if value < 0:
        return f"({value})"
    if value > 0x7FFFFFFF:
        return f"0x{value:X}u" if value <= 0xFFFFFFFF else f"0x{value:X}ull"
    return str(value)


def c_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Generator:
    def __init__(self, manifest: dict):
        self.m = manifest
        self.home: dict[str, str] = {}
        for header, names in manifest["headers"].items():
            for name in names:
                self.home.setdefault(name, header)
        for section in ("structs", "enums", "function_pointer_types", "functions", "typedefs"):
            for name, entry in manifest[section].items():
                self.home.setdefault(name, entry["header"])
        for key in manifest["macros"]:
            name = key.split("(")[0]
            if name not in self.home:
                self.home[name] = macro_home(name)
        names = [*manifest["constants"], *manifest["strings"], *manifest["initializers"]]
        missing = [n for n in names if n not in self.home]
        if missing:
            raise KeyError(f"in no header's list: {missing[:5]}")
        self.struct_tag = {}
        self.typedef_skip = set()
        for name, td in manifest["typedefs"].items():
            mt = re.fullmatch(r"typedef struct (\w+) (\w+)", td["decl"])
            if mt and mt.group(2) in manifest["structs"]:
                self.struct_tag[mt.group(2)] = mt.group(1)
                self.typedef_skip.add(name)
        for name in manifest["structs"]:
            self.struct_tag.setdefault(name, STRUCT_TAGS.get(name, "_" + name))

    # -- dependencies -------------------------------------------------------------------
    def refs(self, text: str) -> set[str]:
        return {t for t in IDENT.findall(text) if t in self.home}

    def header_deps(self, header: str, names: list[str]) -> list[str]:
        deps = set()
        for name in names:
            for ref in self.refs(self.text_of(name)):
                if self.home[ref] != header:
                    deps.add(self.home[ref])
        # Backend extension structs reuse the core tag; they need the core header.
        return sorted(deps)

    def text_of(self, name: str) -> str:
        m = self.m
        if name in m["structs"]:
            return " ".join(f.get("type", "") for f in m["structs"][name]["fields"])
        for section in ("function_pointer_types", "functions", "typedefs"):
            if name in m[section]:
                return m[section][name]["decl"]
        if name in m["initializers"]:
            return m["initializers"][name]
        for key, text in m["macros"].items():
            if key.split("(")[0] == name:
                return text
        return ""

    # -- emitters -----------------------------------------------------------------------
    def struct_body(self, name: str) -> list[str]:
        fields = self.m["structs"][name]["fields"]
        lines: list[str] = []
        i = 0
        while i < len(fields):
            f = fields[i]
            if f.get("anonymous") == "union":
                start = fields[i + 1]["offset"]
                lines.append("  union {")
                i += 1
                while i < len(fields) and "name" in fields[i] and fields[i]["offset"] == start:
                    lines.append("    " + self.field_decl(fields[i]) + ";")
                    i += 1
                lines.append("  };")
                continue
            lines.append("  " + self.field_decl(f) + ";")
            i += 1
        return lines

    @staticmethod
    def field_decl(f: dict) -> str:
        ctype, name = f["type"], f["name"]
        arr = re.fullmatch(r"(.*?)\s*(\[\d+\])", ctype)
        if arr:
            return f"{arr.group(1)} {name}{arr.group(2)}"
        if ctype.endswith("*"):
            return f"{ctype}{name}"
        return f"{ctype} {name}"

    def order_structs(self, names: list[str]) -> list[str]:
        """Topological order by by-value members (pointers need only the forward typedef)."""
        local = set(names)
        deps = {}
        for n in names:
            d = set()
            for f in self.m["structs"][n]["fields"]:
                t = f.get("type", "")
                if "*" in t:
                    continue
                d |= {r for r in IDENT.findall(t) if r in local and r != n}
            deps[n] = d
        done: list[str] = []
        seen: set[str] = set()

        def visit(n: str) -> None:
            if n in seen:
                return
            seen.add(n)
            for d in sorted(deps[n]):
                visit(d)
            done.append(n)

        for n in names:
            visit(n)
        return done

    def header(self, header: str) -> str:
        m = self.m
        guard = "QNNEMU_" + re.sub(r"\W", "_", header).upper()
        consts = [n for n in m["constants"] if self.home[n] == header]
        strings = [n for n in m["strings"] if self.home[n] == header]
        inits = [n for n in m["initializers"] if self.home[n] == header]
        macros = [k for k in m["macros"] if self.home[k.split("(")[0]] == header]
        typedefs = [n for n in m["typedefs"] if self.home[n] == header and n not in self.typedef_skip]
        enums = [n for n in m["enums"] if self.home[n] == header]
        structs = [n for n in m["structs"] if self.home[n] == header]
        fnptrs = [n for n in m["function_pointer_types"] if self.home[n] == header]
        funcs = [n for n in m["functions"] if self.home[n] == header]
        deps = self.header_deps(header, consts + strings + inits + typedefs + structs + fnptrs + funcs
                                + [k.split("(")[0] for k in macros])
        if any(n in STRUCT_TAGS for n in structs) and "QnnDevice.h" not in deps:
            deps.append("QnnDevice.h")
        out = [
            f"/* qnnemu: {PURPOSE[header]}",
            f" * ABI-compatible with the QNN C API ({self.version_text()}); written from layout facts for qnnemu. */",
            f"#ifndef {guard}",
            f"#define {guard}",
            "",
            "#include <stddef.h>",
            "#include <stdint.h>",
        ]
        if "va_list" in " ".join(self.text_of(n) for n in fnptrs + funcs):
            out.append("#include <stdarg.h>")
        out.append("#ifndef __cplusplus")
        out.append("#include <stdbool.h>")
        out.append("#endif")
        for d in sorted(set(deps) | set(EXTRA_INCLUDES.get(header, ()))):
            out.append(f'#include "{self.rel_include(header, d)}"')
        out += ["", "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
        if consts or strings or macros:
            out.append("/* Constants. */")
            for n in consts:
                out.append(f"#define {n} {c_int(m['constants'][n])}")
            for n in strings:
                out.append(f"#define {n} {c_string(m['strings'][n])}")
            for k in self.order_macros(macros):
                body = m["macros"][k]
                if body:
                    out.append(f"#define {k} {body}")
                else:
                    # Marker macros (QNN_API, ...): build systems define them on the command line
                    # (-DQNN_API=...), so only define them when nobody did.
                    out += [f"#ifndef {k}", f"#define {k}", "#endif"]
            out.append("")
        if typedefs:
            out.append("/* Handles and scalar aliases. */")
            for n in self.order_typedefs(typedefs):
                out.append(m["typedefs"][n]["decl"] + ";")
            out.append("")
        for n in enums:
            values = sorted(m["enums"][n]["values"].items(), key=lambda kv: (kv[1], kv[0]))
            out.append("typedef enum {")
            out += [f"  {k} = {c_int(v)}," for k, v in values]
            out[-1] = out[-1].rstrip(",")
            out.append(f"}} {n};")
            out.append("")
        if structs:
            out.append("/* Structures, declared first so that pointers to them can be used anywhere. */")
            for n in structs:
                out.append(f"typedef struct {self.struct_tag[n]} {n};")
            out.append("")
        if fnptrs:
            out.append("/* Function pointer types. */")
            for n in fnptrs:
                out.append(f"typedef {m['function_pointer_types'][n]['decl']};")
            out.append("")
        for n in self.order_structs(structs):
            out.append(f"struct {self.struct_tag[n]} {{")
            out += self.struct_body(n)
            out.append("};")
            out.append("")
        if header in TAGGED_STRUCTS and TAGGED_STRUCTS[header][0] in m["typedefs"]:
            tag, fields = TAGGED_STRUCTS[header]
            out.append(f"struct {tag} {{")
            for t, f in fields:
                if t == "union":
                    out += ["  union {"] + [f"    {self.field_decl({'type': ut, 'name': uf})};"
                                            for ut, uf in f] + ["  };"]
                else:
                    out.append(f"  {self.field_decl({'type': t, 'name': f})};")
            out.append("};")
            out.append("")
        if inits:
            out.append("/* Initializers. */")
            for n in inits:
                out.append(f"#define {n} {m['initializers'][n]}")
            out.append("")
        if funcs:
            out.append("/* Entry points. */")
            for n in funcs:
                out.append(f"{m['functions'][n]['decl']};")
            out.append("")
        out += ["#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard} */", ""]
        return "\n".join(out)

    def version_text(self) -> str:
        """'core 2.39, QAIRT 2.50': the manifest's core API version and SDK release."""
        c, build = self.m["initializers"], self.m["strings"]["QNN_SDK_BUILD_ID"]
        release = ".".join(build.lstrip("v").split(".")[:2])
        return f"core {c['QNN_API_VERSION_MAJOR']}.{c['QNN_API_VERSION_MINOR']}, QAIRT {release}"

    def order_typedefs(self, names: list[str]) -> list[str]:
        local = set(names)
        done: list[str] = []

        def visit(n: str) -> None:
            if n in done:
                return
            for r in IDENT.findall(self.m["typedefs"][n]["decl"]):
                if r in local and r != n:
                    visit(r)
            done.append(n)

        for n in names:
            visit(n)
        return done

    @staticmethod
    def order_macros(keys: list[str]) -> list[str]:
        return sorted(keys, key=lambda k: k.split("(")[0])

    @staticmethod
    def rel_include(src: str, dst: str) -> str:
        # Headers include each other relative to include/QNN, like the SDK's own layout:
        # a sub-folder header reaches a top-level one with "../".
        if "/" in src and "/" not in dst:
            return "../" + dst
        if "/" in src and "/" in dst and src.split("/")[0] == dst.split("/")[0]:
            return dst.split("/", 1)[1]
        if "/" in src:
            return "../" + dst
        return dst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the QNN headers from an ABI manifest.")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when the headers in --out differ from what would be written")
    ap.add_argument("--manifest", type=Path, default=MANIFEST, help=f"ABI facts (default {MANIFEST})")
    ap.add_argument("--out", type=Path, default=OUT, help=f"the QNN include directory (default {OUT})")
    args = ap.parse_args(argv)
    manifest = json.loads(args.manifest.read_text())
    gen = Generator(manifest)
    differ = []
    for header in manifest["headers"]:
        text = gen.header(header)
        path = args.out / header
        if args.check:
            if not path.exists() or path.read_text() != text:
                differ.append(header)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if args.check and differ:
        print("headers out of date: " + ", ".join(differ))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
