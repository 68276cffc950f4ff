"""`python -m slime_flashqla.integrations.slime SCRIPT [ARGS...]`: run slime's SCRIPT (train.py) as python would.

slime parses its arguments in the driver process, where `--qwen-gdn-backend` offers fla and
flashqla only. The launcher widens that one argument's choices to this package's backends
(`slime.utils.arguments` is patched as it imports) and then runs the script with runpy, with
sys.argv and sys.path as `python SCRIPT ARGS...` sets them (the script's folder in place of the
working directory). Models are built in slime's Ray actors, where
`--spec slime_flashqla.integrations.slime ...` installs the integration.
"""

from __future__ import annotations

import logging
import os
import runpy
import sys

from slime_flashqla.integrations.slime.install import SWITCH_ENV, enabled
from slime_flashqla.integrations.slime.patches import PatchOnImport, PatchSet

ARGUMENTS_MODULE = "slime.utils.arguments"
USAGE = "usage: python -m slime_flashqla.integrations.slime SCRIPT [ARGS...]   (SCRIPT: slime's train.py, or yours)"
HELP = f"""{USAGE}

Runs SCRIPT as `python SCRIPT ARGS...` would, with slime's --qwen-gdn-backend widened to
auto, flashqla, fla and torch (slime's parser offers fla and flashqla). The model is built in
slime's actors: give them `--spec slime_flashqla.integrations.slime get_qwen3_next_spec` (or
get_qwen3_5_spec). $SLIME_FLASHQLA_SLIME=0 runs SCRIPT with slime's own parser and turns the
integration off; $SLIME_FLASHQLA_GDN_SPLIT=0 keeps slime's own GDN Attention wrapper.
docs/en/slime.md has the details."""
logger = logging.getLogger("slime_flashqla.integrations.slime")


def widen_slime_arguments(patches: PatchSet, module) -> None:
    """slime's argument provider, then `--qwen-gdn-backend` widened to auto, flashqla, fla, torch."""
    from slime_flashqla.args import widen_gdn_backend_argument

    provider_factory = module.get_slime_extra_args_provider

    def get_slime_extra_args_provider(*args, **kwargs):
        add_slime_arguments = provider_factory(*args, **kwargs)

        def add_arguments(parser):
            parser = add_slime_arguments(parser) or parser
            if not widen_gdn_backend_argument(parser):
                logger.warning("slime-flashqla: this slime has no --qwen-gdn-backend; its parser is left as it is")
            return parser

        return add_arguments

    patches.set(module, "get_slime_extra_args_provider", get_slime_extra_args_provider)


def main(argv: list[str] | None = None) -> int:
    """Run SCRIPT with ARGS as `python SCRIPT ARGS` would, slime's parser widened unless $SLIME_FLASHQLA_SLIME=0."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(HELP)
        return 0
    if not argv or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    script = argv[0]
    if not os.path.isfile(script):
        print(f"slime-flashqla: no such script: {script}", file=sys.stderr)
        return 2
    try:
        on = enabled()
    except ValueError as error:
        print(f"slime-flashqla: {error}", file=sys.stderr)
        return 2
    if on:
        patches = PatchSet()
        PatchOnImport({ARGUMENTS_MODULE: lambda module: widen_slime_arguments(patches, module)}).activate()
    else:
        logger.info("slime-flashqla: $%s=0, so %s runs with slime's own arguments", SWITCH_ENV, script)
    sys.argv = [script, *argv[1:]]
    # `python SCRIPT` puts the script's folder (symbolic links resolved) first on sys.path, in place of
    # the working directory that `python -m` put there: a stray module in the job's directory must not shadow.
    folder = os.path.dirname(os.path.realpath(script))
    if sys.path:
        sys.path[0] = folder
    else:
        sys.path.insert(0, folder)
    runpy.run_path(script, run_name="__main__")
    return 0
