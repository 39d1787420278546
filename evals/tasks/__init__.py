"""Evaluation tasks: the folder format and loader (`spec`), the held-out suite generator (`generate`), grading in
the sandbox (`grade`, with the stdlib `runner`) and the flaky-task check (`flaky`). See `spec` for the format."""

from evals.tasks.spec import Task, TaskError, TaskSpec, load_suite, load_task

__all__ = ["Task", "TaskError", "TaskSpec", "load_suite", "load_task"]
