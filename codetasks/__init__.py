"""Coding tasks shared by the simulator, the bootstrap and the gate: small generated workspaces (`workspace`), the
task generator and its grading (`tasks`), the users' follow-up phrasing (`followups`), and the protocol a policy
answers a task's conversation through (`policy`). It imports nothing of rtrl's but `schemas`."""
