"""The old name of gdn/backends/flashqla/releases.py: the module itself under this name, not a copy.

Kept only while tests/gpu/flashqla_sm121_probe.py imports it here; delete with that import.
"""

import sys

from slime_flashqla.gdn.backends.flashqla import releases

sys.modules[__name__] = releases
