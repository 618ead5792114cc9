"""hygon.dcu's runtime image: three programs over one floor.

The floor is this package's own modules (names, the request grammar, placement, the geometry and
reservation codecs, the Kubernetes basics) and imports no program. The programs are the device
plugin (``deviceplugin/``), the admission webhook (``webhook/``) and the scheduler extender
(``extender/``); the two HTTPS ones stand on the serving kit (``serving/``). ``cli.py`` is the one
entry point. docs/dev/runtime.md draws the layers; tests/unit/plugin_image/test_layering.py holds
them.
"""

__version__ = "0.1.0"
