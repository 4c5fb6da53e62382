"""``python export.py KEY=VALUE ...`` in a checkout: ``tinylm export``, run folders under this checkout.
What it does: tinylm/commands/export.py; every option: conf/export.yaml."""

from tinylm.commands import run_command

if __name__ == "__main__":
    run_command("export")
