"""What the token cache's check costs a run that maps the cache, side by side with an older checkout's.

    python bench/bench_token_cache_check.py --baseline /path/to/an/older/checkout [--size 1000] [--turns 5]

A text of ``--size`` MB (bench_data's: 红楼梦 repeated) gets a cache from each checkout (built once,
not timed). Then, turn after turn, ``TextDataModule.prepare()`` in a fresh process (imports not
counted), each on a hit:

- ``baseline``: the older checkout's;
- ``unchanged``: this checkout's, the text unchanged since the last run (a ``stat`` of each file);
- ``touched``: after ``touch -r`` of the text onto itself (the same bytes, size and mtime, a new
  ctime): one SHA-256 of the text, and its record updated;
- ``ids copied``: after ids.bin is copied over itself (a new inode): one SHA-256 of ids.bin.

Prints one JSON line per measurement, then the min and median of each case, and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from bench_data import ROOT, SOURCE, machine, make_text, prepare

CASES = ("baseline", "unchanged", "touched", "ids copied")


def disturb(case: str, text: Path, cache: Path) -> None:
    """Change what ``case`` measures, the cache staying current."""
    if case == "touched":
        info = text.stat()
        os.utime(text, ns=(info.st_atime_ns, info.st_mtime_ns))
    elif case == "ids copied":
        (ids,) = cache.glob("*/ids.bin")
        shutil.copy(ids, ids.with_name("ids.copy"))
        os.replace(ids.with_name("ids.copy"), ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="an older checkout whose hit to time beside")
    parser.add_argument("--size", type=int, default=1000, help="MB of text")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--source", type=Path, default=SOURCE, help="the text to repeat")
    parser.add_argument("--folder", type=Path, help="where the text and caches go (default: a temporary folder)")
    args = parser.parse_args()
    print(json.dumps({"bench": "token_cache_check", **machine()}), flush=True)
    seconds = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        text, caches = make_text(Path(folder), args.size, args.source), Path(folder) / "caches"
        code = {case: args.baseline if case == "baseline" else ROOT for case in CASES}
        cache = {case: caches / ("baseline" if case == "baseline" else "current") for case in CASES}
        for case in ("baseline", "unchanged"):  # the builds
            prepare(code[case], text, str(cache[case]))
        for turn in range(args.turns):
            for case in CASES:
                disturb(case, text, cache[case])
                result = prepare(code[case], text, str(cache[case]))
                seconds[case].append(result["seconds"])
                print(json.dumps({"turn": turn, "case": case, "seconds": round(result["seconds"], 4),
                                  "tokens": result["tokens"], "file_mib": round(text.stat().st_size / 2**20)}),
                      flush=True)
    for case, values in seconds.items():
        print(json.dumps({"case": case, "min_s": round(min(values), 4),
                          "median_s": round(statistics.median(values), 4)}), flush=True)
    print(json.dumps({"bench": "token_cache_check", "load_average_after": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
