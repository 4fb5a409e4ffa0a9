"""Pure parsers of what built images and hosts print or contain: ldd output, rocminfo output, GPU
architectures in binaries (the last through data/probes/archs.py, which also runs inside images)."""
