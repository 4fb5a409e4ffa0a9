"""Inspection of built artefacts (GPU architectures in binaries, ...)."""
