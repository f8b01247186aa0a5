"""The examples of python/examples/ run as a reader would run them, on the test models."""
import os
import subprocess
import sys

from conftest import model_path

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def run_example(name, *args):
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, f"{name}: {p.stderr}"
    return p.stdout


def test_plot_entropy_writes_a_png(tmp_path):
    out = tmp_path / "entropy.png"
    text = run_example("plot_entropy.py", model_path("stories260K.f32.bin"), str(out))
    assert text.startswith("64 tokens, cases "), text
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000  # two panels of 64 points, not an empty canvas


def test_plot_entropy_leaves_out_the_held_back_bytes(tmp_path):
    """qwen3-tiny's 64th token for this prompt is part of a UTF-8 character: the generation ends
    with a record of the held-back bytes (id -1, no metrics), which has no point to plot."""
    import entropix
    with entropix.Model(model_path("qwen3-tiny.f32.bin"), threads=1) as model:
        records = list(model.generate("In the morning and", sampler="entropix", seed=7, max_tokens=64))
    assert len(records) == 65 and records[-1].id == -1 and records[-1].metrics is None
    out = tmp_path / "entropy.png"
    text = run_example("plot_entropy.py", model_path("qwen3-tiny.f32.bin"), str(out), "In the morning and")
    assert text.startswith("64 tokens, cases "), text
    assert out.stat().st_size > 10_000


def test_custom_sampler_generates():
    text = run_example("custom_sampler.py", model_path("stories260K.f32.bin"), "Once upon a time")
    story, summary = text.rstrip("\n").rsplit("\n", 1)
    assert story.startswith("Once upon a time") and len(story) > len("Once upon a time") + 40, story
    assert summary.startswith("(") and " tokens, stopped by " in summary, summary


def test_batch_of_prompts():
    text = run_example("batch_prompts.py", model_path("stories260K.f32.bin"))
    lines = text.rstrip("\n").split("\n")
    prompts = ["Once upon a time", "The little dog", "In the morning", "Lily wanted"]
    assert len(lines) == len(prompts), text
    import entropix
    with entropix.Model(model_path("stories260K.f32.bin"), threads=1) as model:
        for i, (line, p) in enumerate(zip(lines, prompts)):
            # decoded in turn with three other states open: the text each gets alone
            alone = model.generate(p, ctx=128, sampler="combined", seed=i, max_tokens=24).text()
            assert line == p + alone, (line, alone)
