"""CursorBench-style evaluation gate and registry promotion. Built in issue 6; see docs/gate.md."""
