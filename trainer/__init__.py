"""On-policy policy-gradient trainer (torch + DeepSpeed, Triton kernels). Built in issue 5; see docs/trainer.md."""
