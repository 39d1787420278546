"""Benchmarks behind `rtrl bench ...`: each builds what it measures on free local ports and prints JSON."""
