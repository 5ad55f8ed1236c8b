"""Build of qnnemu: the embedded backend library and the C kernels (both from csrc/).

- ``qnnemu/lib/libQnnHtpEmu.so``: csrc/build_backend.py (cffi embedding); built as an
  Extension whose file name is forced, so editable and regular installs both produce it.
- ``qnnemu/lib/libcdsprpc.so``: csrc/rpcmem.c, the FastRPC shared-memory API (rpcmem_alloc,
  rpcmem_to_fd...) on memfds; built first, because the backend links against it (DT_NEEDED,
  RUNPATH $ORIGIN).
- ``qnnemu/lib/libQnnSystem.so``: csrc/build_system.py (cffi embedding), the QNN System
  library (profile serialization, System logging) next to the backend, where clients look.
- ``qnnemu._kernels``: csrc/build_kernels.py (cffi API mode), via ``cffi_modules``.
- Regular installs also carry the QNN headers inside the package (``qnnemu/include/QNN``).
"""
import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BACKEND_EXT = "qnnemu.lib.libQnnHtpEmu"
RPCMEM_EXT = "qnnemu.lib.libcdsprpc"
# Plain shared libraries built as Extensions: their file names are forced.
LIBRARY_EXTS = {BACKEND_EXT: "libQnnHtpEmu.so", RPCMEM_EXT: "libcdsprpc.so"}
SYSTEM_EXT = "qnnemu.lib.libQnnSystem"
LIBRARY_EXTS[SYSTEM_EXT] = "libQnnSystem.so"


class BuildExt(build_ext):
    def get_ext_filename(self, fullname):
        # distutils asks with the dotted name or with its last part only (get_ext_fullpath).
        for dotted, filename in LIBRARY_EXTS.items():
            if fullname == dotted:
                return os.path.join("qnnemu", "lib", filename)
            if fullname == dotted.rsplit(".", 1)[1]:
                return filename
        return super().get_ext_filename(fullname)

    def build_extension(self, ext):
        if ext.name in LIBRARY_EXTS:
            sys.path.insert(0, str(ROOT / "csrc"))
        if ext.name == RPCMEM_EXT:
            from build_backend import RPCMEM_COMPILE_ARGS, RPCMEM_LINK_ARGS, RPCMEM_SOURCES

            ext.sources = [os.path.relpath(p, ROOT) for p in RPCMEM_SOURCES]
            ext.extra_compile_args = RPCMEM_COMPILE_ARGS
            ext.extra_link_args = RPCMEM_LINK_ARGS
        if ext.name == BACKEND_EXT:
            from build_backend import make_ffi

            gen_dir = Path(self.build_temp) / "qnnemu-backend"
            rpcmem_dir = Path(self.get_ext_fullpath(RPCMEM_EXT)).parent
            ffi, kwargs = make_ffi(gen_dir, rpcmem_dir)
            c_file = gen_dir / "_qnnemu_htp_abi.c"
            ffi.emit_c_code(str(c_file))
            # setuptools refuses absolute source paths.
            ext.sources = [os.path.relpath(p, ROOT) for p in [str(c_file)] + kwargs["sources"]]
            ext.include_dirs = kwargs["include_dirs"]
            ext.extra_compile_args = kwargs["extra_compile_args"]
            ext.extra_link_args = kwargs["extra_link_args"]
            ext.libraries = kwargs["libraries"] + [
                f"python{sys.version_info.major}.{sys.version_info.minor}{sys.abiflags}"]
        if ext.name == SYSTEM_EXT:
            from build_system import make_ffi as make_system_ffi, python_library

            gen_dir = Path(self.build_temp) / "qnnemu-system"
            ffi, kwargs = make_system_ffi(gen_dir)
            c_file = gen_dir / "_qnnemu_system_abi.c"
            ffi.emit_c_code(str(c_file))
            ext.sources = [os.path.relpath(p, ROOT) for p in [str(c_file)] + kwargs["sources"]]
            ext.include_dirs = kwargs["include_dirs"]
            ext.extra_compile_args = kwargs["extra_compile_args"]
            ext.extra_link_args = kwargs["extra_link_args"]
            ext.libraries = kwargs["libraries"] + [python_library()]
        super().build_extension(ext)


class BuildPy(build_py):
    def run(self):
        super().run()
        dest = Path(self.build_lib) / "qnnemu" / "include" / "QNN"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(ROOT / "include" / "QNN", dest)


setup(
    # Order matters: the backend links against libcdsprpc.so.
    ext_modules=[Extension(RPCMEM_EXT, sources=["csrc/rpcmem.c"]),
                 Extension(BACKEND_EXT, sources=["csrc/shim.c"]),
                 Extension(SYSTEM_EXT, sources=["csrc/system_shim.c"])],
    cffi_modules=["csrc/build_kernels.py:ffibuilder"],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
