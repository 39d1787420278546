"""Registry retention after each cycle's deploy and from `rtrl retention`: the `[retention]` config (config.py) and
the run that gathers what serving and the cycles in flight hold and applies the registry's plan (run.py)."""
