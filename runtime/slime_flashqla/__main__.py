"""`python -m slime_flashqla` runs the CLI."""

import sys

from slime_flashqla.cli import main

sys.exit(main())
