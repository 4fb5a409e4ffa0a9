"""Stage 6, release: publish and pull by exact image ID, the registry build cache, and the matrix report."""
