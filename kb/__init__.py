"""kb: evidence-backed knowledge about which LLM is good at which kind of task."""

__version__ = "0.1.0"
