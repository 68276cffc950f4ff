"""Benchmarks behind `slime-flashqla bench`: each module has `add_arguments(parser)` and `main(args)`."""
