"""``python -m tinylm.compare ...``: see ``tinylm.compare``."""

import sys

from tinylm.compare.command import main

sys.exit(main())
