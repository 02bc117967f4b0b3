"""Benchmarks: each writes JSON with device, versions, date and command into bench/results/."""
