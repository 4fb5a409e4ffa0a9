"""Stage 5, verify: the in-image suites against one image, their parsers, and the manifest and SBOM of
what passed."""
