"""The reward job (docs/rewards.md): raw telemetry -> one mature, exactly-once reward row per served request."""
