"""The @triton.jit kernels; importing a module here imports triton and decorates its kernels.

The host modules one level up import these only on their first call, so TRITON_INTERPRET
must be set before that first call to take effect.
"""
