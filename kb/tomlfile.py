"""Reading the TOML files users write (sweep specs, ladders, checkpoints, canaries)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from kb.errors import ConfigError


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """Parse ``path``; every failure is one ``ConfigError`` naming the file."""
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(what, f"no such file: {path}") from None
    except IsADirectoryError:
        raise ConfigError(what, f"{path} is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(what, f"cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per nested array or table
        raise ConfigError(str(path), "not valid TOML: nested too deep to read") from None
