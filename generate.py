"""``python generate.py KEY=VALUE ...`` in a checkout: ``tinylm generate``, run folders under this checkout.
What it does: tinylm/commands/generate.py; every option: conf/generate.yaml."""

from tinylm.commands import run_command

if __name__ == "__main__":
    run_command("generate")
