"""Stage 2, resolve: what the matrix leaves open, pinned into matrix.lock (apt in real base containers,
pip and git on the host), and the bases the pins are read from."""
