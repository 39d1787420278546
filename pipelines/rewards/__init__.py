"""The reward job (DESIGN.md §4): raw telemetry -> one mature, exactly-once reward row per served request."""
