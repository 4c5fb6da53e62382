"""The sampling API (tinylm.generation.sampling) and the generate.py command line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TINY_TEXT, compose_config, entry_point, script_in_process

from tinylm.checkpoint import load_model
from tinylm.cli import quote_values
from tinylm.console import printable
from tinylm.errors import TinyLMError
from tinylm.generation.prompting import encode_prompt, validate_sampling
from tinylm.generation.sampling import (
    generate,
    keep_top_k,
    keep_top_p,
    sample_next,
    stream_text,
    stream_tokens,
)
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.tokenizer import ByteTokenizer, CharTokenizer

generate_cli = entry_point("generate.py")


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny_model(pos_encoding="learned", attn_impl="sdpa", vocab_size=11) -> GPT:
    torch.manual_seed(1)
    config = GPTConfig(vocab_size=vocab_size, block_size=8, n_embd=16, num_heads=2, num_layers=2,
                       pos_encoding=pos_encoding, attn_impl=attn_impl)
    model = GPT(config).eval()
    with torch.no_grad():  # larger weights than the training init, so greedy text varies more
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 1.0 if "embedding" in name else 0.5)
    return model


def scripted_model(script: list[int], vocab_size: int) -> GPT:
    """A GPT whose most likely next token after position t is ``script[t]``, whatever the input.

    Blocks add nothing (zeroed output projections), tokens embed to zero and position t embeds to
    a spike on channel t, which lm_head maps to ``script[t]``.
    """
    n = len(script) + len(script) % 2
    model = GPT(GPTConfig(vocab_size=vocab_size, block_size=n, n_embd=n, num_heads=1,
                          num_layers=1, dropout=0.0))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.ln_f.weight.fill_(1.0)
        model.position_embedding.weight.copy_(10 * torch.eye(n))
        for t, token in enumerate(script):
            model.lm_head.weight[token, t] = 10.0
    return model.eval()


def kept(logits: torch.Tensor) -> list[set[int]]:
    return [set(torch.isfinite(row).nonzero().flatten().tolist()) for row in logits]


# --------------------------------------------------------------------------------------------
# KV cache


@pytest.mark.parametrize("attn_impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("pos_encoding", ["learned", "sinusoidal"])
def test_greedy_with_and_without_cache_is_identical_past_block_size(pos_encoding, attn_impl):
    model = tiny_model(pos_encoding, attn_impl)
    prompt = torch.randint(11, (3, 5), generator=torch.Generator().manual_seed(1))
    cached = generate(model, prompt, 30, temperature=0, use_cache=True)
    reference = generate(model, prompt, 30, temperature=0, use_cache=False)
    assert cached.shape == (3, 35)  # 35 tokens > block_size 8: the window slid 27 times
    assert torch.equal(cached, reference)
    assert torch.equal(cached[:, :5], prompt)
    new = cached[:, 5:]
    assert len({tuple(row) for row in new.tolist()}) >= 2 and len(new.unique()) >= 4  # not one loop


def test_cache_encodes_one_token_per_step_until_the_window_slides():
    model = tiny_model()
    prompt = torch.zeros(2, 5, dtype=torch.long)

    def encoded(use_cache: bool) -> list[tuple[int, int]]:
        """(B, T) of the ids each forward pass embeds, read at the hook point ``hook_embed`` (B, T, C)."""
        shapes = []
        with model.hooks([("hook_embed", lambda x, hook: shapes.append(tuple(x.shape[:2])))]):
            generate(model, prompt, 6, use_cache=use_cache)
        return shapes

    # prompt, then one token per step while the text fits in block_size 8, then whole windows
    assert encoded(True) == [(2, 5), (2, 1), (2, 1), (2, 1), (2, 8), (2, 8)]
    assert encoded(False) == [(2, 5), (2, 6), (2, 7), (2, 8), (2, 8), (2, 8)]


def test_same_seed_samples_the_same_with_and_without_cache():
    model = tiny_model("sinusoidal")
    prompt = torch.randint(11, (2, 3), generator=torch.Generator().manual_seed(2))
    draws = [
        generate(model, prompt, 20, top_k=5, generator=torch.Generator().manual_seed(5),
                 use_cache=use_cache)
        for use_cache in (False, True)
    ]
    assert torch.equal(*draws)


def test_prompt_longer_than_block_is_cropped():
    model = tiny_model()
    prompt = torch.randint(11, (1, 20), generator=torch.Generator().manual_seed(3))
    out = generate(model, prompt, 4, temperature=0)
    assert torch.equal(out[:, :20], prompt)
    assert torch.equal(out, generate(model, prompt, 4, temperature=0, use_cache=False))
    # only the last block_size tokens matter
    assert torch.equal(out[:, -4:], generate(model, prompt[:, -8:], 4, temperature=0)[:, -4:])


# --------------------------------------------------------------------------------------------
# sample_next: top-k, top-p, temperature


def test_top_k_keeps_exactly_the_k_largest_and_their_ties():
    logits = torch.tensor([[1.0, 3.0, 2.0, 3.0, 0.0], [5.0, 4.0, 3.0, 2.0, 1.0]])
    assert kept(keep_top_k(logits, 1)) == [{1, 3}, {0}]  # a tie at the k-th value: both kept
    assert kept(keep_top_k(logits, 2)) == [{1, 3}, {0, 1}]
    assert kept(keep_top_k(logits, 3)) == [{1, 2, 3}, {0, 1, 2}]
    assert kept(keep_top_k(logits, 99)) == [set(range(5))] * 2
    filtered = keep_top_k(logits, 3)
    assert torch.equal(filtered[torch.isfinite(filtered)], torch.tensor([3.0, 2, 3, 5, 4, 3]))


def test_top_p_keeps_the_smallest_set_reaching_p_and_at_least_one():
    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3]])
    logits = probs.log()
    assert kept(keep_top_p(logits, 0.01)) == [{1}]  # never empty
    assert kept(keep_top_p(logits, 0.45)) == [{1}]
    assert kept(keep_top_p(logits, 0.6)) == [{1, 3}]
    assert kept(keep_top_p(logits, 0.85)) == [{1, 3, 2}]  # 0.5 + 0.3 < 0.85
    assert kept(keep_top_p(logits, 0.9)) == [{1, 3, 2}]  # 0.95 already reaches 0.9
    assert kept(keep_top_p(logits, 1.0)) == [{0, 1, 2, 3}]
    ties = torch.tensor([[0.4, 0.2, 0.2, 0.2]]).log()
    assert kept(keep_top_p(ties, 0.5)) == [{0, 1, 2, 3}]  # 0.4 + one 0.2 reaches it; ties kept


def test_sampling_frequencies_follow_the_filtered_distribution():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 3.0]).log_softmax(-1).expand(20_000, 5)
    generator = torch.Generator().manual_seed(0)
    ids = sample_next(logits, top_k=2, generator=generator)
    counts = torch.bincount(ids, minlength=5).float() / len(ids)
    expected = torch.tensor([2.0, 3.0]).softmax(-1)  # ids 0 and 4 renormalised
    assert counts[[1, 2, 3]].sum() == 0
    assert counts[[0, 4]].tolist() == pytest.approx(expected.tolist(), abs=0.015)

    ids = sample_next(logits, temperature=0.5, generator=generator)  # sharper: p ~ exp(2 * logit)
    counts = torch.bincount(ids, minlength=5).float() / len(ids)
    expected = (2 * torch.tensor([2.0, 1.0, 0.0, -1.0, 3.0])).softmax(-1)
    assert counts.tolist() == pytest.approx(expected.tolist(), abs=0.015)


def test_temperature_zero_is_argmax():
    logits = torch.tensor([[0.1, 2.0, 1.9], [3.0, -1.0, 3.0]])
    assert sample_next(logits, temperature=0).tolist() == [1, 0]  # first index wins a tie
    assert sample_next(logits, temperature=0, top_k=1, top_p=0.1).tolist() == [1, 0]


def test_a_tiny_temperature_is_greedy_not_a_crash():
    """logits / 1e-40 overflows to inf and inf - inf = NaN: the row max is subtracted first."""
    logits = torch.randn(64, 11, generator=torch.Generator().manual_seed(0)) * 5
    greedy = logits.argmax(dim=-1)
    for temperature in (1e-40, 1e-300, 5e-324):
        assert torch.equal(sample_next(logits, temperature), greedy)
        assert torch.equal(sample_next(logits, temperature, top_k=3, top_p=0.5), greedy)
    model = tiny_model()
    prompt = torch.randint(11, (3, 2), generator=torch.Generator().manual_seed(1))
    assert torch.equal(generate(model, prompt, 20, temperature=1e-40),
                       generate(model, prompt, 20, temperature=0))


def test_same_seed_same_text_and_different_seed_different_text():
    model = tiny_model()
    prompt = torch.zeros(2, 1, dtype=torch.long)

    def sample(seed, **kw):
        return generate(model, prompt, 30, generator=torch.Generator().manual_seed(seed), **kw)

    assert torch.equal(sample(7), sample(7))
    assert torch.equal(sample(7, top_k=3, top_p=0.9), sample(7, top_k=3, top_p=0.9))
    assert not torch.equal(sample(7), sample(8))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.5}, "temperature=-0.5 must be a number >= 0"),
        ({"temperature": float("nan")}, "temperature=nan must be a number >= 0"),
        ({"top_k": 0}, "top_k=0 must be an integer >= 1"),
        ({"top_k": 2.5}, "top_k=2.5 must be an integer >= 1"),
        ({"top_p": 0}, "top_p=0 must be in (0, 1]"),
        ({"top_p": 1.5}, "top_p=1.5 must be in (0, 1]"),
        ({"max_new_tokens": -1}, "max_new_tokens=-1 must be an integer >= 0"),
        ({"num_samples": 0}, "num_samples=0 must be an integer >= 1"),
    ],
)
def test_bad_sampling_values_are_one_clear_line(kwargs, message):
    args = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(TinyLMError, match=r"^[^\n]+$") as info:
        validate_sampling(**args)
    assert message in str(info.value)
    if "num_samples" not in kwargs:  # the loop checks its arguments too, before the first step
        with pytest.raises(TinyLMError, match=re.escape(message)):
            stream_tokens(tiny_model(), torch.zeros(1, 1, dtype=torch.long), **args)


# --------------------------------------------------------------------------------------------
# the loop's contract: modes, stopping


def test_generate_restores_training_mode_and_tracks_no_gradients():
    model = tiny_model().train()
    out = generate(model, torch.zeros(1, 1, dtype=torch.long), 5)
    assert model.training and all(m.training for m in model.modules())
    assert torch.is_grad_enabled() and not out.requires_grad

    stream = stream_tokens(model, torch.zeros(1, 1, dtype=torch.long), 5)
    next(stream)  # paused half way: nothing leaks into the caller
    assert model.training and torch.is_grad_enabled()
    assert generate(model, torch.zeros(1, 1, dtype=torch.long), 0).shape == (1, 1)


def test_dropout_is_off_while_generating():
    model = tiny_model()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.9
    prompt = torch.zeros(2, 3, dtype=torch.long)
    model.train()
    first = generate(model, prompt, 12, temperature=0)
    assert torch.equal(first, generate(model, prompt, 12, temperature=0))


def test_stop_ids_end_generation_and_are_kept():
    model = scripted_model([3, 4, 5, 6, 7, 8, 9, 2], vocab_size=10)
    prompt = torch.zeros(2, 1, dtype=torch.long)
    assert generate(model, prompt, 5, temperature=0)[0].tolist() == [0, 3, 4, 5, 6, 7]
    out = generate(model, prompt, 7, temperature=0, stop_ids=[6, 99])
    assert out.tolist() == [[0, 3, 4, 5, 6]] * 2


def test_stop_ids_per_row():
    model = tiny_model()
    prompt = torch.randint(11, (3, 2), generator=torch.Generator().manual_seed(4))
    free = generate(model, prompt, 12, temperature=0)
    stop = free[0, 4].item()  # row 0 produces it at its third new token
    out = generate(model, prompt, 12, temperature=0, stop_ids=[stop])
    for row, full in zip(out.tolist(), free.tolist(), strict=True):
        new = full[2:]
        if stop in new:
            cut = 2 + new.index(stop) + 1
            assert row[:cut] == full[:cut] and set(row[cut:]) <= {stop}
        else:
            assert row == full[: len(row)]


# --------------------------------------------------------------------------------------------
# text in, text out


def test_encode_prompt_unknown_characters():
    tok = CharTokenizer(list("\nabc"))
    assert encode_prompt(tok, "cab") == [3, 1, 2]
    with pytest.raises(TinyLMError) as info:
        encode_prompt(tok, "a仔bz")
    message = str(info.value)
    assert "'仔' 'z'" in message and "vocabulary of 4 symbols" in message and "unknown=skip" in message
    assert "\n" not in message
    assert encode_prompt(tok, "a仔bz", unknown="skip") == [1, 2]
    with pytest.raises(TinyLMError, match="unknown='ignore': choose one of error, skip"):
        encode_prompt(tok, "a", unknown="ignore")


def test_empty_prompt_starts_from_a_newline_else_token_zero():
    assert encode_prompt(CharTokenizer(list("\nab")), "") == [0]
    assert encode_prompt(CharTokenizer(list("ab\n")), "") == [2]
    assert encode_prompt(CharTokenizer(list("ab")), "") == [0]
    assert encode_prompt(CharTokenizer(list("ab\n")), "??", unknown="skip") == [2]
    assert encode_prompt(ByteTokenizer(), "") == [10]


def test_stream_text_stops_right_after_the_stop_string():
    tok = CharTokenizer(list("\nabcd"))
    script = tok.encode("ab\ncd\nab")
    model = scripted_model(script, tok.vocab_size)
    pieces = list(stream_text(model, tok, [0], 8, temperature=0))
    assert pieces == list("ab\ncd\nab")
    assert "".join(stream_text(model, tok, [0], 8, stop="\n", temperature=0)) == "ab\n"
    assert "".join(stream_text(model, tok, [0], 8, stop="cd", temperature=0)) == "ab\ncd"
    assert "".join(stream_text(model, tok, [0], 8, stop="d\na", temperature=0)) == "ab\ncd\na"
    assert "".join(stream_text(model, tok, [0], 8, stop="zz", temperature=0)) == "ab\ncd\nab"


def test_stream_text_holds_back_half_utf8_characters():
    tok = ByteTokenizer()
    script = list("x我y学".encode())
    model = scripted_model(script, 256)
    assert list(stream_text(model, tok, [0], len(script), temperature=0)) == ["x", "我", "y", "学"]
    assert "".join(stream_text(model, tok, [0], len(script), stop="y", temperature=0)) == "x我y"


# --------------------------------------------------------------------------------------------
# generate.py


def test_generate_py_imports_no_training_stack():
    code = (
        "import sys; sys.path.insert(0, '.'); import tinylm.commands.generate; "
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'lightning', 'pytorch_lightning', 'tensorboard', 'matplotlib', 'torchmetrics'}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_unescape_and_printable():
    assert generate_cli.unescape(r"a\nb\tc\\n") == "a\nb\tc\\n"
    text = "a\x1b[2Jb\rc\x00\x7f\x9b\td\n我"
    assert printable(text) == "a\\x1b[2Jb\\x0dc\\x00\\x7f\\x9b\td\n我"


@pytest.fixture
def trained_run(gpt_run):
    """The session's tiny GPT run (tests/conftest.py), the only run under its log_dir; its text file is gone."""
    return gpt_run.path


