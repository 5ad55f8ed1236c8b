"""Build of qnnemu: the embedded backend library and the C kernels (both from csrc/).

- ``qnnemu/lib/libQnnHtpEmu.so``: csrc/build_backend.py (cffi embedding); built as an
  Extension whose file name is forced, so editable and regular installs both produce it.
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


class BuildExt(build_ext):
    def get_ext_filename(self, fullname):
        # distutils asks with the dotted name or with its last part only (get_ext_fullpath).
        if fullname == BACKEND_EXT:
            return os.path.join("qnnemu", "lib", "libQnnHtpEmu.so")
        if fullname == BACKEND_EXT.rsplit(".", 1)[1]:
            return "libQnnHtpEmu.so"
        return super().get_ext_filename(fullname)

    def build_extension(self, ext):
        if ext.name == BACKEND_EXT:
            sys.path.insert(0, str(ROOT / "csrc"))
            from build_backend import make_ffi

            gen_dir = Path(self.build_temp) / "qnnemu-backend"
            ffi, kwargs = make_ffi(gen_dir)
            c_file = gen_dir / "_qnnemu_htp_abi.c"
            ffi.emit_c_code(str(c_file))
            # setuptools refuses absolute source paths.
            ext.sources = [os.path.relpath(p, ROOT) for p in [str(c_file)] + kwargs["sources"]]
            ext.include_dirs = kwargs["include_dirs"]
            ext.extra_compile_args = kwargs["extra_compile_args"]
            ext.extra_link_args = kwargs["extra_link_args"]
            ext.libraries = kwargs["libraries"] + [
                f"python{sys.version_info.major}.{sys.version_info.minor}{sys.abiflags}"]
        super().build_extension(ext)


class BuildPy(build_py):
    def run(self):
        super().run()
        dest = Path(self.build_lib) / "qnnemu" / "include" / "QNN"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(ROOT / "include" / "QNN", dest)


setup(
    ext_modules=[Extension(BACKEND_EXT, sources=["csrc/shim.c"])],
    cffi_modules=["csrc/build_kernels.py:ffibuilder"],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
