"""Evaluation harness for conceptgraph: datasets, protocols, metrics, baselines, reports.

Run as ``python -m benchmarks run ...`` / ``python -m benchmarks report ...``.
"""
