"""The ABI entry framework both embedded libraries share (qnnemu/abi/framework.py) and the shared
C and build plumbing (csrc/abi_shim.h, csrc/build_abi.py, csrc/kernels.h).

- the bounded validation primitives: a NULL-terminated list is read up to its limit and refused
  without a terminator (never walked until the process faults) -- through the library for the
  lists that had no or another limit before (profileSetConfig, signalCreate) and at the limit;
- the one Qnn_DataType_t -> Qnn_Scalar_t table (fixed point from the member of its storage
  width), used by the backend's op parameters and the System library's profile events alike;
- the structure: one Library per embedded library, no component importing the table assembly,
  one shim body, kernels.h as the only copy of the kernels' prototypes.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import abi
import cffi
import pytest
from abi import NULL, ffi, vp

import qnnemu
from qnnemu.errors import QnnError
from qnnemu.headers import Q, cdef, interface_fields, system_interface_fields
from qnnemu.location import Location

ROOT = Path(qnnemu.__file__).resolve().parent.parent
ABI_DIR = ROOT / "qnnemu" / "abi"
CSRC = ROOT / "csrc"


@pytest.fixture
def session(qnn_abi):
    s = abi.Session()
    yield s
    s.close()


# ------------------------------------------------------------------ bounded list primitives
def _pure_ffi():
    f = cffi.FFI()
    f.cdef("typedef struct { int option; } Item;")
    return f


def test_null_terminated_reads_up_to_the_limit_and_refuses_beyond():
    from qnnemu.abi.framework import null_terminated
    f = _pure_ffi()
    items = [f.new("Item *") for _ in range(4)]
    loc = Location("someEntry").field("config")
    exactly = f.new("Item *[]", items[:3] + [f.NULL])
    assert len(null_terminated(exactly, 3, loc, 1234)) == 3, "3 entries and a terminator: all 3 read at limit 3"
    assert null_terminated(f.NULL, 3, loc, 1234) == [], "a NULL list has no entries"
    unterminated = f.new("Item *[]", items)          # 4 entries, no terminator within the limit
    with pytest.raises(QnnError) as e:
        null_terminated(unterminated, 3, loc, 1234)
    assert e.value.code == 1234 and e.value.rule == "QNNEMU-config-list-unterminated", \
        f"the refusal carries the given code and the list rule: {e.value.code} {e.value.rule}"
    assert "someEntry: config: no NULL terminator within 3 entries" in str(e.value), \
        f"the message names function, path and limit: {e.value}"


def test_require_pointer_and_enum_value():
    from qnnemu.abi.framework import enum_value, require_pointer
    loc = Location("graphValidate").field("validationResult")
    with pytest.raises(QnnError) as e:
        require_pointer(_pure_ffi().NULL, loc, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    assert (e.value.rule, e.value.code) == ("QNNEMU-arg-null", Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT), \
        f"a NULL pointer: QNNEMU-arg-null with the given code, got {e.value.rule} {e.value.code}"
    assert str(e.value).endswith("graphValidate: validationResult is NULL"), f"the NULL message form: {e.value}"
    name = enum_value(Q.QNN_SIGNAL_CONFIG_OPTION_ABORT, "QNN_SIGNAL_CONFIG_OPTION_", loc, 5, "QNNEMU-x")
    assert name == "QNN_SIGNAL_CONFIG_OPTION_ABORT", f"a defined enum value gives its name: {name}"
    with pytest.raises(QnnError) as e:
        enum_value(0x7654321, "QNN_SIGNAL_CONFIG_OPTION_", loc, 5, "QNNEMU-x")
    assert (e.value.rule, e.value.code) == ("QNNEMU-x", 5) and str(0x7654321) in str(e.value), \
        f"an undefined value is refused with the given rule, code and the value: {e.value}"


def _many(session, ctype: str, count: int, fill) -> object:
    """A ``const T **`` array of ``count`` non-NULL entries and no terminator."""
    item = session.own(ffi.new(f"{ctype} *"))
    fill(item)
    return session.own(ffi.new(f"{ctype} *[]", [item] * count))


def test_profile_config_list_is_bounded(session):
    """profileSetConfig walked its list without a limit before; now the config list limit."""
    from qnnemu.abi.framework import CONFIG_LIST_LIMIT
    out = session.own(ffi.new("Qnn_ProfileHandle_t *"))
    assert session.call("profileCreate", vp(session.be), Q.QNN_PROFILE_LEVEL_BASIC, out) == Q.QNN_SUCCESS, \
        "setup: profileCreate"
    prof = abi.hval(out[0])
    try:
        def fill(c):
            c.option = Q.QNN_PROFILE_CONFIG_OPTION_MAX_EVENTS
            c.numMaxEvents = 100
        session.rec.clear()
        code = session.call("profileSetConfig", vp(prof),
                            _many(session, "QnnProfile_Config_t", CONFIG_LIST_LIMIT + 1, fill))
        session.rec.assert_rule(code, Q.QNN_COMMON_ERROR_INVALID_ARGUMENT, "QNNEMU-config-list-unterminated",
                                "profileSetConfig", "config")
        at_limit = _many(session, "QnnProfile_Config_t", CONFIG_LIST_LIMIT + 1, fill)
        at_limit[CONFIG_LIST_LIMIT] = NULL
        assert session.call("profileSetConfig", vp(prof), at_limit) == Q.QNN_SUCCESS, \
            f"{CONFIG_LIST_LIMIT} configs and a terminator are accepted"
    finally:
        assert session.call("profileFree", vp(prof)) == Q.QNN_SUCCESS, "teardown: profileFree"


def test_signal_config_list_is_bounded_by_the_same_limit(session):
    """signalCreate read at most 1024 configs before; now the one config list limit."""
    from qnnemu.abi.framework import CONFIG_LIST_LIMIT

    def fill(c):
        c.option = Q.QNN_SIGNAL_CONFIG_OPTION_ABORT
    out = session.own(ffi.new("Qnn_SignalHandle_t *"))
    session.rec.clear()
    code = session.call("signalCreate", vp(session.be),
                        _many(session, "QnnSignal_Config_t", CONFIG_LIST_LIMIT + 1, fill), out)
    session.rec.assert_rule(code, Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT, "QNNEMU-signal-config-option",
                            "signalCreate", "config")
    configs = _many(session, "QnnSignal_Config_t", 2000, fill)   # more than the old limit of 1024
    configs[1999] = NULL
    assert session.call("signalCreate", vp(session.be), configs, out) == Q.QNN_SUCCESS, \
        "1999 ABORT configs and a terminator are accepted (within the config list limit)"
    assert session.call("signalFree", out[0]) == Q.QNN_SUCCESS, "teardown: signalFree"


# --------------------------------------------------------------------------- the scalar table
_UNION = cffi.FFI()
_UNION.cdef(cdef(("QnnTypes.h",), prototypes=False))


def test_scalar_table_reads_fixed_point_from_its_storage_member():
    """QnnTypes.h's Qnn_Scalar_t has no fixed-point members: a fixed-point scalar is read from the
    integer member of its storage width and signedness (the width its tensors are stored in)."""
    from qnnemu.abi.framework import SCALAR_MEMBERS
    from qnnemu.core import dtypes
    members = {name: field.type for name, field in _UNION.typeof("Qnn_Scalar_t").fields}  # the union's, flat
    for dtype, member in SCALAR_MEMBERS.items():
        name = dtypes.name(dtype)
        field_type = members[member]
        if "FIXED_POINT" in name:
            assert _UNION.sizeof(field_type) == dtypes.itemsize(dtype), \
                f"{name}: read from {member} ({_UNION.sizeof(field_type)} bytes), its storage is " \
                f"{dtypes.itemsize(dtype)} bytes"
            assert member.startswith("int") == name.startswith("QNN_DATATYPE_SFIXED"), \
                f"{name}: signed fixed point from a signed member and unsigned from unsigned, got {member}"
    assert SCALAR_MEMBERS[Q.QNN_DATATYPE_FLOAT_16] == "floatValue", "half scalars travel as floatValue"


def test_read_scalar_fixed_point_values():
    from qnnemu.abi.framework import read_scalar
    s = _UNION.new("Qnn_Scalar_t *")
    s.dataType = Q.QNN_DATATYPE_UFIXED_POINT_8
    s.uint32Value = 200          # a client that wrote the wider member: the low byte is the value
    assert read_scalar(s) == (Q.QNN_DATATYPE_UFIXED_POINT_8, 200), "UFIXED_POINT_8 written as uint32Value 200"
    s.dataType = Q.QNN_DATATYPE_SFIXED_POINT_16
    s.int16Value = -5
    assert read_scalar(s) == (Q.QNN_DATATYPE_SFIXED_POINT_16, -5), "SFIXED_POINT_16 from int16Value"
    s.dataType = Q.QNN_DATATYPE_SFIXED_POINT_8
    s.int32Value = -3
    assert read_scalar(s) == (Q.QNN_DATATYPE_SFIXED_POINT_8, -3), "SFIXED_POINT_8 written as int32Value -3"


def test_both_libraries_share_the_scalar_table_and_the_framework():
    from qnnemu.abi import framework, library, marshal, system_entry
    assert marshal.read_scalar is framework.read_scalar, "op parameters are read by the one scalar reader"
    assert system_entry.read_scalar is framework.read_scalar, "System profile events use the same reader"
    assert isinstance(library.LIBRARY, framework.Library) and isinstance(system_entry.LIBRARY, framework.Library), \
        "both libraries are framework.Library objects"
    assert set(interface_fields()) <= set(library.LIBRARY.entries), \
        f"every QnnInterface table slot is registered: missing {set(interface_fields()) - set(library.LIBRARY.entries)}"
    assert set(system_interface_fields()) <= set(system_entry.LIBRARY.entries), \
        "every System table slot is registered"
    for lib, fields in ((library.LIBRARY, interface_fields()), (system_entry.LIBRARY, system_interface_fields())):
        extra = sorted(set(lib.entries) - set(fields))
        assert extra == [], f"{lib.library}: only table fields are registered as slots (helpers are not): {extra}"


# ---------------------------------------------------------------------------------- structure
def _relative_imports(path: Path) -> set[str]:
    """Sibling module names ``path`` imports (``from . import x``, ``from .x import y``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out |= {node.module} if node.module else {a.name for a in node.names}
    return out


def test_no_component_imports_the_table_assembly():
    importers = sorted(p.name for p in ABI_DIR.glob("*.py") if p.name != "entry.py" and "entry" in _relative_imports(p))
    assert importers == [], f"qnnemu/abi modules importing entry.py back (a cycle): {importers}"
    components = _relative_imports(ABI_DIR / "entry.py")
    modules = {p.stem for p in ABI_DIR.glob("*_api.py")}
    assert modules <= components, f"entry.py assembles every *_api module: missing {sorted(modules - components)}"
    doc = (ABI_DIR / "__init__.py").read_text()
    missing = sorted(m for m in modules if f"``{m}``" not in doc)
    assert missing == [], f"qnnemu/abi/__init__.py maps every component module: missing {missing}"


def test_one_shim_body():
    for shim in ("shim.c", "system_shim.c"):
        text = (CSRC / shim).read_text()
        assert '#include "abi_shim.h"' in text, f"csrc/{shim} uses the shared shim body"
        assert "init_once" not in text and "getProviders" not in text.split("*/", 1)[1], \
            f"csrc/{shim} holds only what differs (no copy of the body)"


def test_kernel_headers_are_the_only_copy_of_the_prototypes():
    """kernels.h, engine.h and every eng_<family>.h declare exactly what their .c defines, and
    the module's cdef is read from them (no hand-copied prototypes)."""
    sys.path.insert(0, str(CSRC))
    try:
        import build_kernels
    finally:
        sys.path.remove(str(CSRC))
    assert [h.name for h in build_kernels.HEADERS[:2]] == ["kernels.h", "engine.h"], "the core headers first"
    for header_path in build_kernels.HEADERS:
        source_path = header_path.with_suffix(".c")
        source = source_path.read_text()
        cdef = build_kernels.kernels_cdef(header_path)
        assert f'#include "{header_path.name}"' in source, \
            f"{source_path.name} includes {header_path.name} (the compiler checks they agree)"
        declared = set(re.findall(r"\b(qe_\w+)\(", cdef))
        defined = set(re.findall(r"^(?:int|long|void) (qe_\w+)\(", source, re.M))
        assert declared == defined, f"{header_path.name} declares exactly the kernels {source_path.name} " \
                                    f"exports: only declared {sorted(declared - defined)}, only defined " \
                                    f"{sorted(defined - declared)}"
        assert cdef.strip() in build_kernels.CDEF, f"build_kernels.py reads its cdef from {header_path.name}"
    assert "qe_sgemm(" not in (CSRC / "build_kernels.py").read_text(), "no hand-copied prototype in build_kernels.py"
