"""``python evaluate.py KEY=VALUE ...`` in a checkout: ``tinylm evaluate``, run folders under this checkout.
What it does: tinylm/commands/evaluate.py; every option: conf/evaluate.yaml."""

from tinylm.commands import run_command

if __name__ == "__main__":
    run_command("evaluate")
