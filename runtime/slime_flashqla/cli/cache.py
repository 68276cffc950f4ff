"""`slime-flashqla cache export|import|info`: move a warmed kernel cache to another machine or image as one tar."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    """Add the `cache` subcommand with its export, import and info actions."""
    parser = subparsers.add_parser(
        "cache", help="export a warmed kernel cache to a tar, import it on another machine or image, show an archive"
    )
    actions = parser.add_subparsers(dest="cache_action", metavar="ACTION")

    export = actions.add_parser("export", help="write TileLang's (and Triton's) kernel cache to PATH.tar")
    export.add_argument("path", help="archive to write (.tar; .tar.gz or .tar.xz compress)")
    _add_dirs(export)
    export.add_argument("--no-triton", action="store_true", help="leave Triton's cache out")
    export.set_defaults(func=run_export)

    imp = actions.add_parser("import", help="check PATH.tar against this machine's stack, then add its kernels")
    imp.add_argument("path", help="archive written by `slime-flashqla cache export`")
    _add_dirs(imp)
    imp.add_argument(
        "--gpu-arch",
        default=None,
        help="the GPU the kernels will run on, e.g. sm_90, for an import where no GPU is visible (docker build)",
    )
    imp.add_argument("--force", action="store_true", help="import even if the archive was built for another stack")
    imp.set_defaults(func=run_import)

    info = actions.add_parser("info", help="print an archive's manifest and whether it fits this machine")
    info.add_argument("path", help="archive written by `slime-flashqla cache export`")
    info.add_argument("--json", action="store_true", help="print the whole manifest as JSON")
    info.set_defaults(func=run_info)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _add_dirs(parser) -> None:
    parser.add_argument("--tilelang-dir", default=None, help="TileLang cache (default: $TILELANG_CACHE_DIR)")
    parser.add_argument("--triton-dir", default=None, help="Triton cache (default: $TRITON_CACHE_DIR)")


def _cache_dirs(args, triton: bool = True) -> dict:
    from pathlib import Path

    from slime_flashqla.kernels.cache import tilelang_cache_dir, triton_cache_dir

    return {
        "tilelang": Path(args.tilelang_dir).expanduser() if args.tilelang_dir else tilelang_cache_dir(),
        "triton": (Path(args.triton_dir).expanduser() if args.triton_dir else triton_cache_dir()) if triton else None,
    }


def _fail(action: str, error: Exception) -> int:
    print(f"slime-flashqla cache {action}: {error}")
    return 2


def run_export(args) -> int:
    """Write the archive and say what is in it."""
    from slime_flashqla.kernels.archive import ArchiveError, export_archive

    try:
        manifest = export_archive(args.path, _cache_dirs(args, triton=not args.no_triton))
    except (ArchiveError, OSError) as error:
        return _fail("export", error)
    parts = ", ".join(
        f"{cache} {info['files']} file(s) ({info['bytes'] / 2**20:.1f} MiB)"
        for cache, info in manifest["caches"].items()
    )
    stack = manifest["stack"]
    print(
        f"wrote {args.path}: {parts}; {stack['gpu_arch']} ({stack['gpu_name']}), "
        f"{len(manifest['warmup_configurations'])} warm-up configuration(s)"
    )
    return 0


def run_import(args) -> int:
    """Check the archive, import it, and say how many files were new."""
    from slime_flashqla.kernels.archive import ArchiveError, import_archive

    try:
        result = import_archive(args.path, _cache_dirs(args), gpu_arch=args.gpu_arch, force=args.force, warn=print)
    except (ArchiveError, OSError) as error:
        return _fail("import", error)
    into = ", ".join(f"{directory} ({cache})" for cache, directory in result.caches.items())
    rewritten = (
        f", {result.groups_rewritten} Triton group file(s) pointed at this cache" if result.groups_rewritten else ""
    )
    print(
        f"imported {args.path} into {into}: {result.published} file(s) added, {result.present} already there{rewritten}"
    )
    return 0


def manifest_rows(manifest: dict, mismatches: list[str]) -> list[tuple[str, str]]:
    """The manifest as (item, value) rows, without the per-file list."""
    stack = manifest["stack"]
    rows = [
        ("format", manifest["format"]),
        ("created", manifest.get("created", "unknown")),
        ("GPU", f"{stack['gpu_arch']} ({stack.get('gpu_name', 'unknown')})"),
    ]
    rows += [(name, str(version) if version else "none") for name, version in stack["versions"].items()]
    rows += [
        (f"{cache} cache", f"{info['files']} file(s), {info['bytes'] / 2**20:.1f} MiB, from {info['source_dir']}")
        for cache, info in manifest.get("caches", {}).items()
    ]
    configurations = manifest.get("warmup_configurations", [])
    rows.append(("warm-up configurations", ", ".join(c["task"] for c in configurations) or "none recorded"))
    rows.append(("fits this machine", "yes" if not mismatches else "no: " + "; ".join(mismatches)))
    return rows


def run_info(args) -> int:
    """Print the manifest (a table, or JSON) and whether it matches this machine."""
    from slime_flashqla.kernels.archive import ArchiveError, Stack, current_stack, read_manifest, stack_mismatches

    try:
        manifest = read_manifest(args.path)
    except (ArchiveError, OSError) as error:
        return _fail("info", error)
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
        return 0
    from slime_flashqla.cli.render import print_table

    mismatches = stack_mismatches(Stack.from_dict(manifest["stack"]), current_stack())
    print_table(f"kernel cache archive {args.path}", manifest_rows(manifest, mismatches))
    return 0
