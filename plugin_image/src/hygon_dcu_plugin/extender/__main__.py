"""``python -m hygon_dcu_plugin.extender``: the same as ``hygon-dcu-plugin extender``."""

import sys

from hygon_dcu_plugin.extender.main import main

raise SystemExit(main(sys.argv[1:]))
