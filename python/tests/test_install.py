"""`pip install ./python` as a user runs it: make builds the library, the package ships it, and the
installed package (in a folder of its own) loads that copy and generates llama2.c's text."""
import json
import os
import subprocess
import sys

from conftest import SHARED, model_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pip_install_ships_the_library(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("ENTROPIX_LIBRARY", "PYTHONPATH", "MAKEFLAGS", "MFLAGS",
                                                             "MAKELEVEL")}
    # The library of the build the suite runs in: make's CUDA=0 or 1 of that folder (backend.cfg), not
    # the default, which would build the CUDA backend into a CPU-only build's library where nvcc is.
    cfg = os.path.join(ROOT, os.environ.get("ENTROPIX_BUILD", "build"), "backend.cfg")
    if os.path.exists(cfg) and "ENTROPIX_MAKEFLAGS" not in env:
        with open(cfg) as f:
            env["ENTROPIX_MAKEFLAGS"] = f.read().strip()
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--target",
                    str(target), os.path.join(ROOT, "python")], check=True, env=env, cwd=tmp_path)
    assert (target / "entropix" / "libentropix.so.0").is_file()
    with open(os.path.join(SHARED, "testdata/stories260K/golden.json")) as f:
        want = json.load(f)["prompts"][0]["runc_stdout"]
    code = ("import entropix, entropix._lib as L, sys; print(L.lib._name, file=sys.stderr); "
            f"m = entropix.Model({model_path('stories260K.f32.bin')!r}, threads=1); "
            "print('Zoo' + m.generate('Zoo', max_tokens=100).text(), end='')")
    out = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(target)}, cwd=tmp_path,
                         capture_output=True, check=True)
    assert out.stderr.decode().strip() == str(target / "entropix" / "libentropix.so.0")
    assert out.stdout.decode() == want
