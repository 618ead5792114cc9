"""`python -m hygon_dcu_plugin` is the `hygon-dcu-plugin` command."""

import sys

from .cli import main

sys.exit(main())
