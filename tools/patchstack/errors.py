"""The one fatal-error path: expected failures raise ToolError, the CLI prints one message."""


class ToolError(Exception):
    """An expected failure: bad input, a conflict, a refused operation.

    ``exit_code`` lets callers tell conflicts (1) from usage or input errors (2).
    """

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
