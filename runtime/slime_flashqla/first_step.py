"""Time to the first GDN layer forward+backward in a fresh process (cold vs warm kernel cache).

`python -m slime_flashqla.first_step --backend flashqla --heads 16/32 --lengths 8192+24576`
starts a new Python process that imports everything, builds a Qwen3-Next GDN layer and
runs one forward+backward; the wall time of that whole process is what a training job
waits before its first step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = """
import sys, torch
from slime_flashqla.layers import Qwen3NextGatedDeltaNet, init_like_checkpoint
from slime_flashqla.models import gdn_layer_config
backend, hk, hv, lengths = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(n) for n in sys.argv[4].split('+')]
layer = Qwen3NextGatedDeltaNet(gdn_layer_config(hk, hv), backend=backend).to('cuda', torch.bfloat16)
init_like_checkpoint(layer)
offsets = [0]
for n in lengths:
    offsets.append(offsets[-1] + n)
x = torch.randn(1, offsets[-1], 2048, device='cuda', dtype=torch.bfloat16, requires_grad=True)
y = layer(x, cu_seqlens=torch.tensor(offsets, dtype=torch.int32, device='cuda'))
y.float().square().mean().backward()
torch.cuda.synchronize()
assert torch.isfinite(x.grad).all()
"""


def time_first_step(backend: str, heads: str, lengths: str) -> float:
    """Seconds from starting a fresh Python process to its first layer forward+backward finishing."""
    hk, hv = heads.split("/")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", CHILD, backend, hk, hv, lengths], check=True)
    return time.perf_counter() - start


def main(argv=None) -> int:
    """Run the measurement and print it as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="flashqla")
    parser.add_argument("--heads", default="16/32")
    parser.add_argument("--lengths", default="8192+24576")
    args = parser.parse_args(argv)
    seconds = time_first_step(args.backend, args.heads, args.lengths)
    print(json.dumps({"backend": args.backend, "heads": args.heads, "lengths": args.lengths, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
