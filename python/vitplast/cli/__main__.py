"""``python -m vitplast.cli``: the same as the ``vitplast`` command."""

import sys

from . import main

sys.exit(main())
