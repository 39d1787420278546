"""`[weights]`: how a registered version's served weights are stored and shipped (registry/shipping.py)."""
