"""``python train.py KEY=VALUE ...`` in a checkout: ``tinylm train``, run folders under this checkout.
What it does: tinylm/commands/train.py; every option: conf/train.yaml."""

from tinylm.commands import run_command

if __name__ == "__main__":
    run_command("train")
