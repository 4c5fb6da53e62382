"""The command line of ``python -m tinylm.compare``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tinylm.compare.report import write_report
from tinylm.compare.runner import run_comparison
from tinylm.compare.spec import comparisons
from tinylm.errors import TinyLMError
from tinylm.run_folder import use_project_root
from tinylm.tasks.data_file import read_text

# what `all` runs: not seq2seq (other data), nor tricks (several seeds of eleven variants: a budget of its own)
TEXT_COMPARISONS = [name for name in comparisons(1, 1) if name not in ("seq2seq", "tricks")]


def data_override(data: str | None, max_chars: int | None, out: Path) -> list[str]:
    """``data.path=...`` for the runs: the file itself, or a copy of its first ``max_chars`` characters."""
    if data is None and max_chars is None:
        return []
    if data is None:
        raise TinyLMError("--max-chars needs --data: the file to take the first characters of")
    path = Path(data).resolve()
    if not path.is_file():
        raise TinyLMError(f"--data {data}: no such file (give a UTF-8 text file)")
    if max_chars is not None:
        text = read_text(path)[:max_chars]
        head = out / f"{path.stem}.first{max_chars}{path.suffix}"
        out.mkdir(parents=True, exist_ok=True)
        if not head.exists() or head.read_text(encoding="utf-8") != text:
            head.write_text(text, encoding="utf-8")
        path = head
    return [f"data.path={path}"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tinylm.compare",
        description="Train the variants of a comparison on the same data and budget, then write "
                    "REPORT.md (tables) and curves.png (validation curves) into --out.",
    )
    parser.add_argument("which", nargs="?", choices=[*comparisons(1, 1), "all"],
                        help="all: the four text comparisons; seq2seq trains on translation pairs (--data: a "
                             "source<TAB>target file; default: the generated numbers_zh demo); tricks: each "
                             "speedrun trick alone and combined, --seeds runs each")
    parser.add_argument("--steps", type=int, default=500, help="training steps per run (default 500)")
    parser.add_argument("--data", help="UTF-8 text file (default: the embedded Chinese corpus)")
    parser.add_argument("--max-chars", type=int, help="train on the first N characters of --data only")
    parser.add_argument("--bpe-vocab-size", type=int, default=512, help="BPE vocabulary (default 512)")
    parser.add_argument("--seeds", type=int, default=3, help="tricks: runs per variant, seeds 1..N (default 3)")
    parser.add_argument("--out", default=str(use_project_root() / "outputs" / "compare"), help="report folder")
    parser.add_argument("--rerun", action="store_true", help="train again even where a run exists")
    parser.add_argument("overrides", nargs="*", help="train.py overrides for every run, e.g. model.n_embd=32")
    args = parser.parse_intermixed_args(argv)  # overrides may come before or after the options
    if args.which is None:  # argparse would say "overrides" are required too
        print("choose a comparison:", file=sys.stderr)
        for name, comparison in comparisons(args.steps, args.bpe_vocab_size).items():
            print(f"  {name:<11} {comparison.title}: {' | '.join(comparison.variants)}", file=sys.stderr)
        print(f"  {'all':<11} the four text comparisons: {' | '.join(TEXT_COMPARISONS)}", file=sys.stderr)
        parser.exit(2, f"usage: {parser.prog} COMPARISON [options] [train.py overrides ...]  (--help: every option)\n")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    try:
        if args.steps < 1 or args.seeds < 1 or (args.max_chars is not None and args.max_chars < 1):
            raise TinyLMError("--steps, --seeds and --max-chars must be positive integers")
        common = [
            f"trainer.max_steps={args.steps}", f"trainer.val_check_interval={max(1, args.steps // 10)}",
            "trainer.enable_progress_bar=false", "callbacks=minimal",
            *data_override(args.data, args.max_chars, out), *args.overrides,
        ]
        all_comparisons = comparisons(args.steps, args.bpe_vocab_size, args.seeds)
        chosen = TEXT_COMPARISONS if args.which == "all" else [args.which]
        failures = []
        for name in chosen:
            failures += run_comparison(name, all_comparisons[name], out, common, args.rerun)
        report = write_report(out, all_comparisons)
    except TinyLMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: run the same command again to continue (finished runs are kept)", file=sys.stderr)
        return 130
    print(report.read_text(encoding="utf-8"))
    print(f"wrote {report}")
    if failures:
        print(f"error: {len(failures)} run(s) failed: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0
