"""The old name of gdn/backends/flashqla/deferred_compile.py: the module itself under this name, not a copy.

Kept only while tests/gpu/import_phases.py imports and patches it here; delete with that import.
"""

import sys

from slime_flashqla.gdn.backends.flashqla import deferred_compile

sys.modules[__name__] = deferred_compile
