"""The default run trains the same weights, bit for bit, as the code before the package was laid out anew.

The hash of ``python train.py trainer.max_steps=30 logger=none``'s weights was recorded per machine
(``bench/bit_identity.py --record``, on the commit the fixture names). Bit-identity holds on one
machine, not across CPU kernels, so on a machine without a recording there is nothing to compare.
"""

import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

from bit_identity import check  # noqa: E402


@pytest.mark.slow
def test_the_default_run_trains_the_recorded_weights_bit_for_bit(tmp_path):
    same, message = check(tmp_path / "run")
    if same is None:
        pytest.skip(message)
    assert same, message
