"""What each flash-qla release runs on each GPU, as read from the release's own dispatch code.

The one home of these facts: runtime.py (the `flashqla` backend's refusals), `doctor`, the image
labels and the docs' tables all come from `RELEASES`. docs/en/gdn_backends.md gives the file and
line in each wheel; tests/env/test_flashqla_wheels.py re-reads the wheels on PyPI against the rows.

FlashQLA picks its kernels when `flash_qla` is imported, from TileLang's compute version of CUDA
device 0 (`tilelang.contrib.nvcc.get_target_compute_version()`), and raises ValueError at import
on any version it does not dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

# The compute capabilities some release dispatches, in the order tables list them.
CAPABILITIES = ((9, 0), (10, 0), (10, 3), (12, 0), (12, 1))


def sm(capability: tuple[int, int]) -> str:
    """'SM90' for (9, 0)."""
    return f"SM{capability[0]}{capability[1]}"


@dataclass(frozen=True)
class Kernels:
    """What one flash-qla release does on one compute capability."""

    importable: bool
    forward: bool
    backward: bool
    # Where the forward runs: it takes float16 q/k/v too (SM12x's forward compiles for bfloat16 only,
    # fla/ops/gated_delta_rule/backends/flash_qla.py in FLA 0.6.0).
    float16: bool = True
    # Why not all of it runs: a phrase that follows "flash-qla X.Y.Z", naming the release's file.
    why: str = ""

    @property
    def cell(self) -> str:
        """The table cell: 'fwd+bwd', 'fwd', 'import only' or 'no import'."""
        if not self.importable:
            return "no import"
        if not self.forward:
            return "import only"
        return "fwd+bwd" if self.backward else "fwd"


TRAINS = Kernels(importable=True, forward=True, backward=True)
NOT_DISPATCHED = Kernels(importable=False, forward=False, backward=False)


@dataclass(frozen=True)
class Release:
    """A range of flash-qla versions, the wheel it was read from, and what it runs per capability."""

    versions: str
    read_from: str
    kernels: dict[tuple[int, int], Kernels] = field(default_factory=dict)

    def on(self, capability: tuple[int, int]) -> Kernels:
        """What this release does on `capability` (one it does not dispatch: chunk/__init__.py's ValueError)."""
        return self.kernels.get(capability, NOT_DISPATCHED)

    def supported(self) -> str:
        """'SM90, SM100, SM103', plus the forward-only capabilities: what refusals say is needed."""
        trains = [sm(c) for c, k in self.kernels.items() if k.backward]
        forward_only = [sm(c) for c, k in self.kernels.items() if k.forward and not k.backward]
        return ", ".join(trains) + (f" ({'/'.join(forward_only)}: forward only)" if forward_only else "")


# Read from the wheels on PyPI; the newest row stands for every later version until one is read.
RELEASES = (
    Release("<0.1.2", "0.1.1", {(9, 0): TRAINS, (10, 0): TRAINS}),
    Release(
        ">=0.1.2,<0.1.3",
        "0.1.2",
        {
            (9, 0): TRAINS,
            (10, 0): TRAINS,
            (12, 0): Kernels(
                importable=True,
                forward=True,
                backward=False,
                float16=False,
                why="has SM120 forward kernels only (chunk/__init__.py sets fused_gdr_bwd = None)",
            ),
        },
    ),
    Release(
        ">=0.1.3",
        "0.1.3",
        {
            (9, 0): TRAINS,
            (10, 0): TRAINS,
            (10, 3): TRAINS,
            (12, 0): Kernels(
                importable=True,
                forward=False,
                backward=False,
                why=(
                    "imports on SM120, but its first forward raises ImportError: cp_preprocess_fwd "
                    "(chunk/cp/preprocess.py) imports aggregate_card_state, which the SM120 branch of "
                    "chunk/__init__.py never defines"
                ),
            ),
            (12, 1): Kernels(
                importable=False,
                forward=False,
                backward=False,
                why=(
                    "raises ValueError at `import flash_qla` on SM121: current_arch() "
                    "(chunk/cp/autocp/launch.py) maps compute versions 9.0, 10.0, 10.3 and 12.0 only"
                ),
            ),
        },
    ),
)
NEWEST = RELEASES[-1]


def _parse(version: str | None) -> Version | None:
    try:
        return Version(version) if version else None
    except InvalidVersion:
        return None


def release_for(version: str | None) -> Release:
    """The row for an installed flash-qla version (None, unparsable or newer than every row: the newest)."""
    parsed = _parse(version)
    if parsed is None:
        return NEWEST
    for release in RELEASES:
        if SpecifierSet(release.versions).contains(parsed, prereleases=True):
            return release
    return NEWEST


def label(version: str | None) -> str:
    """How messages name the release: '0.1.3', or '0.1.4 (as 0.1.3, ...)' past the table's newest."""
    release = release_for(version)
    parsed = _parse(version)
    if parsed is None:
        return release.read_from if version is None else f"{version} (as {release.read_from})"
    if parsed > Version(release.read_from) and release is NEWEST:
        return f"{version} (as {release.read_from}, the newest release the support table was read from)"
    return version


def kernels_on(version: str | None, capability: tuple[int, int]) -> Kernels:
    """What flash-qla `version` does on `capability`."""
    return release_for(version).on(capability)


def support_line(version: str | None) -> str:
    """One line for doctor and the image labels: 'flash-qla 0.1.3: SM90 fwd+bwd, ..., SM121 no import'."""
    release = release_for(version)
    cells = ", ".join(f"{sm(c)} {release.on(c).cell}" for c in CAPABILITIES)
    return f"flash-qla {label(version)}: {cells}"


def support_label(version: str | None) -> str:
    """The images' io.slime-flashqla.flashqla-support label: 'SM90=fwd+bwd,...,SM121=no-import'."""
    release = release_for(version)
    return ",".join(f"{sm(c)}={release.on(c).cell.replace(' ', '-')}" for c in CAPABILITIES)
