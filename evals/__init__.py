"""CursorBench-style evaluation gate and registry promotion; see docs/gate.md."""
