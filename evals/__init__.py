"""CursorBench-style evaluation gate and registry promotion. Built in issue 6; see DESIGN.md §6."""
