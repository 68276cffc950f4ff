"""docker/selfcheck.py: the start-up report, with the image's note read from its image.toml."""

from __future__ import annotations

from helpers.repo_modules import ROOT, load

SELFCHECK = load("docker/selfcheck.py", "slime_flashqla_selfcheck")
REPORT = {
    "gpus": [],
    "torch_cuda": None,
    "torch": "2.8.0",
    "driver": None,
    "auto": {"backend": "torch", "reason": "no GPU"},
    "flashqla": {"ok": False, "reason": "no GPU", "support": "SM121: cannot be imported"},
    "warnings": ["w"],
}


def test_the_gb10_image_prints_its_note_with_what_flashqla_runs():
    note = SELFCHECK.image_note("gb10")
    lines = SELFCHECK.summary_lines(REPORT, "gb10", note)
    assert lines[3] == (
        "[slime-flashqla] GB10 image: train and run with --qwen-gdn-backend fla; FlashQLA support: "
        "SM121: cannot be imported (flash-qla is installed only with --build-arg INSTALL_FLASHQLA=1)"
    )
    assert lines[-1] == "[slime-flashqla] WARNING: w"


def test_an_image_without_a_note_prints_none():
    assert SELFCHECK.image_note("default") is None
    assert SELFCHECK.image_note("unknown") is None
    lines = SELFCHECK.summary_lines(REPORT, "default", SELFCHECK.image_note("default"))
    assert len(lines) == 4 and lines[0].startswith("[slime-flashqla] image default: torch 2.8.0 (CUDA CPU build)")


def test_it_reads_the_image_folders_beside_it():
    assert SELFCHECK.IMAGES_DIR == ROOT / "docker" / "images"
