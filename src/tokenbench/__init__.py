"""tokenbench: measure, guard, predict and compare LLM serving stacks."""

__version__ = "0.1.0"
