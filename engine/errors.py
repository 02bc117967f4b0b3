"""Errors the engine raises at submission, before any device work."""


class RequestRejected(ValueError):
    """The request can never be served as given; the message says why and what to change."""


class PromptTooLongError(RequestRejected):
    def __init__(self, num_tokens: int, limit: int, what: str = "max_model_len"):
        self.num_tokens, self.limit = num_tokens, limit
        super().__init__(f"prompt has {num_tokens} tokens but the limit is {limit} ({what}); "
                         f"shorten the input by at least {num_tokens - limit + 1} tokens")


class EngineDeadError(RuntimeError):
    """The engine loop stopped (shutdown or a fatal error)."""


class ImageTooLargeError(RequestRejected):
    """One image can never be served under the current settings (refused before device work)."""

    def __init__(self, image: str, num_tokens: int, limit: int, setting: str, fix: str):
        self.image, self.num_tokens, self.limit, self.setting = image, num_tokens, limit, setting
        super().__init__(f"{image} needs {num_tokens} tokens (its placeholders plus its start and end "
                         f"separators) but the limit is {limit} ({setting}); {fix}")
