"""Where the suite finds what it checks against: set by tests/test_api_python.c (or by hand).

ENTROPIX_TEST_MODELS  the converted test models (build/models)
ENTROPIX_TEST_RUN     ./run (build/cpu/run)
ENTROPIX_TEST_SHARED  ../shared (the reference data)
"""
import os
import subprocess
import sys

import pytest

MODELS = os.environ.get("ENTROPIX_TEST_MODELS", "build/models")
RUN = os.environ.get("ENTROPIX_TEST_RUN", "build/cpu/run")
SHARED = os.environ.get("ENTROPIX_TEST_SHARED", "../shared")


def model_path(name):
    path = os.path.join(MODELS, name)
    if not os.path.exists(path):
        pytest.fail(f"{path} missing: make test-models converts it")
    return os.path.abspath(path)


@pytest.fixture
def stories():
    import entropix
    return entropix.Model(model_path("stories260K.f32.bin"), threads=1)


@pytest.fixture
def qwen3():
    import entropix
    return entropix.Model(model_path("qwen3-tiny.f32.bin"), threads=1)


def run_python(code):
    """code run by this Python in a process of its own (a crash there fails one test, not the
    suite): its CompletedProcess, stdout and stderr as text."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
