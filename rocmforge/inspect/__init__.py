"""Pure parsers of what built images contain: ldd output, rocminfo output, GPU architectures in binaries."""
