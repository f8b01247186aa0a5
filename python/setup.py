"""setup.py — builds libentropix.so with the repository's make (`make lib`) and ships it inside the
package (entropix/libentropix.so.0), so `pip install ./python` from a checkout gives a package that
needs nothing else of the checkout. ENTROPIX_ROOT (default: this file's parent folder) is the
checkout, ENTROPIX_BUILD (default: build) its build folder, ENTROPIX_MAKEFLAGS extra make flags
(e.g. "CUDA=0 -j4")."""
import os
import shlex
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithLibrary(build_py):
    def run(self):
        root = os.environ.get("ENTROPIX_ROOT") or os.path.dirname(HERE)
        if not os.path.exists(os.path.join(root, "include", "entropix.h")):
            raise SystemExit(f"entropix: {root} is not an entropix.c checkout (set ENTROPIX_ROOT)")
        build = os.environ.get("ENTROPIX_BUILD", "build")
        flags = shlex.split(os.environ.get("ENTROPIX_MAKEFLAGS", ""))
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        subprocess.check_call(["make", "-C", root, f"BUILD={build}", *flags, "lib"], env=env)
        super().run()
        lib = os.path.join(root, build, "lib", "libentropix.so.0.1.0")
        dest = os.path.join(self.build_lib, "entropix", "libentropix.so.0")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(lib, dest)


class BinaryDistribution(Distribution):
    """A wheel for this platform: it carries a shared library."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
