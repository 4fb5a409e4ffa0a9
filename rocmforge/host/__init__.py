"""What rocmforge talks to outside itself: the Docker engine (which engine and store, an image's identity,
containers it owns), registries, the Debian mirror and a base's apt sources, pip and git fetches, and
the docker run line for ROCm devices."""
