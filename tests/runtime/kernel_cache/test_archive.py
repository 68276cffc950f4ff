"""Kernel cache archives: a round trip through real files, refusal of another stack, damaged and unsafe archives.

The caches are laid out and written as TileLang 0.1.15 and Triton 3.6 write them
(helpers/kernel_cache_files.py); the stack checked against is this machine's, read the
way `import` reads it.  The concurrent-process test is in tests/runtime/cli/test_cache_cli.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from helpers.kernel_cache_files import (
    files_under,
    make_caches,
    rewrite,
    temp_leftovers,
    tilelang_entry_problems,
    triton_group_problems,
)
from slime_flashqla.kernel_cache.archive import export_archive, import_archive
from slime_flashqla.kernel_cache.format import FORMAT, MANIFEST_NAME, ArchiveError
from slime_flashqla.kernel_cache.manifest import read_manifest
from slime_flashqla.kernel_cache.stack import StackMismatch, current_stack, with_gpu_arch


@pytest.fixture(scope="module")
def here():
    return current_stack()


@pytest.fixture
def caches(tmp_path):
    tilelang, triton = make_caches(tmp_path / "source")
    return {"tilelang": tilelang, "triton": triton}


def exported(caches, tmp_path, stack=None, name="kernels.tar") -> Path:
    path = tmp_path / name
    export_archive(path, caches, stack=stack)
    return path


def other_arch(here) -> str:
    return "sm_100" if here.gpu_arch != "sm_100" else "sm_90"


def exported_files(root: Path) -> dict[str, bytes]:
    return {
        k: v
        for k, v in files_under(root).items()
        if not k.endswith(".lock") and ".staging" not in k and "tmp.pid_" not in k
    }


def test_round_trip_restores_every_file(caches, tmp_path, here):
    before = {cache: exported_files(root) for cache, root in caches.items()}
    path = exported(caches, tmp_path)
    for root in caches.values():
        shutil.rmtree(root)
    result = import_archive(path, caches)
    after = {cache: exported_files(root) for cache, root in caches.items()}
    assert after == before  # same bytes, Triton's group files included: same directory, same absolute paths
    assert result.published == sum(len(files) for files in before.values()) and result.present == 0
    assert result.groups_rewritten == 0
    assert tilelang_entry_problems(caches["tilelang"]) == [] and triton_group_problems(caches["triton"]) == []
    assert temp_leftovers(*caches.values()) == []


def test_manifest_names_the_stack_the_configurations_and_every_file(caches, tmp_path, here):
    path = exported(caches, tmp_path)
    manifest = read_manifest(path)
    assert manifest["format"] == FORMAT
    assert manifest["stack"] == here.as_dict()
    for name in ("torch", "torch.cuda", "triton", "tilelang", "flash-qla", "fla-core", "python", "machine"):
        assert name in manifest["stack"]["versions"]
    assert manifest["created"].endswith("+00:00")
    tasks = sorted(c["task"] for c in manifest["warmup_configurations"])
    assert tasks == ["flashqla-hk16-hv32-varlen-bfloat16", "flashqla-hk2-hv8-varlen-bfloat16"]
    with tarfile.open(path) as tar:
        names = tar.getnames()
    assert names[0] == MANIFEST_NAME and sorted(names[1:]) == sorted(manifest["files"])
    # Locks and what crashed or running writers leave are not kernels.
    assert not [n for n in names if n.endswith(".lock") or ".staging" in n or "tmp.pid_" in n or ".tmp" in n]
    for name, record in manifest["files"].items():
        cache, rel = name.split("/", 1)
        assert record["size"] == (caches[cache] / rel).stat().st_size
    assert manifest["caches"]["tilelang"]["files"] + manifest["caches"]["triton"]["files"] == len(manifest["files"])
    assert list(tmp_path.glob(".kernels.tar.*")) == []  # the export's temp file is gone


def test_import_elsewhere_points_triton_groups_at_the_new_cache(caches, tmp_path):
    path = exported(caches, tmp_path)
    elsewhere = {"tilelang": tmp_path / "other" / "tl", "triton": tmp_path / "other" / "tr"}
    result = import_archive(path, elsewhere)
    assert result.groups_rewritten == 3
    assert triton_group_problems(elsewhere["triton"]) == []  # every child path is in the new cache and exists
    before, after = exported_files(caches["triton"]), exported_files(elsewhere["triton"])
    assert {k: v for k, v in after.items() if "__grp__" not in k} == {
        k: v for k, v in before.items() if "__grp__" not in k
    }
    assert exported_files(elsewhere["tilelang"]) == exported_files(caches["tilelang"])


def test_triton_itself_loads_the_imported_groups(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from triton.runtime.cache import FileCacheManager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "made"))
    manager = FileCacheManager("somekey")
    group = {name: manager.put(b"binary " + name.encode(), name) for name in ("k.cubin", "k.ptx", "k.json")}
    manager.put_group("k.json", group)
    (tmp_path / "tl").mkdir()
    path = tmp_path / "t.tar"
    export_archive(path, {"tilelang": tmp_path / "tl", "triton": tmp_path / "made"})
    import_archive(path, {"tilelang": tmp_path / "tl2", "triton": tmp_path / "used"})
    shutil.rmtree(tmp_path / "made")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "used"))
    loaded = FileCacheManager("somekey").get_group("k.json")
    assert sorted(loaded) == ["k.cubin", "k.json", "k.ptx"]
    assert all(Path(p).read_bytes() == b"binary " + name.encode() for name, p in loaded.items())


def test_reimport_is_idempotent_and_keeps_what_the_cache_has(caches, tmp_path):
    path = exported(caches, tmp_path)
    target = {"tilelang": tmp_path / "t" / "tl", "triton": tmp_path / "t" / "tr"}
    first = import_archive(path, target)
    snapshot = {cache: files_under(root) for cache, root in target.items()}
    second = import_archive(path, target)
    assert second.published == 0 and second.present == first.published
    assert {cache: files_under(root) for cache, root in target.items()} == snapshot


def test_refuses_another_gpu_architecture_before_writing(caches, tmp_path, here):
    path = exported(caches, tmp_path, stack=replace(here, gpu_arch=other_arch(here), gpu_name="NVIDIA H200"))
    target = {"tilelang": tmp_path / "t" / "tl", "triton": tmp_path / "t" / "tr"}
    with pytest.raises(StackMismatch) as refused:
        import_archive(path, target)
    message = str(refused.value)
    assert f"gpu_arch {other_arch(here)} (archive) vs {here.gpu_arch} (here)" in message
    assert "\n" not in message and "Nothing was imported" in message
    assert not (tmp_path / "t").exists()


def test_lists_every_mismatching_field_in_one_line(caches, tmp_path, here):
    versions = {**here.versions, "tilelang": "0.0.1+other", "torch.cuda": "11.0"}
    path = exported(caches, tmp_path, stack=replace(here, gpu_arch=other_arch(here), versions=versions))
    with pytest.raises(StackMismatch) as refused:
        import_archive(path, {"tilelang": tmp_path / "tl", "triton": tmp_path / "tr"})
    message = str(refused.value)
    assert f"tilelang 0.0.1+other (archive) vs {here.versions['tilelang'] or 'none'} (here)" in message
    assert f"torch.cuda 11.0 (archive) vs {here.versions['torch.cuda'] or 'none'} (here)" in message
    assert "gpu_arch" in message and message.count(" (archive) vs ") == 3


def test_force_imports_another_stack_with_one_warning(caches, tmp_path, here):
    versions = {**here.versions, "tilelang": "0.0.1+other"}
    path = exported(caches, tmp_path, stack=replace(here, versions=versions))
    warnings = []
    result = import_archive(
        path, {"tilelang": tmp_path / "tl", "triton": tmp_path / "tr"}, force=True, warn=warnings.append
    )
    assert len(warnings) == 1 and warnings[0].startswith("WARNING: --force") and "tilelang 0.0.1+other" in warnings[0]
    assert result.published > 0 and result.forced_mismatches


def test_gpu_arch_option_is_checked_like_a_visible_gpu(caches, tmp_path, here):
    if here.gpu_arch != "none":
        with pytest.raises(ArchiveError, match="contradicts this machine's GPU"):
            with_gpu_arch(here, other_arch(here))
        return
    path = exported(caches, tmp_path, stack=replace(here, gpu_arch="sm_90", gpu_name="NVIDIA H200"))
    target = {"tilelang": tmp_path / "tl", "triton": tmp_path / "tr"}
    with pytest.raises(StackMismatch, match=r"gpu_arch sm_90 \(archive\) vs sm_121 \(here\)"):
        import_archive(path, target, gpu_arch="sm_121")
    with pytest.raises(ArchiveError, match="expected a compute capability"):
        import_archive(path, target, gpu_arch="90")
    assert import_archive(path, target, gpu_arch="sm_90").published > 0  # an image build: no GPU visible


def test_corrupted_member_is_refused_and_nothing_published(caches, tmp_path):
    def flip_one_byte(manifest, members):
        info, data = next((i, d) for i, d in members if i.name.endswith("executable.so"))
        members[members.index((info, data))] = (info, bytes([data[0] ^ 1]) + data[1:])

    path = rewrite(exported(caches, tmp_path), tmp_path / "bad.tar", flip_one_byte)
    target = {"tilelang": tmp_path / "t" / "tl", "triton": tmp_path / "t" / "tr"}
    with pytest.raises(ArchiveError, match="fails its sha256 check"):
        import_archive(path, target)
    left = [k for root in target.values() for k in files_under(root)]
    assert all(k.endswith("cache-import.lock") for k in left), left
    assert temp_leftovers(*target.values()) == []


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("tilelang/../../evil", tarfile.REGTYPE),
        ("/tmp/slime-flashqla-evil", tarfile.REGTYPE),
        ("triton/KEY/../../../evil", tarfile.REGTYPE),
        ("elsewhere/evil", tarfile.REGTYPE),
        ("tilelang/link", tarfile.SYMTYPE),
        ("triton/hard", tarfile.LNKTYPE),
    ],
)
def test_unsafe_member_is_refused_before_anything_is_written(caches, tmp_path, name, kind):
    def add_member(manifest, members):
        info = tarfile.TarInfo(name)
        info.type = kind
        # Links whose targets stay inside: tarfile's data filter lets them through, the importer must not.
        info.linkname = {tarfile.SYMTYPE: "x.so", tarfile.LNKTYPE: "triton/KEY000/kernel_0.cubin"}.get(kind, "")
        data = b"evil" if kind == tarfile.REGTYPE else b""
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        members.append((info, data))

    path = rewrite(exported(caches, tmp_path), tmp_path / "evil.tar", add_member)
    target = {"tilelang": tmp_path / "deep" / "a" / "tl", "triton": tmp_path / "deep" / "a" / "tr"}
    with pytest.raises(ArchiveError, match="refusing member"):
        import_archive(path, target)
    assert not (tmp_path / "deep").exists()
    assert not Path("/tmp/slime-flashqla-evil").exists() and not (tmp_path / "evil").exists()


def test_member_missing_from_the_manifest_or_the_archive_is_refused(caches, tmp_path):
    def unlisted(manifest, members):
        del manifest["files"][members[0][0].name]

    def dropped(manifest, members):
        members.pop()

    target = {"tilelang": tmp_path / "t" / "tl", "triton": tmp_path / "t" / "tr"}
    source = exported(caches, tmp_path)
    with pytest.raises(ArchiveError, match="not listed in the manifest"):
        import_archive(rewrite(source, tmp_path / "a.tar", unlisted), target)
    with pytest.raises(ArchiveError, match="incomplete, 1 file"):
        import_archive(rewrite(source, tmp_path / "b.tar", dropped), target)
    assert not (tmp_path / "t").exists()


def test_files_that_are_not_archives_are_refused(tmp_path):
    (tmp_path / "text.tar").write_text("not a tar\n" * 100)
    with tarfile.open(tmp_path / "plain.tar", "w") as tar:
        tar.add(__file__, arcname="tilelang/x.py")
    with pytest.raises(ArchiveError, match="no such file"):
        read_manifest(tmp_path / "missing.tar")
    with pytest.raises(ArchiveError, match="not a tar archive"):
        read_manifest(tmp_path / "text.tar")
    with pytest.raises(ArchiveError, match="not a slime-flashqla kernel cache archive"):
        read_manifest(tmp_path / "plain.tar")


def test_truncated_archive_is_refused(caches, tmp_path):
    path = exported(caches, tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArchiveError, match=r"damaged|incomplete|sha256"):
        import_archive(path, {"tilelang": tmp_path / "tl", "triton": tmp_path / "tr"})


def test_compressed_archive_round_trip(caches, tmp_path):
    path = exported(caches, tmp_path, name="kernels.tar.gz")
    with open(path, "rb") as handle:
        assert handle.read(2) == b"\x1f\x8b"
    target = {"tilelang": tmp_path / "tl", "triton": tmp_path / "tr"}
    import_archive(path, target)
    assert exported_files(target["tilelang"]) == exported_files(caches["tilelang"])


def test_export_of_an_empty_cache_fails_and_keeps_an_existing_archive(tmp_path):
    (tmp_path / "old.tar").write_bytes(b"previous archive")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArchiveError, match="nothing to export"):
        export_archive(
            tmp_path / "old.tar", {"tilelang": tmp_path / "empty", "triton": tmp_path / "absent"}, replace=True
        )
    assert (tmp_path / "old.tar").read_bytes() == b"previous archive"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "old.tar"]


def test_triton_cache_is_optional(caches, tmp_path):
    path = tmp_path / "tl-only.tar"
    manifest = export_archive(path, {"tilelang": caches["tilelang"], "triton": None})
    assert list(manifest["caches"]) == ["tilelang"]
    result = import_archive(path, {"tilelang": tmp_path / "tl", "triton": None})
    assert result.published == manifest["caches"]["tilelang"]["files"]


def test_triton_group_files_are_published_after_the_files_they_name(caches, tmp_path, monkeypatch):
    path = exported(caches, tmp_path)
    published = []
    real_replace = os.replace

    def recording_replace(source, target):
        real_replace(source, target)
        published.append(Path(target))

    monkeypatch.setattr(os, "replace", recording_replace)
    import_archive(path, {"tilelang": tmp_path / "tl", "triton": tmp_path / "tr"})
    groups = [p for p in published if p.name.startswith("__grp__")]
    assert len(groups) == 3
    for group in groups:
        children = [Path(c) for c in json.loads(group.read_text())["child_paths"].values()]
        assert all(published.index(child) < published.index(group) for child in children)


def test_an_archive_written_into_the_cache_is_not_exported_into_the_next(caches, tmp_path):
    inside = caches["tilelang"] / "kernels.tar"
    first = export_archive(inside, caches)
    second = export_archive(inside, caches, replace=True)
    assert "tilelang/kernels.tar" not in second["files"] and second["files"] == first["files"]


@pytest.mark.parametrize("older", ["first.tar", "first.tar.gz"])
def test_an_older_archive_in_the_cache_is_not_exported(caches, tmp_path, older):
    first = export_archive(caches["tilelang"] / older, caches)
    second = export_archive(caches["tilelang"] / "second.tar", caches)
    assert f"tilelang/{older}" not in second["files"] and second["files"] == first["files"]


def test_a_tar_that_is_not_a_kernel_cache_archive_is_still_exported(caches, tmp_path):
    """Only archives this command wrote are left out: a file that merely ends in .tar is the cache's own."""
    (caches["tilelang"] / "notes.tar").write_bytes(b"not an archive")
    manifest = export_archive(tmp_path / "k.tar", caches)
    assert "tilelang/notes.tar" in manifest["files"]


@pytest.mark.parametrize("layout", ["same", "symlink", "nested"])
def test_one_directory_for_both_caches_is_refused_before_anything_is_read(caches, tmp_path, layout):
    triton = {
        "same": caches["tilelang"],
        "symlink": tmp_path / "alias",
        "nested": caches["tilelang"] / "triton",
    }[layout]
    if layout == "symlink":
        triton.symlink_to(caches["tilelang"])
    if layout == "nested":
        shutil.copytree(caches["triton"], triton)
    with pytest.raises(ArchiveError, match=r"are one directory|is inside") as refused:
        export_archive(tmp_path / "k.tar", {"tilelang": caches["tilelang"], "triton": triton})
    assert "--no-triton" in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "k.tar").exists()
