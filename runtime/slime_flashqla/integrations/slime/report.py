"""The doctor's slime section: where slime's source is, whether the integration is on, what it would replace.

`slime-flashqla doctor` runs in its own process, where nothing of slime is running: it reports what
`install()` would do, and how to see what a live slime process did. It imports nothing of slime.
Two places are told apart: $SLIME_SOURCE, where the `--spec` functions import slime from, and the
slime this process would import by itself, the one `install()` alone patches.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

LIVE_CHECK = (
    "in a slime actor: the log line 'slime-flashqla slime integration installed in pid N', "
    "slime_flashqla.integrations.slime.active() (None when not installed), or "
    "slime_plugins.models.qwen3_next.__slime_flashqla_replaced__ (slime's originals by name)"
)


def _module_file(root, module: str):
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _importable_slime() -> str | None:
    """The checkout `import slime_plugins` would load in this process, or None."""
    spec = importlib.util.find_spec("slime_plugins")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))).resolve().parent)


def slime_report() -> dict:
    """The slime section of the doctor report, as JSON-ready data."""
    from slime_flashqla.comm_guard.policy import ENV_VAR, resolve_policy
    from slime_flashqla.integrations.slime import gdn
    from slime_flashqla.integrations.slime.install import PLAN, SWITCH_ENV, active, enabled
    from slime_flashqla.integrations.slime.source import SOURCE_ENV, SlimeSourceError, slime_source

    report: dict = {"source": None, "source_from": None, "source_problem": None}
    try:
        root = slime_source()
    except SlimeSourceError as error:
        root, report["source_problem"] = None, str(error)
    if root is not None:
        report["source"] = str(root)
        report["source_from"] = f"${SOURCE_ENV}" if os.environ.get(SOURCE_ENV) else "importable slime_plugins"
    elif report["source_problem"] is None:
        report["source_problem"] = f"not found: set ${SOURCE_ENV} to a slime checkout, or put slime on PYTHONPATH"
    report["importable_from"] = _importable_slime()
    switched_on: bool | None = None  # None: a value install() refuses
    try:
        switched_on = enabled()
        report["switch"] = f"on (${SWITCH_ENV} unset or 1)" if switched_on else f"off (${SWITCH_ENV}=0)"
    except ValueError as error:
        report["switch"] = f"invalid: {error}"
    try:
        report["gdn_split"] = gdn.split_summary()
    except ValueError as error:
        report["gdn_split"] = f"invalid: {error}"
    try:
        report["policy"] = resolve_policy(None)
    except ValueError as error:
        report["policy"] = f"invalid: {error}"
    report["policy_from"] = f"${ENV_VAR}" if os.environ.get(ENV_VAR) else "default"
    found = {module: bool(root and _module_file(root, module)) for module in PLAN}
    report["switched_off"] = switched_on is False  # install() then replaces nothing
    plan = {} if report["switched_off"] else PLAN
    report["would_replace"] = {module: {"change": change, "found": found[module]} for module, change in plan.items()}
    here = active()
    report["active_here"] = here.describe() if here else None
    report["live_check"] = LIVE_CHECK
    return report


def slime_rows(section: dict) -> list[tuple[str, str]]:
    """The slime section as the doctor table's (item, value) rows."""
    source = f"{section['source']} (from {section['source_from']})" if section["source"] else section["source_problem"]
    importable = section["importable_from"]
    rows = [
        ("slime source", source),
        (
            "slime importable here",
            f"yes, from {importable}"
            if importable
            else "no: install() alone patches slime where this process imports it from, so put slime on "
            "PYTHONPATH (the --spec functions import it from $SLIME_SOURCE)",
        ),
        ("slime integration", section["switch"]),
        ("slime GDN split", section["gdn_split"]),
        ("slime comm check policy", f"{section['policy']} ({section['policy_from']})"),
    ]
    if section["source"] and section.get("switched_off"):
        rows.append(("slime replacements", "none (switched off)"))
    elif section["source"]:
        for module, plan in section["would_replace"].items():
            rows.append((f"slime {module}", plan["change"] + ("" if plan["found"] else " (not in this slime)")))
    here = section["active_here"] or f"not installed in this process; to check {section['live_check']}"
    rows.append(("slime integration here", here))
    return rows