def run_generate(*overrides: str, cwd=ROOT):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, str(ROOT / "generate.py"), *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", timeout=120,
                          cwd=cwd, env=env)


def split_samples(out: str, length: int) -> list[str]:
    """The samples of generate.py's output, each ``length`` characters; checks how lines end.

    Samples are separated by a line ``---``, and each sample ends its line: a newline is added
    after it unless its text already ends with one.
    """
    parts = out.split("---\n")  # TINY_TEXT has no "-"
    samples = [part[:length] for part in parts]
    for part, sample in zip(parts, samples, strict=True):
        assert part == sample + ("" if sample.endswith("\n") else "\n")
    return samples


@pytest.mark.slow  # a whole process (or several) from start to end
def test_generate_py_end_to_end_from_a_checkpoint_alone(trained_run, tmp_path, capsys):
    ckpt = tmp_path / "model.ckpt"
    shutil.copy(next((trained_run / "checkpoints").glob("best-*.ckpt")), ckpt)
    proc = run_generate(f"ckpt_path={ckpt}", "prompt=自注意力", "max_new_tokens=40", "seed=3",
                        "num_samples=2", "threads=1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "checkpoint: model.ckpt (step " in proc.stderr and "seed=3" in proc.stderr  # relative: shorter
    samples = split_samples(proc.stdout, 4 + 40)
    assert len(samples) == 2 and samples[0] != samples[1]
    for sample in samples:
        assert sample.startswith("自注意力")
        assert set(sample) <= set(TINY_TEXT)
    assert list(tmp_path.iterdir()) == [ckpt]  # no Hydra folders or logs

    # the same run found by its folder, in-process: same seed, same text, with or without the cache
    generate_cli.run(compose_generate(f"run_dir={trained_run}", "prompt='自注意力'", "max_new_tokens=40",
                                      "seed=3", "num_samples=2", "use_cache=false", "threads=1"))
    out, err = capsys.readouterr()
    assert "best-step" in err
    assert out == proc.stdout


def test_generate_py_errors_are_one_line(trained_run):
    proc = script_in_process("generate.py", f"run_dir={trained_run}", "prompt=自注意力Ω", "max_new_tokens=3",
                             check=False, cwd=ROOT)  # the command in this process: its argv, app and exit
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    vocab = len(set(TINY_TEXT))
    assert len(error) == 1 and "'Ω'" in error[0] and f"vocabulary of {vocab} symbols" in error[0]


def compose_generate(*overrides: str):
    return compose_config("generate", *overrides)


def run_expecting_error(*overrides: str) -> TinyLMError:
    with pytest.raises(TinyLMError, match=r"^[^\n]+$") as info:
        generate_cli.run(compose_generate(*overrides))
    return info.value


def test_latest_run_stop_and_greedy_in_process(trained_run, capsys):
    log_dir = trained_run.parent.parent
    cfg = compose_generate(f"paths.log_dir={log_dir}", "prompt='自'", "temperature=0",
                           "max_new_tokens=60", "stop='\\n'")
    generate_cli.run(cfg)
    out, err = capsys.readouterr()
    assert f"checkpoint: {trained_run / 'checkpoints'}" in err and "best-step" in err
    assert out.startswith("自") and out.endswith("\n")
    generated = out[1:-1]  # without the prompt and the one newline that ends the line
    assert "\n" not in generated  # the stop newline, if reached, is that one: no blank line
    generate_cli.run(cfg)
    assert capsys.readouterr().out == out  # greedy: the same every time


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["top_k=0"], "top_k=0 must be an integer >= 1"),
        (["top_p=1.5"], "top_p=1.5 must be in (0, 1]"),
        (["max_new_tokens=-5"], "max_new_tokens=-5 must be an integer >= 0"),
        (["num_samples=0"], "num_samples=0 must be an integer >= 1"),
        (["seed=abc"], "seed='abc' must be an integer"),
        (["threads=0"], "threads=0 must be an integer >= 1"),
        (["prompt=a", "prompt_file=x.txt"], "both prompt and prompt_file are set"),
        (["prompt_file=/no/such/file.txt"], "prompt_file: file not found: /no/such/file.txt"),
        (["prompt_file=/dev/zero"], "prompt_file=/dev/zero is a device or socket, not a regular file"),
        (["prompt_file=/"], "prompt_file is a directory, not a file: /"),
        (["use_cache=foo"], "use_cache='foo' must be true or false"),
        (["use_cache=1"], "use_cache=1 must be true or false"),
        (["prompt_max_mib=0"], "prompt_max_mib=0 must be a number > 0 (MiB)"),
        (["temperature=nan"], "temperature=nan must be a number >= 0"),
        (["ckpt_path=/no/such.ckpt"], "checkpoint file /no/such.ckpt does not exist"),
        (["run_dir=/no/such/run"], "run folder /no/such/run does not exist"),
        (["ckpt_path=a.ckpt", "run_dir=b"], "both ckpt_path and run_dir are set"),
    ],
)
def test_bad_options_in_process(tmp_path, overrides, message):
    assert message in str(run_expecting_error(f"paths.log_dir={tmp_path}", *overrides))


