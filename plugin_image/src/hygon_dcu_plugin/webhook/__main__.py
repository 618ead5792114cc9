"""``python -m hygon_dcu_plugin.webhook``: the same as ``hygon-dcu-plugin webhook``."""

import sys

from hygon_dcu_plugin.webhook.server import main

raise SystemExit(main(sys.argv[1:]))
