"""Wiring: the `rtrl` CLI, configuration, the embedded local stack, set-up and test scripts."""