def test_a_bad_temperature_says_what_to_use_in_process(tmp_path):
    assert str(run_expecting_error(f"paths.log_dir={tmp_path}", "temperature=-1")) == (
        "temperature=-1 must be a number >= 0: use 0 for greedy, 1 for plain sampling")


def test_no_runs_at_all_in_process(tmp_path):
    message = str(run_expecting_error(f"paths.log_dir={tmp_path}"))
    assert f"no run with checkpoints under {tmp_path}" in message and "python train.py" in message


def test_unusable_checkpoints_in_process(tmp_path):
    (tmp_path / "broken.ckpt").write_bytes(b"PK\x03\x04 truncated")
    message = str(run_expecting_error(f"ckpt_path={tmp_path / 'broken.ckpt'}"))
    assert "broken.ckpt could not be read" in message and "corrupted or truncated" in message
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    message = str(run_expecting_error(f"run_dir={tmp_path / 'run'}"))
    assert f"run folder {tmp_path / 'run'} has no checkpoints" in message


def test_empty_prompt_prints_only_the_continuation(trained_run, capsys):
    cfg = compose_generate(f"run_dir={trained_run}", "max_new_tokens=12", "seed=0")
    generate_cli.run(cfg)
    out = capsys.readouterr().out
    (sample,) = split_samples(out, 12)  # the starting newline is not shown
    assert set(sample) <= set(TINY_TEXT)


