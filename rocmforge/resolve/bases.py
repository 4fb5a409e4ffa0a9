"""Base image references and the bootstrap recipe hash (pure); the effectful provider is bootstrap.py."""

from __future__ import annotations

import hashlib
import json

from rocmforge.define.schema import Stack

IMAGE_NAMESPACE = "rocmforge"
BASE_ARG = "ROCMFORGE_BASE"  # the build argument through which a registry base is named in FROM
# Bump when the normalisation in bootstrap.py changes: it is part of every recipe hash.
NORMALISATION_VERSION = 3


def canonical_json(obj: object) -> bytes:
    """obj as compact JSON with sorted keys: the same value always gives the same bytes (so the same
    image ID)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def recipe_hash(stack: Stack) -> str:
    """The sha256 of a bootstrapped stack's recipe (suite, variant, include, snapshot, normalisation): a new
    recipe makes a new base image. Only for a stack whose base is bootstrapped."""
    boot = stack.base.bootstrap
    assert boot is not None
    recipe = {
        "suite": boot.suite,
        "variant": boot.variant,
        "include": sorted(boot.include),
        "normalisation": NORMALISATION_VERSION,
    }
    if boot.snapshot:  # only when set, so existing recipes keep their hashes
        recipe["snapshot"] = True
    return hashlib.sha256(canonical_json(recipe)).hexdigest()


def bootstrap_ref(stack_name: str, stack: Stack) -> str:
    """The local reference of a bootstrapped stack's base: `rocmforge/base-<stack>:recipe-<12 hex of its
    recipe hash>`."""
    return f"{IMAGE_NAMESPACE}/base-{stack_name}:recipe-{recipe_hash(stack)[:12]}"


def registry_ref(stack: Stack, locked_digest: str | None = None) -> tuple[str, bool]:
    """The FROM reference of a registry base (digest from the matrix, else from the lock), and
    whether its digest is resolved."""
    reg = stack.base.registry
    assert reg is not None
    digest = reg.digest or locked_digest
    if digest:
        return f"{reg.image}:{reg.tag}@{digest}", True
    # Deliberately not a valid reference: even a hand-run `docker build` refuses it.
    return f"{reg.image}:{reg.tag}@sha256:UNRESOLVED", False
