"""What this node has: its GPUs and NVIDIA driver, the installed package versions, TileLang's CUDA compiler.

The ground floor beside `workload/` and `files/`: it imports nothing of this package, so the
doctor report, the kernel cache's stack, the preload's record and the backends all read the
node through it, each fact asked one way.

- `gpus`: the visible CUDA devices (one loop) and the driver;
- `packages`: whether a kernel package is installed and which version (one lookup);
- `cuda_toolchain`: the nvcc TileLang compiles with, found by TileLang's own rule.
"""