def test_prompt_file_and_skip_unknown(trained_run, tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Ω自注意力\n", encoding="utf-8")
    cfg = compose_generate(f"run_dir={trained_run}", f"prompt_file={prompt}", "unknown=skip",
                           "max_new_tokens=5", "seed=1")
    generate_cli.run(cfg)
    out = capsys.readouterr().out
    (sample,) = split_samples(out, len("自注意力\n") + 5)
    assert sample.startswith("自注意力\n")


# --------------------------------------------------------------------------------------------
# generate.py with scripted checkpoints: exact output, no training needed


def scripted_checkpoint(path: Path, vocab: str, script: str) -> Path:
    """A checkpoint (char tokenizer over ``vocab``) whose greedy next token after position t is
    ``script[t]``: from the empty prompt (a newline at position 0) it writes ``script``."""
    tokenizer = CharTokenizer(sorted(set(vocab)))
    model = scripted_model(tokenizer.encode(script), tokenizer.vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "model_config": asdict(model.config), "tokenizer": tokenizer.state(),
                "global_step": 1}, path)
    return path


def generated(capsys, *overrides: str) -> str:
    generate_cli.run(compose_generate("temperature=0", *overrides))
    return capsys.readouterr().out


def test_a_sample_ends_its_line_once(tmp_path, capsys):
    ckpt = "ckpt_path=" + str(scripted_checkpoint(tmp_path / "lines.ckpt", "ab\n", "ab\nab\n"))
    assert generated(capsys, ckpt, "max_new_tokens=6", "stop='\\n'") == "ab\n"
    assert generated(capsys, ckpt, "max_new_tokens=6", "stop='\\n'", "num_samples=2") == "ab\n---\nab\n"
    assert generated(capsys, ckpt, "max_new_tokens=6") == "ab\nab\n"  # ends in a newline: none added
    assert generated(capsys, ckpt, "max_new_tokens=5") == "ab\nab\n"  # the newline ending the line
    assert generated(capsys, ckpt, "max_new_tokens=2", "num_samples=2") == "ab\n---\nab\n"


