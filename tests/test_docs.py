"""README.md and docs/ stay true: every command in their code blocks parses, and they name no path
outside the repository.

A command of one of the entry points (train.py, generate.py, ...) is composed dry with its own
config, its overrides quoted as the script quotes them (``tinylm.cli``); a sweep's comma lists
(``-m``) compose with each list's first value. ``python -m <module>`` must name an importable
module, ``python <file>.py`` a file of the repository, ``pip install -e ".[extra]"`` an extra that
the package declares.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from conftest import ROOT, compose_config, entry_point
from hydra.core.override_parser.overrides_parser import OverridesParser

PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
ENTRY_POINTS = {"train.py": "train", "generate.py": "generate", "evaluate.py": "evaluate",
                "visualize.py": "visualize", "export.py": "export", "analyze.py": "analyze"}
# paths that exist only on the machine the docs were written on: the parent folder, a home
# folder, a developer's workspace
OUTSIDE = re.compile(r"(?<![\w.])\.\./|~/|/work/|/tmp/|\bshared/data\b")


def code_blocks(page: Path) -> list[str]:
    """The shell code blocks of a page (```bash), with their indentation removed."""
    text = page.read_text(encoding="utf-8")
    return [re.sub(r"(?m)^[ \t]+", "", block) for block in re.findall(r"```bash\n(.*?)```", text, re.S)]


def commands(page: Path) -> list[list[str]]:
    """Each command of the page's shell blocks as argv: continued lines joined, comments dropped,
    `&&` chains split."""
    found = []
    for block in code_blocks(page):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                found.append(words[:cut])
                words = words[cut + 1 :]
    return found


ALL = [(page.relative_to(ROOT).as_posix(), argv) for page in PAGES for argv in commands(page)]


def first_values(overrides: list[str]) -> list[str]:
    """A sweep's overrides with each comma list (``a,b,c``) cut to its first value."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    out = []
    for arg, override in zip(overrides, parsed, strict=True):
        if override.is_sweep_override():
            first = next(iter(override.sweep_string_iterator()))
            arg = f"{arg.partition('=')[0]}={first}"
        out.append(arg)
    return out


def test_the_pages_have_commands_of_every_entry_point():
    scripts = {argv[1] for _, argv in ALL if argv[:1] == ["python"] and len(argv) > 1}
    assert set(ENTRY_POINTS) <= scripts
    assert len(ALL) > 60


@pytest.mark.parametrize("page,argv", [(page, argv) for page, argv in ALL if argv[:1] == ["python"]],
                         ids=lambda value: " ".join(value)[:80] if isinstance(value, list) else value)
def test_every_python_command_parses(page, argv):
    if argv[1] == "-m":  # python -m <module> ...
        assert importlib.util.find_spec(argv[2]) is not None, f"{page}: no module {argv[2]}"
        return
    if argv[1] == "-c":  # python -c "<program>": valid Python
        compile(argv[2], f"{page}: python -c", "exec")
        return
    script = argv[1]
    assert (ROOT / script).is_file(), f"{page}: {script} is not a file of the repository"
    if script not in ENTRY_POINTS:
        return
    args = [arg for arg in argv[2:] if arg not in ("-m", "--multirun")]
    if any(arg.startswith("--") for arg in args):  # --help, --cfg job: Hydra's own flags
        assert set(args) <= {"--help", "--cfg", "job", "--info"}, f"{page}: {argv}"
        return
    if script == "train.py":
        from tinylm.cli import TRAIN_FOLDER_KEYS, TRAIN_PATH_KEYS, quote_values

        sweep = len(args) != len(argv) - 2
        args = quote_values(args, TRAIN_FOLDER_KEYS if sweep else TRAIN_PATH_KEYS)
        if sweep:
            args = first_values(args)
    else:
        from tinylm.cli import quote_values

        module = entry_point(script)
        args = quote_values(quote_values(args, getattr(module, "TEXT_KEYS", ()), literal=True), module.PATH_KEYS)
    hydra_args = [arg for arg in args if arg.lstrip("+~").startswith("hydra")]
    assert not hydra_args or script == "train.py", f"{page}: {argv}"
    compose_config(ENTRY_POINTS[script], *[arg for arg in args if arg not in hydra_args])
    if hydra_args:  # the launcher, the sweep folder: composed with Hydra's own config
        from hydra import compose, initialize_config_dir

        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            compose(config_name="train", overrides=args, return_hydra_config=True)


def test_every_pip_extra_exists():
    extras = importlib.metadata.metadata("tinylm").get_all("Provides-Extra")
    asked = {extra for _, argv in ALL if argv[:2] == ["pip", "install"] for arg in argv
             for extra in re.findall(r"\.\[([\w,-]+)\]", arg)}
    assert asked and all(name in extras for group in asked for name in group.split(","))


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_no_path_outside_the_repository(page):
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        assert not OUTSIDE.search(line), f"{page.name}:{number} names a path outside the repository: {line}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_no_issue_numbers_and_links_that_resolve(page):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"\bissue\s*#?\d", text, re.I), f"{page.name} names an issue"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not re.match(r"https?://", target):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"
