"""flash-qla on SM121 (GB10) and SM120, reproduced on another GPU: TileLang made to report their compute version.

    PYTHONPATH=/tmp/site:$PWD/runtime python tools/gpu/flashqla_sm121_probe.py

flash_qla picks its kernels once, at import, from `tilelang.contrib.nvcc.get_target_compute_version()`,
so each case patches that function before `import flash_qla`, in a fresh child process:

- `plain-12.1`: `import flash_qla` as a GB10 would run it (compute version 12.1);
- `route-12.1`: the same, with torch.cuda.get_device_capability reporting (12, 1) too, through this
  package: get_chunk_gated_delta_rule("flashqla") and the backend's kernel(); what it refuses and
  whether flash_qla got imported;
- `plain-12.0`: the SM120 branch (12.0): the import, then the first step of every forward,
  cp_preprocess_fwd on a context without CP (it imports names from the chunk package, then returns).

No kernel is compiled or launched. Prints one JSON line; exits 0 when what ran agrees with the
support table (runtime/slime_flashqla/gdn/backends/flashqla/releases.py) for the installed flash-qla, 1 when
it does not (upstream changed: re-read the wheel and update the table), 2 when no GPU is visible or
flash-qla or TileLang is missing.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
import time

CASES = ("plain-12.1", "route-12.1", "plain-12.0")


def one_line(error: BaseException) -> str:
    """'ValueError: message' on one line."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def report_compute_version(version: str) -> None:
    """Make TileLang's compute-version query (what flash_qla dispatches on) answer `version`."""
    import tilelang.contrib.nvcc

    tilelang.contrib.nvcc.get_target_compute_version = lambda target=None: version


def plain_import(version: str) -> dict:
    """`import flash_qla` with TileLang reporting `version`; on 12.0, also its forward's first step."""
    report_compute_version(version)
    try:
        import flash_qla  # noqa: F401
    except Exception as error:  # the outcome is what this probe reports
        return {"import": one_line(error)}
    outcome = {"import": "ok"}
    if version == "12.0":
        from flash_qla.ops.gated_delta_rule.chunk.cp import FlashQLACPContext, cp_preprocess_fwd

        try:
            # No CP: the function imports the chunk package's names, then returns before any tensor work.
            cp_preprocess_fwd(
                FlashQLACPContext(),
                k=None,
                v=None,
                a=None,
                g=None,
                beta=None,
                initial_state=None,
                state_v_first=False,
                enable_fwd_cp_cache=False,
            )
            outcome["forward_first_step"] = "ok"
        except Exception as error:
            outcome["forward_first_step"] = one_line(error)
    return outcome


def this_package_route() -> dict:
    """get_chunk_gated_delta_rule('flashqla') and kernel() on a node that reports SM121 both ways."""
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    report_compute_version("12.1")
    torch.cuda.get_device_capability = lambda device=None: (12, 1)
    from slime_flashqla.gdn import FlashQLAUnavailableError, get_chunk_gated_delta_rule
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS

    outcome = {"device": device}
    for step, call in (
        ("get_chunk_gated_delta_rule", lambda: get_chunk_gated_delta_rule("flashqla")),
        ("kernel", KERNEL_BACKENDS["flashqla"].kernel),
    ):
        try:
            call()
            outcome[step] = "accepted"
        except FlashQLAUnavailableError as error:
            outcome[step] = "refused: " + " ".join(str(error).split())
        except Exception as error:
            outcome[step] = "raised " + one_line(error)
    outcome["flash_qla_imported"] = "flash_qla" in sys.modules
    return outcome


def run_child(case: str) -> dict:
    """The outcome of one case, in this (fresh) process."""
    if case == "route-12.1":
        return this_package_route()
    return plain_import(case.removeprefix("plain-"))


def agreement(cases: dict, flashqla: str) -> list[str]:
    """Where what ran differs from what the support table says of flash-qla `flashqla`."""
    from slime_flashqla.gdn.backends.flashqla.releases import kernels_on

    sm121, sm120 = kernels_on(flashqla, (12, 1)), kernels_on(flashqla, (12, 0))
    found = []
    if (cases["plain-12.1"].get("import") == "ok") != sm121.importable:
        found.append(f"plain import on 12.1: {cases['plain-12.1']}, table: importable={sm121.importable}")
    if (cases["plain-12.0"].get("import") == "ok") != sm120.importable:
        found.append(f"plain import on 12.0: {cases['plain-12.0']}, table: importable={sm120.importable}")
    elif sm120.importable and (cases["plain-12.0"].get("forward_first_step") == "ok") != sm120.forward:
        found.append(f"forward's first step on 12.0: {cases['plain-12.0']}, table: forward={sm120.forward}")
    route = cases["route-12.1"]
    refused = all(str(route.get(step, "")).startswith("refused") for step in ("get_chunk_gated_delta_rule", "kernel"))
    if refused == sm121.forward or (refused and route.get("flash_qla_imported")):
        found.append(f"this package's route on 12.1: {route}, table: forward={sm121.forward}")
    return found


def gpu_visible() -> bool:
    """Whether torch sees a CUDA GPU here."""
    import torch

    return torch.cuda.is_available()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("CASE " + json.dumps(run_child(args.child)), flush=True)
        return 0
    if not gpu_visible():
        # The cases report the missing driver, not the compute version: a false disagreement.
        print("flashqla_sm121_probe.py needs a CUDA GPU (torch.cuda.is_available() is False): run it on a GPU node",
              file=sys.stderr)  # fmt: skip
        return 2
    versions = {}
    for dist in ("flash-qla", "tilelang", "torch", "apache-tvm-ffi"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    if not (versions["flash-qla"] and versions["tilelang"]):
        print(f"flash-qla and tilelang must be installed (found {versions})", file=sys.stderr)
        return 2
    start = time.perf_counter()
    children = {
        case: subprocess.Popen(
            [sys.executable, __file__, "--child", case], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for case in CASES
    }
    cases = {}
    for case, child in children.items():
        out, err = child.communicate(timeout=300)
        lines = [line for line in out.splitlines() if line.startswith("CASE ")]
        tail = (err.strip().splitlines() or ["no output"])[-1]
        cases[case] = json.loads(lines[-1][5:]) if lines else {"child_failed": f"exit {child.returncode}: {tail}"}
    found = agreement(cases, versions["flash-qla"])
    from slime_flashqla.gdn.backends.flashqla.releases import support_line

    print(
        json.dumps(
            {
                "probe": "flashqla_sm121",
                "versions": versions,
                "cases": cases,
                "table": support_line(versions["flash-qla"]),
                "agrees_with_table": not found,
                "disagreements": found,
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
    )
    return 0 if not found else 1


if __name__ == "__main__":
    raise SystemExit(main())
