"""The policy registry, neutral ground for every component: MLflow model versions of Hugging Face checkpoints
(`registry.client`) and the compare-and-swap promotion of alias `champion` (`registry.promotion`).
It imports nothing of rtrl's but `schemas`."""
