"""The build pipeline, in the order a target goes through it:
plan → fetch inputs → build → normalise → manifest → suites.

The CLI, `verify-repro`, the bench and the tests drive builds through this one module."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.assemble import buildcache, engine, image, inflight
from rocmforge.host import builders, fetch
from rocmforge.host.engines import Engine, EngineError
from rocmforge.resolve import bases, bootstrap, inputs
from rocmforge.shared import background
from rocmforge.shared.errors import BuildError
from rocmforge.shared.files import iso_utc
from rocmforge.shared.statedir import StateDir
from rocmforge.verify import inventory, manifest, suites
from rocmforge.verify.outside import check as outside
from rocmforge.workflow import registry_cache
from rocmforge.workflow.progress import Progress
from rocmforge.workflow.project import Project, ca_bundle

if TYPE_CHECKING:
    from rich.status import Status

    from rocmforge.render.plan import BuildPlan, TargetPlan


@dataclass(frozen=True)
class BuildOptions:
    ca_bundle: str | None = None  # as given; None: the usual variables (project.CA_ENV)
    cache_registry: str | None = None  # HOST[:PORT][/NS] of the cache registry, or None
    cache_readonly: bool = False
    check_disk: bool = False
    builder: str | None = None  # --builder as given; None: $ROCMFORGE_BUILDER, else builders.DEFAULT


@dataclass(frozen=True)
class BuiltTarget:
    """One row of a build: a target of the chain and how its image came to be there."""

    target: str
    status: str  # built, up-to-date or from cache
    image_id: str
    size: int | None = None  # bytes, as the engine reports the image
    engine_id: str = ""  # the ID the engine shows for it (its containerd store: the manifest digest)
    elapsed_s: float = 0.0  # from asking the engine for it to having it (built, pulled or found)


@dataclass(frozen=True)
class BuiltImage:
    """A normalised image and the step images its build left, which the caller settles or discards."""

    image_id: str
    made: list[str]
    build_s: float
    normalise_s: float
    base: inventory.BaseSeen | None = None  # what its last stage started FROM
    added_paths: list[bytes] | None = None  # every name of the layers the build added


class Pipeline:
    def __init__(
        self, project: Project, progress: Progress | None = None, options: BuildOptions = BuildOptions()
    ) -> None:
        self.project = project
        self.progress = progress or Progress()
        self.options = options
        self.cached: set[str] = set()  # targets this run took from the cache registry

    @cached_property
    def ca(self) -> Path | None:
        """The CA bundle of builder stages (a bad one is a UserError)."""
        return ca_bundle(self.options.ca_bundle)

    @cached_property
    def chosen(self) -> builders.Chosen:
        """The builder this run's builds use (a bad choice is a UserError, found without the engine)."""
        return builders.choose(self.options.builder)

    def check_ca(self) -> Path | None:
        """The CA bundle, read now: a bad one, like a bad setting, is refused before anything is built."""
        return self.ca

    @property
    def plan(self) -> BuildPlan:
        return self.project.plan

    # -- the chain of a target ----------------------------------------------------------------
    def build(self, name: str) -> list[BuiltTarget]:
        """Build name and its prerequisites: each is taken from the engine, the cache registry or built."""
        self.chosen  # noqa: B018 (a bad --builder or a missing buildx is said before the engine is reached)
        connecting = background.Background(engine.connect)  # the engine answers while the plan is made
        self.project.target(name)
        self.project.writable_state()
        tp = self.project.buildable_target(name)
        self.check_ca()
        buildcache.budget()
        cache = registry_cache.from_options(self.options.cache_registry, self.options.cache_readonly)
        client = connecting.result()
        self.chosen.on(client)  # a builder this engine cannot run is refused before anything is built
        order = self.plan.order([name])
        known: dict[str, str | None] = {}  # image IDs already asked of the engine (or the cache)
        if cache:
            known[tp.key] = engine.image_id(client, tp.content_tag)
            if not known[tp.key]:
                known[tp.key] = self.from_cache(client, cache, tp)
                if known[tp.key]:  # a hit needs none of its prerequisites
                    order = [name]
        # The variants come after the whole chain: each is built on its parent's variant, or on
        # what the main image is built on.
        chain = [self.plan.targets[dep] for dep in order] + self.plan.variants_needed(name)
        results = []
        for dp in chain:
            started = time.monotonic()
            existing = known[dp.key] if dp.key in known else engine.image_id(client, dp.content_tag)
            if not existing and cache and dp is not tp:
                existing = self.from_cache(client, cache, dp)
            if existing:
                status, image_id = self.take_existing(client, dp, name, existing)
            else:
                status, image_id = self.claim_and_build(client, dp, name, cache)
            shown = client.inspect(dp.content_tag)  # what the table shows: the engine's ID and size
            size = shown.get("Size")
            results.append(
                BuiltTarget(
                    dp.key,
                    status,
                    image_id,
                    size if isinstance(size, int) else None,
                    shown.get("Id") or image_id,
                    round(time.monotonic() - started, 1),
                )
            )
        return results

    def take_existing(self, client: Engine, dp: TargetPlan, name: str, existing: str) -> tuple[str, str]:
        """An image of the chain already in the engine: tagged and described like a built one."""
        client.tag(dp.content_tag, dp.readable_tag)  # by tag: the containerd store knows no config digest
        outside.record_stage_outputs(client, dp, dp.content_tag, replace=False)
        self.progress.line(f"[green]up to date[/green] {dp.key}: {dp.content_tag} ({existing[7:19]})")
        if dp.name == name and not manifest.describes(self.project.state, dp.key, existing):
            # Built under another state dir (or before it was cleared): `build` leaves the
            # manifest and SBOM here all the same, as it says it does.
            self.write_manifest(client, dp, existing)
        return ("from cache" if dp.key in self.cached else "up-to-date"), existing

    def claim_and_build(
        self, client: Engine, dp: TargetPlan, name: str, cache: registry_cache.Cache | None
    ) -> tuple[str, str]:
        """Builds dp unless another process on this machine is building it: then waits for that build
        and takes its image."""
        waiting = f"[yellow]waiting[/yellow] {dp.key}: another process on this machine is building {dp.content_tag}"
        with inflight.claimed(dp.content_tag, partial(self.progress.line, waiting)):
            existing = engine.image_id(client, dp.content_tag)
            if existing:
                return self.take_existing(client, dp, name, existing)
            return "built", self.build_one(client, dp, cache)

    def build_one(self, client: Engine, tp: TargetPlan, cache: registry_cache.Cache | None = None) -> str:
        """Build one image of the chain, its manifest and SBOM beside it; returns its image ID."""
        name = tp.key
        if self.options.check_disk:
            buildcache.require_free_disk(client, tp.name, self.plan.matrix.runner_of(tp.name).disk_gb)
        self.ensure_base(client, tp)
        log_path = StateDir(self.project.state).log(name)
        self.progress.line(f"[bold]building[/bold] {name} -> {tp.content_tag} (log: {log_path})")
        with self.progress.status(f"{name}: starting") as status:
            built = self.build_image(client, tp, tags=[tp.content_tag, tp.readable_tag], status=status)
            # what the builder stages handed over, kept outside the image for the suites to check against
            outside.record_stage_outputs(client, tp, tp.content_tag, replace=True)
            # Settling the cache (removing the previous one) and taking the inventory are independent.
            with ThreadPoolExecutor(max_workers=1) as pool:
                settled = pool.submit(
                    buildcache.settle, client, self.project.state, name, engine.raw_tag(tp), built.made
                )
                self.write_manifest(client, tp, built.image_id, built)
                kept = settled.result()
        if cache and registry_cache.store(client, cache, tp, self.progress.warn):
            self.progress.line(f"  stored {name} in the cache {cache.where.repository(tp.name)}")
        shown = client.manifest_digest(tp.content_tag)
        also = f" (the engine's containerd store shows it as {shown[7:19]}, its manifest digest)" if shown else ""
        self.progress.line(
            f"[green]built[/green] {name}: {built.image_id[7:19]}{also} tags {tp.content_tag}, "
            f"{tp.readable_tag}; manifest and SBOM in {StateDir(self.project.state).artifacts(name)}"
            + (f"; build cache kept as {buildcache.REPO}/{name}:last" if kept else "")
        )
        return built.image_id

    def from_cache(self, client: Engine, cache: registry_cache.Cache, tp: TargetPlan) -> str | None:
        """The image of tp from the cache registry, or None on a miss."""
        epoch = iso_utc(self.plan.matrix.targets[tp.name].source_date_epoch)
        with self.progress.status(f"{tp.key}: asking the cache {cache.where.host}"):
            image = registry_cache.fetch(
                client, cache, tp, engine.final_base(client, tp, fetch=False), epoch, self.progress.warn
            )
        if image:
            self.cached.add(tp.key)
            self.progress.line(
                f"[green]from cache[/green] {tp.key}: {cache.where.repository(tp.name)}:content-"
                f"{tp.content_hash[:12]}… ({image[7:19]}); no build step run"
            )
            self.write_manifest(client, tp, image)
        return image

    def ensure_base(self, client: Engine, tp: TargetPlan) -> None:
        """Cheap when present; a removed bootstrapped base must come back before any FROM names it."""
        if tp.bootstrap_stack:
            stack = self.plan.matrix.stacks[tp.bootstrap_stack]
            ref = bases.bootstrap_ref(tp.bootstrap_stack, stack)
            waiting = f"[yellow]waiting[/yellow] another process on this machine is bootstrapping {ref}"
            with (
                inflight.claimed(ref, partial(self.progress.line, waiting)),
                self.progress.status(f"bootstrapping base of {tp.bootstrap_stack}"),
            ):
                bootstrap.ensure_base(
                    client,
                    tp.bootstrap_stack,
                    stack,
                    StateDir(self.project.state).work,
                    self.project.log(f"base-{tp.bootstrap_stack}"),
                )

    # -- the steps ----------------------------------------------------------------------------
    def fetch_inputs(self, tp: TargetPlan) -> dict[str, bytes]:
        """Host-side inputs of a build (locked wheels, git sources), from the state's cache or fetched."""
        lock = self.plan.lock
        context: dict[str, bytes] = {}
        try:
            for item in tp.fetches:
                context.update(inputs.fetch(item, lock, StateDir(self.project.state).work, self.ca))
        except fetch.FetchError as exc:
            raise BuildError(f"fetching the inputs of {tp.name} failed: {exc}") from None
        return context

    def build_image(
        self,
        client: Engine,
        tp: TargetPlan,
        *,
        tags: list[str],
        status: Status,
        raw_tag: str | None = None,
        log_name: str | None = None,
        nocache: bool = False,
    ) -> BuiltImage:
        """One `docker build` of tp, normalised so the same inputs give the same image ID, tagged tags.
        On failure the raw image and the step images of this build are discarded."""
        log_name = log_name or tp.key
        raw_tag = raw_tag or engine.raw_tag(tp)
        made: list[str] = []
        started = time.monotonic()

        def step(text: str) -> None:
            status.update(f"{tp.name}: {text[:100]}")
            self.progress.line(f"  {text[:160]}", markup=False)

        background.preload("rocmforge.assemble.image.normalise", *manifest.SBOM_LIBRARIES)  # needed after it
        raw = engine.build(
            client,
            tp,
            log_path=StateDir(self.project.state).log(log_name),
            ca_bundle=self.ca,
            progress=step,
            extra_files=self.fetch_inputs(tp),
            tag=raw_tag,
            nocache=nocache,
            made=made,
            builder=self.chosen.on(client),
            locked_debs=self.plan.lock.debs.get(tp.stack, {}),
        )
        built = time.monotonic()
        base = raw.final_base  # pulled (a registry base) or built before this build started
        try:
            status.update(f"{tp.name}: normalising layers and config for a reproducible image ID")
            done = self.normalise(
                client,
                tp,
                raw.image_id,
                tags,
                log_name,
                base,
                progress=lambda msg: status.update(f"{tp.name}: {msg}"),
            )
        except BaseException:
            kept = set(buildcache.recorded(self.project.state, tp.name))
            self.discard_raw(client, raw_tag, [m for m in made if m not in kept])
            raise
        return BuiltImage(
            done.image_id,
            made,
            round(built - started, 1),
            round(time.monotonic() - built, 1),
            inventory.BaseSeen.of(client, base),
            done.added_paths,
        )

    def normalise(
        self,
        client: Engine,
        tp: TargetPlan,
        raw_ref: str,
        tags: list[str],
        log_name: str,
        base: str | None,
        progress: Callable[[str], None] | None = None,
    ) -> image.NormalisedImage:
        """Rewrite a classic-builder image so the same inputs give the same image ID."""
        return image.normalise_image(
            client,
            raw_ref,
            epoch=self.plan.matrix.targets[tp.name].source_date_epoch,
            tags=tags,
            workdir=StateDir(self.project.state).work,
            log=self.project.log(log_name),
            base_ref=base,
            progress=progress,
            steps=engine.history_steps(tp),
            merged=engine.merged_steps(tp),
        )

    @staticmethod
    def discard_raw(client: Engine, raw_tag: str, made: list[str]) -> None:
        try:
            client.untag(raw_tag)  # the tag; discard removes the images
        except EngineError:  # never made, or already gone
            pass
        engine.discard(client, made)

    def write_manifest(
        self,
        client: Engine,
        tp: TargetPlan,
        image_id: str,
        built: BuiltImage | None = None,
        report: suites.SuitesReport | None = None,
    ) -> Path:
        """The manifest and SBOM of tp's image image_id. built: this run's build of it, whose added
        layers may spare the inventory its container; report: its suites, just run (else the ones
        recorded for the image, if any)."""
        rec = report or suites.recorded(self.project.state, image_id)
        # Said in the build log of a build (a target taken from the engine or the cache has none).
        inv = inventory.inventory(
            client,
            tp.content_tag,
            base=built.base if built else None,
            added_paths=built.added_paths if built else None,
            log=self.project.log(tp.key) if built else lambda line: None,
        )
        data = manifest.make_manifest(tp, image_id, inv, self.plan.lock, rec.statuses() if rec else None)
        data["source_revision"] = self.project.revision() or None  # the checkout that last wrote it
        return manifest.write(self.project.state, data)

    def test(
        self,
        client: Engine,
        image: str,
        image_id: str,
        target: str | None,
        junit: Path | None = None,
        require_gpu: bool = False,
        own: TargetPlan | None = None,
        only: tuple[str, ...] = (),
    ) -> suites.SuitesReport:
        """Run the suites in image (whose ID the caller found) and record them; own, the target's
        image it is, gets them in its manifest too. only: these suites alone, a run neither recorded
        nor put in the manifest (push needs every suite)."""
        with self.progress.status(f"running suites in {image}"):
            report = suites.run_suites(
                client,
                image,
                image_id,
                target,
                self.project.matrix_path.resolve(),
                junit,
                require_gpu=require_gpu,
                content_hashes={tp.key: tp.content_hash for n in self.plan.targets for tp in self.plan.images_of(n)},
                only=only,
            )
        if only:
            return report
        suites.record(self.project.state, report)
        if own is not None:
            self.write_manifest(client, own, image_id, report=report)
        return report

    def context(self, key: str) -> dict[str, bytes]:
        """The complete build context of a target or variant (rendered files, probes, fetched inputs),
        for `docker build` or `docker buildx bake`."""
        tp = self.project.buildable_image(key)
        return {**tp.files, **self.fetch_inputs(tp)}
