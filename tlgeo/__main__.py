"""``python -m tlgeo`` (and ``torchrun ... -m tlgeo``): the ``tlgeo`` command line."""

import sys

from .cli import main

sys.exit(main())
