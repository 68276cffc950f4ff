"""`python -m slime_flashqla.integrations.slime SCRIPT [ARGS...]`: slime's script, its --qwen-gdn-backend widened."""

import sys

from slime_flashqla.integrations.slime.launch import main

sys.exit(main())
