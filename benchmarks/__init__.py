"""Side-by-side benchmarks for amends (issue 6): ``python -m benchmarks [--quick]``.

Every benchmark interleaves the things it compares inside one run and reports medians with
p10/p90, because the machine is shared and noisy. Results print as rich tables and are written to
``docs/benchmarks.md``.
"""
