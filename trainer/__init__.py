"""On-policy policy-gradient trainer (torch + DeepSpeed, Triton kernels); see docs/trainer.md."""