def test_control_characters_are_printed_escaped(tmp_path, capsys):
    vocab = "\n\t\x1b\ra[2J"
    ckpt = scripted_checkpoint(tmp_path / "controls.ckpt", vocab, "\x1b[2Ja\t\r\n")
    assert generated(capsys, f"ckpt_path={ckpt}", "max_new_tokens=8") == "\\x1b[2Ja\t\\x0d\n"
    loaded = load_model(ckpt)  # the library still decodes exactly
    text = "".join(stream_text(loaded.model, loaded.tokenizer, [0], 8, temperature=0))
    assert text == "\x1b[2Ja\t\r\n"


def test_prompt_file_must_be_a_small_utf8_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: reading it would block forever
    assert f"prompt_file={fifo} is a FIFO, not a regular file" in str(run_expecting_error(f"prompt_file={fifo}"))
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * 2000)
    message = str(run_expecting_error(f"prompt_file={big}", "prompt_max_mib=0.001"))
    assert f"prompt_file={big} is 0.0 MiB, over the 0.001 MiB limit: raise it with prompt_max_mib=N" in message
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café".encode("latin-1"))
    assert "cannot be read as UTF-8 text" in str(run_expecting_error(f"prompt_file={latin1}"))


def test_prompt_file_path_is_quoted_and_never_unescaped(tmp_path):
    path = tmp_path / "my 提示 a\\nb's.txt"  # a backslash-n in a path is two characters
    path.write_bytes("\ufeff第一行\r\n二\r三\n".encode())
    overrides = quote_values([f"prompt_file={path}"], generate_cli.PATH_KEYS)
    assert generate_cli.read_prompt(compose_generate(*overrides)) == "第一行\n二\r三\n"  # as training reads


