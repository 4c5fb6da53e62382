"""``tinylm <command> KEY=VALUE ...`` (the console script pyproject.toml installs) and ``python -m tinylm ...``:
the command's own options are its Hydra overrides, as ``python <command>.py`` takes them in a checkout."""

import sys

from tinylm.commands import COMMANDS, run_command

COMPARE = "compare"  # tinylm.compare: argparse options, not Hydra overrides


def usage() -> str:
    width = max(map(len, [*COMMANDS, COMPARE]))
    lines = [f"  {name:<{width}}  {what}" for name, what in COMMANDS.items()]
    lines.append(f"  {COMPARE:<{width}}  train variants and compare them (python -m tinylm.compare)")
    return ("usage: tinylm <command> [KEY=VALUE ...]\n\ncommands:\n" + "\n".join(lines) +
            "\n\n`tinylm <command> --help` lists a command's options.")


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(usage())
    if sys.argv[1] in ("-h", "--help"):
        print(usage())
        return
    name, args = sys.argv[1], sys.argv[2:]
    if name != COMPARE and name not in COMMANDS:
        sys.exit(f"error: tinylm {name}: no such command; choose one of {', '.join([*COMMANDS, COMPARE])}")
    sys.argv = [f"tinylm {name}", *args]  # as `python <command>.py ARGS` gives it: the command's own arguments
    if name == COMPARE:
        from tinylm.compare.command import main as compare

        sys.exit(compare())
    run_command(name)


if __name__ == "__main__":
    main()
