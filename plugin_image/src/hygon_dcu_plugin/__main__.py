"""`python -m hygon_dcu_plugin` is the `hygon-dcu-plugin` command."""

import sys

from hygon_dcu_plugin.cli import main

sys.exit(main())
