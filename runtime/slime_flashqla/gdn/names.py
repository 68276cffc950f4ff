"""The GDN backends' names, importing nothing: what a parser offers before any kernel or torch import.

`gdn.backends.KERNEL_BACKENDS` holds one backend object under each kernel name (a test keeps the
two in step); `auto` picks among them per call.
"""

KERNEL_BACKEND_NAMES = ("fla", "flashqla", "torch")
AUTO = "auto"
BACKENDS = (*KERNEL_BACKEND_NAMES, AUTO)
# slime's own default: a run changes kernel only when asked to, never because a package is installed.
DEFAULT_BACKEND = "fla"