def run_cli(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(ROOT / script), *args], capture_output=True, text=True,
                          encoding="utf-8", timeout=120, cwd=cwd, env=env)


@pytest.mark.slow
def test_generate_py_quotes_paths_and_takes_text_literally(tmp_path):
    ckpt = scripted_checkpoint(tmp_path / "my 模型 run" / "checkpoints" / "last.ckpt", "\na${b}c", "}}}}c\na")
    # the command's argv quoting and Hydra app, in this process
    proc = script_in_process("generate.py", f"ckpt_path={ckpt}", "prompt=a${b}", "stop=c", "temperature=0",
                             "max_new_tokens=6", check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "a${b}c\n"  # not an interpolation, not an error
    (tmp_path / "提示 file.txt").write_text("a", encoding="utf-8")
    proc = script_in_process("generate.py", f"run_dir={ckpt.parent.parent}", "prompt_file=提示 file.txt",
                             "stop=${oc.env:HOME}", "temperature=0", "max_new_tokens=3", check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "a}}}\n"


def test_generate_py_help_shows_only_its_own_options(tmp_path):
    proc = run_cli("generate.py", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cfg = compose_generate()
    for key in [k for k in cfg if k != "paths"] + ["paths.log_dir"]:
        assert f"\n{key}=" in proc.stdout, key
    for group in ("data", "model", "optim", "trainer", "callbacks", "experiment", "Configuration groups"):
        assert group + ":" not in proc.stdout and group + "=" not in proc.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # a whole process (or several) from start to end
def test_generate_py_exits_quietly_when_the_reader_closes_the_pipe(tmp_path):
    ckpt = scripted_checkpoint(tmp_path / "loop.ckpt", "ab\n", "ab\nab")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "generate.py"), f"ckpt_path={ckpt}",
                             "temperature=0", "max_new_tokens=1000000", "seed=1"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert len(proc.stdout.read(20)) == 20  # like `| head -c 20`
        proc.stdout.close()
        assert proc.wait(timeout=60) == 141  # 128 + SIGPIPE, what the shell shows for `yes | head`
    finally:
        proc.kill()
        proc.wait()
    (line,) = proc.stderr.read().decode().splitlines()  # only the usual checkpoint line
    assert line.startswith(f"checkpoint: {ckpt.name} (step ")  # relative to where it ran: shorter
    proc.stderr.close()
