"""`slime-flashqla cache export|import|info`: move a warmed kernel cache to another machine or image as one tar."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    """Add the `cache` subcommand with its export, import and info actions."""
    parser = subparsers.add_parser(
        "cache", help="export a warmed kernel cache to a tar, import it on another machine or image, show an archive"
    )
    actions = parser.add_subparsers(dest="cache_action", metavar="ACTION")

    export = actions.add_parser(
        "export",
        help="write TileLang's (and Triton's) kernel cache to PATH.tar",
        description="Write the kernel caches to one tar. PATH must be a new file (or, with --force, a regular "
        "file to replace; a symlink to one is written through); a device, FIFO or directory is never replaced. "
        "The archive is written beside PATH and renamed into place, so PATH is whole or untouched, also after "
        "Ctrl-C or SIGTERM.",
    )
    export.add_argument(
        "path", help="archive to write: .tar, or .tar.gz/.tgz, .tar.xz/.txz, .tar.bz2 to compress it that way"
    )
    _add_dirs(export)
    export.add_argument("--no-triton", action="store_true", help="leave Triton's cache out")
    export.add_argument("--force", action="store_true", help="replace PATH if it is an existing archive (a file)")
    export.add_argument(
        "--gpu-arch",
        default=None,
        help="the GPU the kernels are for, e.g. sm_90, where no GPU is visible (the manifest says none otherwise)",
    )
    export.set_defaults(func=run_export)

    imp = actions.add_parser(
        "import",
        help="check PATH.tar against this machine's stack, then add its kernels",
        description="Check the archive against this machine's stack and every member (type, name, size, sha256) "
        "before anything is written, then add what the caches lack; what they hold is kept. Nothing is written "
        "through a symbolic link in a cache. Ctrl-C or SIGTERM removes what was staged; the next import removes "
        "what a killed one (SIGKILL) left.",
    )
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


def _check_named_folders(args) -> None:
    """Refuse a cache folder named on the command line that does not exist (a typo), before anything is read."""
    from pathlib import Path

    from slime_flashqla.errors import UserError

    named = {"--tilelang-dir": args.tilelang_dir, "--triton-dir": None if args.no_triton else args.triton_dir}
    for option, folder in named.items():
        if folder is None:
            continue
        path = Path(folder).expanduser()
        if not path.exists():
            raise UserError(f"{option} {folder}: the folder does not exist")
        if not path.is_dir():
            raise UserError(f"{option} {folder}: not a folder")


def _gpu(stack: dict) -> str:
    from slime_flashqla.kernel_cache.format import shown

    if stack["gpu_arch"] == "none":
        return "no GPU visible (gpu_arch none: an import on a GPU refuses it; --gpu-arch sm_NN names the GPU)"
    return f"{shown(stack['gpu_arch'])} ({shown(stack.get('gpu_name') or 'unknown')})"


def run_export(args) -> int:
    """Write the archive and say what is in it."""
    from slime_flashqla.files.output_paths import check_output_path
    from slime_flashqla.kernel_cache.archive import check_cache_dirs, export_archive
    from slime_flashqla.kernel_cache.format import ARCHIVE_SUFFIXES
    from slime_flashqla.kernel_cache.stack import current_stack, with_gpu_arch

    # The output path and the folders first, before anything is read or torch is imported.
    written = check_output_path(args.path, what="", suffixes=ARCHIVE_SUFFIXES)
    _check_named_folders(args)
    cache_dirs = _cache_dirs(args, triton=not args.no_triton)
    check_cache_dirs(cache_dirs)
    stack = current_stack()
    if args.gpu_arch:
        stack = with_gpu_arch(stack, args.gpu_arch)
    manifest = export_archive(args.path, cache_dirs, stack=stack, replace=args.force)
    parts = ", ".join(
        f"{cache} {info['files']} file(s) ({info['bytes'] / 2**20:.1f} MiB)"
        for cache, info in manifest["caches"].items()
    )
    print(f"wrote {written}: {parts}; {_gpu(manifest['stack'])}, "
          f"{len(manifest['warmup_configurations'])} warm-up configuration(s)")  # fmt: skip
    return 0


def run_import(args) -> int:
    """Check the archive, import it, and say how many files were new."""
    from slime_flashqla.kernel_cache.archive import import_archive

    result = import_archive(args.path, _cache_dirs(args), gpu_arch=args.gpu_arch, force=args.force)
    into = ", ".join(f"{directory} ({cache})" for cache, directory in result.caches.items())
    rewritten = (
        f", {result.groups_rewritten} Triton group file(s) pointed at this cache" if result.groups_rewritten else ""
    )
    print(
        f"imported {args.path} into {into}: {result.published} file(s) added, {result.present} already there{rewritten}"
    )
    return 0


def manifest_rows(manifest: dict, mismatches: list[str], notes: list[str] = ()) -> list[tuple[str, str]]:
    """The manifest as (item, value) rows, without the per-file list; archive text shown escaped."""
    from slime_flashqla.kernel_cache.format import shown
    from slime_flashqla.kernel_cache.stack import TOOLCHAIN_FIELDS

    stack = manifest["stack"]
    rows = [
        ("format", manifest["format"]),
        ("created", shown(manifest.get("created", "unknown"))),
        ("GPU", _gpu(stack)),
    ]
    rows += [(shown(name), shown(version) if version else "none") for name, version in stack["versions"].items()]
    rows += [(name, shown(stack[name]) if stack.get(name) else "none") for name in TOOLCHAIN_FIELDS if name in stack]
    rows += [
        (
            f"{cache} cache",
            f"{info['files']} file(s), {info['bytes'] / 2**20:.1f} MiB, from {shown(info['source_dir'])}",
        )
        for cache, info in manifest.get("caches", {}).items()
    ]
    configurations = manifest.get("warmup_configurations", [])
    rows.append(("warm-up configurations", ", ".join(shown(c["task"]) for c in configurations) or "none recorded"))
    rows.append(("fits this machine", "yes" if not mismatches else "no: " + "; ".join(mismatches)))
    rows += [("note", note) for note in notes]
    return rows


def run_info(args) -> int:
    """Print the manifest (a table, or JSON) and whether it matches this machine."""
    from slime_flashqla.kernel_cache.manifest import read_manifest, stack_fit
    from slime_flashqla.kernel_cache.stack import current_stack

    manifest = read_manifest(args.path)
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))  # json escapes control characters itself
        return 0
    from slime_flashqla.terminal import print_rows

    mismatches, notes = stack_fit(manifest, current_stack())
    print_rows(f"kernel cache archive {args.path}", manifest_rows(manifest, mismatches, notes))
    return 0
