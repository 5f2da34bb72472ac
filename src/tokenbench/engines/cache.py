"""Where the embedded engines keep what they make: the models and logs (``cache_dir``) and the built engines,
slow to make and shared by every model cache (``tools_dir``). Each moves with its variable."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

CACHE_ENV = "TOKENBENCH_CACHE"
TOOLS_ENV = "TOKENBENCH_TOOLS"


def cache_dir() -> Path:
    """Models and logs: ``$TOKENBENCH_CACHE``, else the user cache directory."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path(platformdirs.user_cache_dir("tokenbench"))


def tools_dir() -> Path:
    """Built engines (llama.cpp's tools, vLLM's environment), slow to make and shared by every model cache:
    ``$TOKENBENCH_TOOLS``, else the user cache directory."""
    env = os.environ.get(TOOLS_ENV)
    return Path(env) if env else Path(platformdirs.user_cache_dir("tokenbench"))
