"""``python visualize.py KEY=VALUE ...`` in a checkout: ``tinylm visualize``, run folders under this checkout.
What it does: tinylm/commands/visualize.py; every option: conf/visualize.yaml."""

from tinylm.commands import run_command

if __name__ == "__main__":
    run_command("visualize")
