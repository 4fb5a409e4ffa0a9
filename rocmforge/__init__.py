"""rocmforge: reproducible, verified ROCm LLM container images from one version-locked matrix."""

__version__ = "0.1.0"
