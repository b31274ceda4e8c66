"""Benchmarks, family table and lecture probes: shipped so that the app can show them."""
