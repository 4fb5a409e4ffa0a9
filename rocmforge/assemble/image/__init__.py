"""Bit-identical rebuilds: rewrite a built image into a canonical form and load it back.

The classic builder stamps wall-clock time into the image config (`created`, history times,
`container`, `container_config`) and into every file a RUN step writes, and a few files (logs,
caches, apt lists) differ between two runs whatever their times. Normalisation streams `docker
save` of an image (or the engine's own store), rewrites every layer as a canonical tar and the
config as canonical JSON, and `docker load`s the result, so the same Dockerfile on the same base
gives the same image ID on every build, and on every engine (Docker's graph-driver and
containerd stores, podman). A diff names the first thing that still differs.

The canonical layer is what GNU tar writes with `--format=gnu --sort=name --numeric-owner`
(bootstrap.layer_tar): a layer already in that form (the bootstrapped base) comes out byte for
byte identical, so its diff ID never changes.

The rest of rocmforge calls normalise_image, diff_images and describe_difference, and catches
ImageArchiveError (a BuildError, in shared.errors). Below this package: shared.streams (forward-only
byte streams over `docker save` chunks, hashed per member) and host.ocilayout (the OCI image layout
of `docker save` with the containerd image store: index.json), which host.imageid reads too.
The modules, lowest first:
  tarcodec    the tar reader and the GNU tar writer (why not the stdlib's: its docstring)
  layers      which layer entries are dropped or blanked, and the canonical rewrite of one layer
  config      the canonical image config (its history spelled as render.dockerfile reads the steps)
  blobs       layer members known by their first bytes: tars, gzip- or zstd-compressed tars
  archive     the docker-archive format: reading `docker save`, writing what `docker load` takes
  lowerindex  the merged filesystem below a layer (per chain ID, cached on disk)
  lowerrules  a layer's canonical form against what lies below it: one form whichever engine's
              differ wrote it (opaque markers, unchanged copy-ups, whiteout metadata)
  ociload     what the containerd image store loads: an OCI layout with rocmforge's own manifest
  rewrite     one image rewritten: its layers and config, from `docker save` or the store
  normalise   the whole image: from the engine, rewritten, loaded back
  diff        the first difference between two images, in one line
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from rocmforge.shared.errors import ImageArchiveError

# Loaded when first named: a command that only renders, or reads a Dockerfile's history, does not
# pay for the normaliser (and a build loads it while the engine builds: Pipeline.build_image).
_WHERE = {
    "NormalisedImage": "normalise",
    "normalise_image": "normalise",
    "describe_difference": "diff",
    "diff_images": "diff",
}

__all__ = ["ImageArchiveError", *_WHERE]

if TYPE_CHECKING:  # the names __getattr__ loads, as the type checker sees them (nothing is loaded here)
    from rocmforge.assemble.image.diff import describe_difference as describe_difference
    from rocmforge.assemble.image.diff import diff_images as diff_images
    from rocmforge.assemble.image.normalise import NormalisedImage as NormalisedImage
    from rocmforge.assemble.image.normalise import normalise_image as normalise_image


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
