"""Login credentials: `--auth user:password` (repeatable) or LONGREAD_AUTH=user:password."""
from __future__ import annotations

import os
from typing import Iterable, List, Optional, Tuple

AUTH_ENV = "LONGREAD_AUTH"


class AuthError(ValueError):
    pass


def parse_credential(value: str) -> Tuple[str, str]:
    """"user:password" -> (user, password). The password may itself contain ':'."""
    user, sep, password = value.partition(":")
    if not sep or not user.strip() or not password:
        raise AuthError("--auth expects user:password (both non-empty), e.g. --auth alice:s3cret")
    return user.strip(), password


def collect_auth(flags: Optional[Iterable[str]], environ=None) -> List[Tuple[str, str]]:
    """Credentials from the flags, else from LONGREAD_AUTH (one user:password), else none."""
    environ = os.environ if environ is None else environ
    values = list(flags or [])
    if not values and environ.get(AUTH_ENV):
        values = [environ[AUTH_ENV]]
    return [parse_credential(v) for v in values]
