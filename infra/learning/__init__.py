"""The learning curve (`rtrl bench learning`): the loop run for many cycles in one process, every promoted champion
scored against v0 on fixed simulated users, over several seeds (docs/learning.md)."""
