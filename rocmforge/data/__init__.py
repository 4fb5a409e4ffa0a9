"""Not a stage: what the package ships for other places to run. templates/ render the Dockerfiles,
probes/ are copied into every image, suites/ run under pytest against a container of an image
(`build.py test`). rocmforge.shared.packagedata names these folders; nothing in the stages
imports from here."""
