"""``python analyze.py KEY=VALUE ...`` in a checkout: ``tinylm analyze``, run folders under this checkout.
What it does: tinylm/commands/analyze.py; every option: conf/analyze.yaml."""

from tinylm.commands import run_command

if __name__ == "__main__":
    run_command("analyze")
