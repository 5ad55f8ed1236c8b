"""Build of qnnemu: the backend and System libraries and the C kernels (all from csrc/).

In qnnemu/lib (plain shared objects built as Extensions whose file names are forced, so editable
and regular installs both produce them):
- ``libQnnHtpEmu.so``, ``libQnnLpaiEmu.so`` and ``libQnnSystem.so``: the loaders (csrc/loader.c), plain C exporting
  the QNN entry points; they find the interpreter from their own location and load (the LPAI
  loader asks the backend's module for its second provider, qnnemu_lpai_providers)
- ``_qnnemu_htp_abi.so`` and ``_qnnemu_system_abi.so``: the cffi embedding modules holding the
  tables (csrc/build_backend.py, csrc/build_system.py);
- ``libcdsprpc.so``: csrc/rpcmem.c, the FastRPC shared-memory API (rpcmem_alloc, rpcmem_to_fd...)
  on memfds, loaded by the backend's loader on demand (no DT_NEEDED).
``qnnemu._kernels``: csrc/build_kernels.py (cffi API mode), via ``cffi_modules``.
Regular installs also carry the QNN headers inside the package (``qnnemu/include/QNN``).

Relocatable by construction: nothing about the build machine ends up in a built file -- no
RUNPATH (the interpreter's LDSHARED may carry an -rpath: it is dropped), no debug info (it
names directories), source paths relative to the tree.  Only an in-tree build
(``build_ext --inplace``, which editable installs use) records its interpreter, in
``qnnemu/lib/inplace-python.txt`` beside the libraries of the clone: that file is never part of
a wheel or an sdist (MANIFEST.in).
"""
import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
LIB_PACKAGE = "qnnemu.lib"
# Extension name -> file name in qnnemu/lib.
LIBRARY_EXTS = {
    "qnnemu.lib.libcdsprpc": "libcdsprpc.so",
    "qnnemu.lib._qnnemu_htp_abi": "_qnnemu_htp_abi.so",
    "qnnemu.lib.libQnnHtpEmu": "libQnnHtpEmu.so",
    "qnnemu.lib._qnnemu_system_abi": "_qnnemu_system_abi.so",
    "qnnemu.lib.libQnnSystem": "libQnnSystem.so",
    "qnnemu.lib.libQnnLpaiEmu": "libQnnLpaiEmu.so",
}
# Their hand-written sources (the generated ones are added at build time).
LIBRARY_SOURCES = {
    "qnnemu.lib.libcdsprpc": ["csrc/rpcmem.c"],
    "qnnemu.lib._qnnemu_htp_abi": ["csrc/shim.c"],
    "qnnemu.lib.libQnnHtpEmu": ["csrc/loader.c"],
    "qnnemu.lib._qnnemu_system_abi": ["csrc/system_shim.c"],
    "qnnemu.lib.libQnnSystem": ["csrc/loader.c"],
    "qnnemu.lib.libQnnLpaiEmu": ["csrc/loader.c"],
}
INPLACE_PYTHON_FILE = "inplace-python.txt"  # csrc/embed_python.h reads it


def _without_rpath(command: list[str]) -> list[str]:
    """A link command without -rpath options (pyenv's LDSHARED bakes its prefix into every
    extension otherwise)."""
    out = []
    for arg in command:
        if arg.startswith(("-Wl,-rpath,", "-Wl,-rpath=", "-Wl,-R")):
            continue
        out.append(arg)
    return out


class BuildExt(build_ext):
    def get_ext_filename(self, fullname):
        # distutils asks with the dotted name or with its last part only (get_ext_fullpath).
        for dotted, filename in LIBRARY_EXTS.items():
            if fullname == dotted:
                return os.path.join("qnnemu", "lib", filename)
            if fullname == dotted.rsplit(".", 1)[1]:
                return filename
        return super().get_ext_filename(fullname)

    def build_extensions(self):
        self.compiler.linker_so = _without_rpath(self.compiler.linker_so)
        super().build_extensions()

    def _configure(self, ext, kwargs):
        # setuptools refuses absolute source paths.
        ext.sources = [os.path.relpath(p, ROOT) for p in kwargs["sources"]]
        for key in ("include_dirs", "define_macros", "extra_compile_args", "extra_link_args",
                    "libraries", "depends"):
            if key in kwargs:
                setattr(ext, key, list(kwargs[key]))

    def build_extension(self, ext):
        sys.path.insert(0, str(ROOT / "csrc"))
        import build_backend
        import build_system

        gen_dir = Path(self.build_temp) / "qnnemu-gen"
        name = LIBRARY_EXTS.get(ext.name)
        if name == "libcdsprpc.so":
            self._configure(ext, dict(sources=build_backend.RPCMEM_SOURCES,
                                      extra_compile_args=build_backend.RPCMEM_COMPILE_ARGS
                                      + build_backend.portable_compile_args(),
                                      extra_link_args=build_backend.RPCMEM_LINK_ARGS))
        elif name in ("_qnnemu_htp_abi.so", "_qnnemu_system_abi.so"):
            builder = build_backend if name == "_qnnemu_htp_abi.so" else build_system
            ffi, kwargs = builder.make_ffi(gen_dir)
            c_file = gen_dir / f"{builder.MODULE_NAME}.c"
            ffi.emit_c_code(str(c_file))  # rewritten only when its text changes
            kwargs = dict(kwargs, sources=[str(c_file)] + kwargs["sources"])
            self._configure(ext, kwargs)
        elif name in ("libQnnHtpEmu.so", "libQnnSystem.so", "libQnnLpaiEmu.so"):
            self._configure(ext, build_backend.loader_kwargs(gen_dir, system=name == "libQnnSystem.so",
                                                             lpai=name == "libQnnLpaiEmu.so"))
        else:  # qnnemu._kernels (cffi_modules): only the portable flags
            ext.extra_compile_args = list(ext.extra_compile_args) + build_backend.portable_compile_args()
        # The flags live in these scripts: a change to them relinks, as a source change does.
        ext.depends = list(ext.depends) + [os.path.relpath(p, ROOT) for p in (
            ROOT / "setup.py", ROOT / "csrc" / "build_abi.py", ROOT / "csrc" / "build_backend.py",
            ROOT / "csrc" / "build_system.py")]
        super().build_extension(ext)

    def run(self):
        super().run()
        record = ROOT / "qnnemu" / "lib" / INPLACE_PYTHON_FILE
        if self.inplace:
            # The interpreter of this in-tree build, for C applications loading the libraries from
            # the clone (sys.executable as run: a venv's python keeps its venv).
            record.write_text(sys.executable + "\n")


class BuildPy(build_py):
    def run(self):
        super().run()
        dest = Path(self.build_lib) / "qnnemu" / "include" / "QNN"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(ROOT / "include" / "QNN", dest)


setup(
    ext_modules=[Extension(name, sources=LIBRARY_SOURCES[name]) for name in LIBRARY_EXTS],
    cffi_modules=["csrc/build_kernels.py:ffibuilder"],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
