"""The five-hour cycle: steps keyed by cycle id (steps.py), the cadence (cadence.py), the Dagster definitions
(definitions.py, imports Dagster), replay jobs (replay.py) and the `rtrl demo` loop (demo.py)."""
