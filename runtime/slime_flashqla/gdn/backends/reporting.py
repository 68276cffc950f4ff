"""`ReportHooks`: what `doctor` asks a GDN backend beyond its availability (fields, rows, warnings, notes)."""

from __future__ import annotations


class ReportHooks:
    """doctor's hooks of one backend; each answers nothing by default."""

    name: str  # the kernel contract's (contract.py)
    label: str

    def report(self) -> dict:
        """doctor's JSON fields of this backend beyond its availability row (by default none)."""
        return {}

    def report_rows(self, report: dict) -> list[tuple[str, str]]:
        """doctor's table rows of those fields."""
        return []

    def known_problems(self, report: dict) -> list[str]:
        """doctor's warnings: known-bad combinations (an upstream bug's versions) seen in the report."""
        return []

    def report_notes(self, report: dict) -> list[str]:
        """doctor's notes: facts of this environment worth knowing that ask nothing of the user."""
        return []

    def requirement_problem(self, report: dict) -> str | None:
        """Why `doctor --require` of this backend fails on the report (by default: it is unusable), or None."""
        info = report["backends"][self.name]
        return None if info["available"] else f"{self.label} is not usable: {info['reason']}"
