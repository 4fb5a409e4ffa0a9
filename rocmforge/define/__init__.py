"""Stage 1, define: matrix.yaml read into a typed, cross-checked Matrix, and the component kinds it holds."""
