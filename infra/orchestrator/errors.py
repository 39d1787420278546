"""How a cycle step, or a command the orchestrator runs, says it could not do its work."""


class StepFailed(RuntimeError):
    """A step could not do its work: what went wrong, and an exit code where a command's answer says why."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code
