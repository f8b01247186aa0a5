"""entropix.Model given a GGUF: converted into gguf_cache once, then the same model as the file
`convert` writes from it (./run's text on that file, numpy's logits from ../shared/testdata);
a damaged GGUF and a cache folder that cannot be written raise with the GGUF's path."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import entropix
from conftest import RUN, SHARED, model_path

STORIES_GGUF = os.path.join(SHARED, "testdata/stories260K/stories260K.gguf")


@pytest.fixture
def gguf(tmp_path):
    """A copy of stories260K's F32 GGUF in the test's own folder."""
    path = tmp_path / "stories.gguf"
    shutil.copyfile(STORIES_GGUF, path)
    return path


def test_gguf_gives_runs_text_and_numpys_logits(gguf, tmp_path):
    cache = tmp_path / "cache"
    m = entropix.Model(gguf, threads=1, gguf_cache=cache)  # a path-like folder, created when missing
    names = os.listdir(cache)
    assert len(names) == 1 and names[0].endswith(".bin")
    text = m.generate("Once upon a time", ctx=128, sampler="greedy", max_tokens=40).text()
    want = subprocess.run([RUN, model_path("stories260K.gguf.f32.bin"), "--raw", "-p", "Once upon a time", "-n", "40",
                           "-t", "1", "-c", "128", "--sampler", "greedy"], capture_output=True, check=True).stdout.decode()
    assert "Once upon a time" + text + "\n" == want
    with open(os.path.join(SHARED, "testdata/stories260K/golden.json")) as f:
        prompts = json.load(f)["prompts"]
    s = m.state(ctx=64)
    for p in prompts:
        logits = s.forward(p["prompt_ids"]).logits
        assert np.max(np.abs(logits - np.array(p["step0_logits_numpy"]))) <= 1e-4
    s.close()
    m.close()
    # Opened again from the same cache: no second file.
    entropix.Model(str(gguf), threads=1, gguf_cache=str(cache)).close()
    assert os.listdir(cache) == names


def test_damaged_gguf_raises_naming_it(gguf, tmp_path):
    os.truncate(gguf, 4096)
    with pytest.raises(entropix.EntropixError, match=str(gguf)) as e:
        entropix.Model(gguf, gguf_cache=tmp_path / "cache")
    assert e.value.status == -2 and "\n" not in str(e.value)  # ENTROPIX_ERR_FILE, one line
    assert os.listdir(tmp_path / "cache") == []


def test_unwritable_cache_raises_naming_the_gguf(gguf, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    folder = "/proc" if os.geteuid() == 0 else str(ro)  # root ignores modes; nothing is created in /proc
    with pytest.raises(entropix.EntropixError, match="cannot write in the cache folder") as e:
        entropix.Model(gguf, gguf_cache=folder)
    assert str(gguf) in str(e.value) and "gguf_cache" in str(e.value)
    ro.chmod(0o755)
