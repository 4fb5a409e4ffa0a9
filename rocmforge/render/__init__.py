"""Stage 3, render: the lock and the matrix turned into content-hashed plans and the rendered build
contexts (Dockerfile, probes, settings), including the per-arch prune step."""
