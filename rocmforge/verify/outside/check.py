"""The outside verdict on one image of a plan target: its files from its layers, its pinned base's
files, what its sources say, compared (account). Nothing here starts a process in the image."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rocmforge.host import registrybase
from rocmforge.shared.errors import BuildError
from rocmforge.verify.outside import account, aptsrc, declared, expected, imagefs
from rocmforge.verify.outside import rules as generated_rules

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine
    from rocmforge.render.plan import BuildPlan, TargetPlan


def root_base(client: Engine, plan: BuildPlan, key: str) -> str:
    """The engine's reference of the pinned image the chain of key starts from: the bootstrapped
    base (its image ID in matrix.lock) or the registry base (its digest)."""
    root = expected.chain(plan, key)[0]
    lock = plan.lock.base(root.stack)
    for ref in filter(None, (lock.image_id, root.final_from if root.final_from.startswith("rocmforge/") else None)):
        if client.identity(ref):
            if lock.image_id and client.identity(ref) != lock.image_id:
                continue
            return ref
    if root.registry_base is not None:
        found = registrybase.held(client, *root.registry_base)
        if found:
            return found
    raise BuildError(
        f"the base {root.final_from or root.stack} pinned in matrix.lock ({lock.image_id or 'by digest'}) is not on "
        f"this engine: the image's files cannot be told from its base's. Build {root.key} here, or pull its base"
    )


def record_stage_outputs(client: Engine, tp: TargetPlan, ref: str, *, replace: bool) -> None:
    """After a build (replace) or when an image is found up to date (only if none is kept yet):
    keeps, outside the image, what its builder stages handed over."""
    if not expected.stage_destinations(tp) or (not replace and expected.has_stage_record(tp)):
        return
    with imagefs.open_image(client, ref) as fs:
        expected.record_stage_outputs(fs, tp)


def check(
    client: Engine,
    plan: BuildPlan,
    key: str,
    ref: str,
    keep_archs: tuple[str, ...],
    *,
    log: Callable[[str], None] = lambda line: None,
) -> tuple[account.Accounting, dict[str, float]]:
    """The accounting of image ref as plan target key, and how long each part took."""
    seconds: dict[str, float] = {}
    t = time.monotonic()
    base_ref = root_base(client, plan, key)
    base_ids = imagefs.diff_ids_of(client, base_ref)
    own_ids = imagefs.diff_ids_of(client, ref)
    if own_ids[: len(base_ids)] != base_ids:
        acc = account.Accounting(findings=[f"the image does not start with the layers of its pinned base {base_ref}"])
        return acc, seconds
    with imagefs.open_image(client, base_ref, log=log) as bfs:
        base = bfs.files()
    with imagefs.open_image(client, ref, log=log) as fs:
        files = fs.files()
    seconds["layers"], t = time.monotonic() - t, time.monotonic()
    stack = plan.matrix.stacks[expected.chain(plan, key)[0].stack]
    sources = aptsrc.for_stack(stack, list(base), lambda paths: imagefs.file_bytes(client, base_ref, paths))
    exp = expected.expected(plan, key, keep_archs, sources)
    seconds["sources"], t = time.monotonic() - t, time.monotonic()
    probe = generated_rules.Rules(files, base, exp)
    wanted = {
        rel
        for rel, have in files.items()
        if have.type == "f"
        and probe.owned_by_rule(rel)
        and (base.get(rel) is None or base[rel].brief() != have.brief())
    }
    wanted |= {rel for rel in files if declared.READS.match(rel) and files[rel].type == "f"}
    # the libraries ldconfig may have made a SONAME link to (the link rule reads their SONAME)
    wanted |= {
        f"{rel.rpartition('/')[0]}/{have.data}"
        for rel, have in files.items()
        if have.type == "l" and "/" not in have.data and declared.SONAME_LINK.search(rel) and rel not in exp.paths
    }
    upper = imagefs.file_bytes(client, ref, {rel: files[rel].layer for rel in wanted}, first_layer=len(base_ids))
    rest = {rel for rel in wanted if rel not in upper}
    if rest:
        upper.update(imagefs.file_bytes(client, base_ref, rest))
    # The bytes the rules read must be the bytes the index hashed from the layers' streams.
    torn = sorted(rel for rel, data in upper.items() if hashlib.sha256(data).hexdigest() != files[rel].data)
    seconds["generated"], t = time.monotonic() - t, time.monotonic()
    env_path = next(
        (e[5:] for e in (client.inspect(ref).get("Config") or {}).get("Env") or [] if e.startswith("PATH=")), ""
    )
    # what the rules compare with the base's own copy: the user databases, dpkg's diversions
    in_base = {r for r in base if declared.USER_FILES.match(r) or r == "var/lib/dpkg/diversions"}
    base_read = imagefs.file_bytes(client, base_ref, in_base)
    acc = account.account(files, base, exp, env_path, contents=upper.get, base_contents=base_read.get)
    acc.findings += [f"/{rel}: the engine's stored copy differs from the layer it belongs to" for rel in torn]
    seconds["compare"] = time.monotonic() - t
    return acc, seconds
