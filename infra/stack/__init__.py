"""The embedded local stack: `rtrl up`, `rtrl status`, `rtrl down`."""

from infra.stack.process import StackError

__all__ = ["StackError"]
