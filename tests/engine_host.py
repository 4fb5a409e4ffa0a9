"""Other Docker engines, each in a container on the host engine, for tests that run the project
against the engines users have: Debian sid's Docker 28 (overlay2, or the containerd image store)
and podman 5 serving the Docker-compatible API. The host talks to the inner engine through a unix
socket in a bind-mounted host directory (DOCKER_HOST=unix://…).

Images (cached by tag; each tag holds a hash of its recipe, so a second run reuses them):
  rocmforge-enginetest/sid:<hash>        debootstrap --variant=minbase sid, `docker import`ed
  rocmforge-enginetest/<image>:<hash>    the engine's packages installed FROM it (classic builder),
                                         their installed versions in a label
Every name this module creates starts with PREFIX, so it never meets the project's own tags.
Recipe: /work/shared/WORLD.md, "Docker engines users have, and how to run them here"."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.local_registry import free_port

PREFIX = "rocmforge-enginetest"
SUITE = "sid"
MIRROR = "http://deb.debian.org/debian"
# The sid mirror here is a frozen snapshot past its Valid-Until (WORLD.md).
APT = "apt-get -o Acquire::Check-Valid-Until=false"
SNAPSHOT_CONF = "/etc/apt/apt.conf.d/99frozen-snapshot"
LABEL_PACKAGES = "io.rocmforge.enginetest.packages"
LABEL_RECIPE = "io.rocmforge.enginetest.recipe"
DIR_ENV = "ROCMFORGE_ENGINETEST_DIR"  # where data roots go (default: the temp directory)
DATA_FILESYSTEMS = {"ext4", "xfs", "btrfs"}  # never overlay on overlay
ENGINE_ROOT_ENV = "ROCMFORGE_ENGINE_ROOT"  # rocmforge.host.engineinfo.ROOT_ENV
RUN_DIR = "/run/enginetest"  # in the engine container: socket, log, start script
SOCKET = "docker.sock"
LOG = "daemon.log"
EXIT = "daemon.exit"
TCP_PORT = 2375  # the Docker engines also listen here inside their container (RunningEngine.tcp_host)

# The engine images: Debian packages installed with --no-install-recommends (docker.io only
# Recommends docker-cli, WORLD.md). Versions are not pinned: what got installed is recorded.
IMAGE_PACKAGES = {
    "docker28": ("docker.io", "docker-cli", "containerd", "iptables", "ca-certificates"),
    # netavark 1.17 drives nftables (`nft`), not iptables
    "podman5": ("podman", "crun", "conmon", "netavark", "aardvark-dns", "nftables", "ca-certificates"),
    # what the README's set-up starts from on a fresh Debian sid host
    "stock-sid": ("python3", "git", "ca-certificates"),
}

# podman without systemd or a session bus inside a container. For root, podman and buildah raise
# RLIMIT_NOFILE/NPROC of every container to 1048576 unless told a limit, and the engine container
# has no CAP_SYS_RESOURCE (refused here) to go above its own hard limits: the start script fills in
# those limits (NOFILE, NPROC).
PODMAN_CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=NOFILE:NOFILE", "nproc=NPROC:NPROC"]

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
PODMAN_STORAGE_CONF = """[storage]
driver = "overlay"
graphroot = "/var/lib/containers/storage"
runroot = "/run/containers/storage"
"""


@dataclass(frozen=True)
class EngineSpec:
    name: str
    image: str  # key of IMAGE_PACKAGES
    kind: str  # "docker" or "podman"
    data_root: str  # bind-mounted from a fresh host directory
    daemon_json: dict = field(default_factory=dict)
    major: str = ""  # the server version the name promises


ENGINES: dict[str, EngineSpec] = {
    "docker28-overlay2": EngineSpec(
        "docker28-overlay2", "docker28", "docker", "/var/lib/docker", {"storage-driver": "overlay2"}, "28"
    ),
    "docker28-containerd": EngineSpec(
        "docker28-containerd",
        "docker28",
        "docker",
        "/var/lib/docker",
        {"features": {"containerd-snapshotter": True}},
        "28",
    ),
    "podman5": EngineSpec("podman5", "podman5", "podman", "/var/lib/containers", {}, "5"),
}


class EngineUnavailable(RuntimeError):
    """The engine could not be provided here (missing tool, build failure, daemon never answered)."""


def _hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def base_recipe() -> str:
    return f"debootstrap --variant=minbase {SUITE} DIR {MIRROR} | docker import"


def base_tag() -> str:
    return f"{PREFIX}/{SUITE}:{_hash(base_recipe())}"


def dockerfile(image: str) -> str:
    packages = " ".join(IMAGE_PACKAGES[image])
    return (
        f"FROM {base_tag()}\n"
        f"RUN export DEBIAN_FRONTEND=noninteractive && {APT} update"
        f" && {APT} install -y --no-install-recommends {packages}"
        " && apt-get clean && rm -rf /var/lib/apt/lists/*"
        # a host on this frozen sid says so once, as any snapshot user does; what runs there
        # (with-engine's apt-get) then works unchanged
        + (f" && echo 'Acquire::Check-Valid-Until \"false\";' > {SNAPSHOT_CONF}" if image == "stock-sid" else "")
        + '\nCMD ["sleep", "infinity"]\n'
    )


def image_tag(image: str) -> str:
    return f"{PREFIX}/{image}:{_hash(base_recipe(), dockerfile(image))}"


def _default_log(message: str) -> None:
    print(f"[engine_host] {message}", flush=True)


def _present(client, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def _build(client, text: str, tag: str, labels: dict | None = None) -> str:
    """Classic-builder build of a one-file context; returns the image ID."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = text.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    image_id, log = None, []
    for chunk in client.api.build(
        fileobj=buf, custom_context=True, rm=True, forcerm=True, pull=False, decode=True, tag=tag, labels=labels
    ):
        log.append(chunk.get("stream", ""))
        if "error" in chunk:
            raise EngineUnavailable(f"build of {tag} failed: {chunk['error']}\n{''.join(log)[-3000:]}")
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
    if not image_id:
        raise EngineUnavailable(f"build of {tag} gave no image ID:\n{''.join(log)[-3000:]}")
    return image_id


def ensure_base(client, workdir: Path | None = None, log: Callable[[str], None] = _default_log) -> str:
    """The registry-free sid base, bootstrapped and imported unless its tag is present."""
    tag = base_tag()
    with _one_maker(tag, log):
        return tag if _present(client, tag) else _bootstrap_base(client, tag, workdir, log)


def _one_maker(tag: str, log: Callable[[str], None]):
    """rocmforge's own claim on making an image (inflight), held while TAG is looked for and made:
    the test run's two workers both reach for the engine images on a cold engine, and one must not
    untag the other's staging image while a container of it runs."""
    from rocmforge.assemble import inflight

    return inflight.claimed(tag, lambda: log(f"{tag}: another process is making it; waiting"))


def _bootstrap_base(client, tag: str, workdir: Path | None, log: Callable[[str], None]) -> str:
    if shutil.which("debootstrap") is None:
        raise EngineUnavailable("debootstrap is not installed (apt-get install -y debootstrap)")
    if os.geteuid() != 0:
        raise EngineUnavailable("debootstrap needs root")
    from rocmforge.resolve import bootstrap  # its scratch directory unmounts what debootstrap leaves mounted

    started = time.monotonic()
    with bootstrap._scratch_dir(Path(workdir or tempfile.gettempdir()), log) as tmp:
        rootfs = Path(tmp) / "rootfs"
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", SUITE, str(rootfs), MIRROR],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
            raise EngineUnavailable(f"debootstrap of {SUITE} failed (exit {proc.returncode}):\n{tail}")
        layer = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(layer), "."], check=True)
        shutil.rmtree(rootfs)
        repository, _, version = tag.partition(":")
        client.api.import_image(src=str(layer), repository=repository, tag=version, changes=['CMD ["bash"]'])
    if not _present(client, tag):
        raise EngineUnavailable(f"docker import did not produce {tag}")
    log(f"{tag}: bootstrapped and imported in {time.monotonic() - started:.0f} s")
    return tag


def dpkg_versions(client, image: str, packages: tuple[str, ...] = ()) -> dict[str, str]:
    """Installed package versions in IMAGE (all of them, or PACKAGES and the engine parts)."""
    out = client.containers.run(
        image, ["dpkg-query", "-W", "-f", "${Package}=${Version} ${db:Status-Status}\\n"], remove=True
    ).decode()
    installed = {}
    for line in out.splitlines():
        name, _, rest = line.partition("=")
        version, _, status = rest.partition(" ")
        if status == "installed":
            installed[name] = version
    if not packages:
        return installed
    wanted = set(packages) | {
        "runc",
        "crun",
        "conmon",
        "containerd",
        "netavark",
        "aardvark-dns",
        "tini",
        "fuse-overlayfs",
        "golang-github-containers-common",
        "iptables",
        "nftables",
    }
    return {k: v for k, v in sorted(installed.items()) if k in wanted}


def ensure_image(
    client, image: str, workdir: Path | None = None, log: Callable[[str], None] = _default_log
) -> tuple[str, dict[str, str]]:
    """(tag, {package: version}) of an engine image, built unless its tag is present."""
    tag = image_tag(image)
    with _one_maker(tag, log):
        if not _present(client, tag):
            _build_engine_image(client, image, tag, workdir, log)
    labels = client.images.get(tag).labels or {}
    return tag, json.loads(labels.get(LABEL_PACKAGES, "{}"))


def _build_engine_image(client, image: str, tag: str, workdir: Path | None, log: Callable[[str], None]) -> None:
    ensure_base(client, workdir, log)
    started = time.monotonic()
    staging = f"{PREFIX}/{image}-staging:{tag.rsplit(':', 1)[1]}"
    _build(client, dockerfile(image), staging)
    try:
        versions = dpkg_versions(client, staging, IMAGE_PACKAGES[image])
        # The versions go into a label of the cached tag, so a later run reads them for free.
        _build(
            client,
            f"FROM {staging}\n",
            tag,
            labels={LABEL_PACKAGES: json.dumps(versions, sort_keys=True), LABEL_RECIPE: tag.rsplit(":", 1)[1]},
        )
    finally:
        client.images.remove(staging, noprune=True)  # the untag only: the layers stay under TAG
    log(f"{tag}: built in {time.monotonic() - started:.0f} s: {versions}")


def data_parent() -> Path:
    """A directory for data roots, on a filesystem an engine's overlay can sit on."""
    parent = Path(os.environ.get(DIR_ENV) or tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    fstype = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE", "-T", str(parent)], capture_output=True, text=True
    ).stdout.strip()
    if fstype not in DATA_FILESYSTEMS:
        raise EngineUnavailable(
            f"{parent} is on {fstype or 'an unknown filesystem'}, not one of "
            f"{sorted(DATA_FILESYSTEMS)}: an engine's storage cannot sit on it "
            f"(set ${DIR_ENV} to a directory on ext4)"
        )
    return parent


@dataclass
class RunningEngine:
    name: str  # key of ENGINES
    container: str  # the engine's container on the host engine
    docker_host: str  # unix:///…/docker.sock, for DOCKER_HOST or DockerClient(base_url=…)
    gateway: str  # the host, as the inner engine reaches it (host bridge gateway)
    registry_port: int  # a port on GATEWAY the inner engine treats as an insecure registry
    server_version: str
    api_version: str
    driver: str
    driver_status: list
    containerd_snapshotter: bool
    packages: dict[str, str]
    image: str
    host_dir: Path  # the host directory holding data root and socket directory
    info: dict
    tcp_host: str = ""  # tcp://127.0.0.1:PORT, the same engine over TCP (Docker engines only)

    @property
    def registry_address(self) -> str:
        """HOST:PORT where a registry the host serves on GATEWAY:REGISTRY_PORT is reachable (plain HTTP)."""
        return f"{self.gateway}:{self.registry_port}"

    @property
    def log_path(self) -> Path:
        return self.host_dir / "run" / LOG

    def client(self, timeout: int = 600):
        from tests import observed  # rocmforge's Engine, with docker-py behind it for the test's own looks

        return observed.connect(timeout, base_url=self.docker_host)

    def env(self, store_visible: bool = True) -> dict[str, str]:
        """Environment for a subprocess (e.g. `python build.py`) that should use this engine. With
        store_visible, where this host sees the engine's data root (as a user of Docker-in-Docker
        with a host volume would say), so rocmforge reads the layers a build added from its store;
        without, the engine is as remote and `docker save` is taken."""
        env = {"DOCKER_HOST": self.docker_host}
        if store_visible:  # podman's graphroot is storage/ in its data root (PODMAN_STORAGE_CONF)
            env[ENGINE_ROOT_ENV] = str(
                self.host_dir / "data" / ("storage" if ENGINES[self.name].kind == "podman" else "")
            )
        return env

    def log_tail(self, lines: int = 30) -> str:
        return _tail(self.log_path, lines)

    def describe(self) -> str:
        return (
            f"{self.name}: server {self.server_version} (API {self.api_version}), driver {self.driver}"
            f"{' (containerd snapshotter)' if self.containerd_snapshotter else ''}, "
            f"registry at {self.registry_address}, packages {self.packages}"
        )


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


# Makes /sys and the cgroup mounts writable (the host uses cgroup v1 and Docker mounts them
# read-only), which an engine inside needs to run containers.
WRITABLE_SYS = [
    "mount -o remount,rw /sys || echo 'enginetest: cannot remount /sys rw' >&2",
    'awk \'$3 == "cgroup" || $3 == "cgroup2" || ($3 == "tmpfs" && $2 == "/sys/fs/cgroup")'
    " {print $2}' /proc/self/mounts | while read -r m; do",
    # cgroup v1 refuses a superblock remount (EBUSY): a bind remount flips only this mount
    '  mount -o remount,bind,rw "$m" 2>/dev/null || mount -o remount,rw "$m"'
    ' || echo "enginetest: cannot remount $m rw" >&2',
    "done",
]


def _start_script(spec: EngineSpec, gateway: str, port: int) -> str:
    """Run in the engine container: make /sys and the cgroups writable, write the engine's
    configuration, run the daemon with its log in RUN_DIR, and leave its exit status there."""
    sock = f"{RUN_DIR}/{SOCKET}"
    lines = ["set -u", f"exec >>{RUN_DIR}/{LOG} 2>&1", *WRITABLE_SYS, f"rm -f {sock}"]
    if spec.kind == "docker":
        # A CIDR entry covers every port of the gateway (dockerd matches it against the host's IP).
        config = {**spec.daemon_json, "insecure-registries": [f"{gateway}/32"]}
        lines += [
            "mkdir -p /etc/docker",
            f"cat > /etc/docker/daemon.json <<'EOF'\n{json.dumps(config, indent=2)}\nEOF",
            # and over TCP, which the host reaches on 127.0.0.1 (RunningEngine.tcp_host), as a
            # remote engine or a docker context is reached; plain TCP must be asked for (Docker 27+)
            f"dockerd --data-root {spec.data_root} -H unix://{sock} -H tcp://0.0.0.0:{TCP_PORT} --tls=false",
        ]
    else:
        registries = (
            f'[[registry]]\nlocation = "{gateway}:{port}"\ninsecure = true\n\n'
            # c/image matches "HOST" against "HOST:PORT" today, and says not to rely on it
            f'[[registry]]\nlocation = "{gateway}"\ninsecure = true\n'
        )
        lines += [
            "mkdir -p /etc/containers/registries.conf.d",
            "nofile=$(awk '/^Max open files/ {print $5}' /proc/self/limits | sed s/unlimited/-1/)",
            "nproc=$(awk '/^Max processes/ {print $4}' /proc/self/limits | sed s/unlimited/-1/)",
            f"sed -e \"s/NOFILE/$nofile/g; s/NPROC/$nproc/g\" > /etc/containers/containers.conf <<'EOF'\n"
            f"{PODMAN_CONTAINERS_CONF}EOF",
            f"cat > /etc/containers/storage.conf <<'EOF'\n{PODMAN_STORAGE_CONF}EOF",
            f"cat > /etc/containers/registries.conf.d/50-enginetest.conf <<'EOF'\n{registries}EOF",
            f"podman system service --log-level=info --time=0 unix://{sock}",
        ]
    daemon = lines.pop()
    lines += [
        f"{daemon} &",
        "pid=$!",
        # the socket is root's; open it to the host's other users too
        f"for i in $(seq 600); do [ -S {sock} ] && {{ chmod 0666 {sock}; break; }}; sleep 0.1; done",
        "wait $pid",
        f"echo $? > {RUN_DIR}/{EXIT}",
    ]
    return "\n".join(lines) + "\n"


def _engine_info(client) -> tuple[dict, dict]:
    return client.version(), client.info()


def _remove_tree(client, path: Path, image: str, log: Callable[[str], None]) -> None:
    """rm -rf from the host; a root-owned leftover the host cannot remove goes through a container."""
    shutil.rmtree(path, ignore_errors=True)
    if not path.exists():
        return
    try:
        client.containers.run(
            image,
            ["rm", "-rf", "/victim/data", "/victim/run"],
            remove=True,
            volumes={str(path): {"bind": "/victim", "mode": "rw"}},
        )
    except Exception as exc:  # report what stays behind rather than hide it
        log(f"could not remove {path} through a container: {exc}")
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        log(f"left {path} behind: {list(path.rglob('*'))[:5]}")


def _engine_capable_container(
    client,
    image: str,
    container_name: str,
    label: str,
    binds: dict,
    environment: dict | None = None,
    published: dict[int, int] | None = None,
):
    """A started container in which an engine can run (WORLD.md's recipe)."""
    # `systempaths=unconfined` is the docker CLI's word for empty MaskedPaths/ReadonlyPaths (the
    # daemon refuses it as a security option), so the host config is written out here.
    host_config = client.api.create_host_config(
        init=True,
        cap_add=["ALL"],
        cap_drop=["SYS_RESOURCE"],
        security_opt=["seccomp=unconfined", "apparmor=unconfined"],
        device_cgroup_rules=["a *:* rwm"],
        nano_cpus=2_000_000_000,
        binds=binds,
        # container port -> a port on the host's loopback only (an engine's API has no auth)
        port_bindings={inner: ("127.0.0.1", outer) for inner, outer in (published or {}).items()},
    )
    host_config.update(MaskedPaths=[], ReadonlyPaths=[])
    created = client.api.create_container(
        image,
        ["sleep", "infinity"],
        name=container_name,
        environment=environment,
        labels={"io.rocmforge.enginetest": label},
        host_config=host_config,
        ports=list(published or {}),
    )
    container = client.containers.get(created["Id"])
    container.start()
    container.reload()
    return container


@contextlib.contextmanager
def stock_host(
    client,
    binds: dict,
    environment: dict | None = None,
    *,
    workdir: Path | None = None,
    log: Callable[[str], None] = _default_log,
):
    """A container of a stock Debian sid (python3, git, ca-certificates) in which an engine can be
    installed and started, its /var/lib/docker on a fresh host directory; removed afterwards."""
    image, _ = ensure_image(client, "stock-sid", workdir, log)
    host_dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-stock-", dir=data_parent()))
    (host_dir / "data").mkdir()
    container = None
    try:
        container = _engine_capable_container(
            client,
            image,
            f"{PREFIX}-stock-{uuid.uuid4().hex[:8]}",
            "stock-sid",
            {**binds, str(host_dir / "data"): {"bind": "/var/lib/docker", "mode": "rw"}},
            environment,
        )
        rc, out = container.exec_run(["sh", "-c", "\n".join(WRITABLE_SYS)])
        log(f"stock sid host {container.name}: {out.decode(errors='replace').strip() or 'ready'}")
        yield container
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except Exception as exc:  # noqa: BLE001 - say what stays
                log(f"could not remove {container.name}: {exc}")
        _remove_tree(client, host_dir, image, log)


@contextlib.contextmanager
def running(
    client, name: str, *, workdir: Path | None = None, timeout: float = 120, log: Callable[[str], None] = _default_log
) -> Iterator[RunningEngine]:
    """Yields a RunningEngine for ENGINES[name], started in a container on CLIENT's engine; removes
    the container and its data root afterwards. Raises EngineUnavailable when it cannot be had."""
    import docker.errors

    spec = ENGINES[name]
    image, packages = ensure_image(client, spec.image, workdir, log)
    host_dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-{name}-", dir=data_parent()))
    run_dir, data_dir = host_dir / "run", host_dir / "data"
    run_dir.mkdir()
    data_dir.mkdir()
    container_name = f"{PREFIX}-{name}-{uuid.uuid4().hex[:8]}"
    container = None
    tcp_port = free_port() if spec.kind == "docker" else None
    try:
        container = _engine_capable_container(
            client,
            image,
            container_name,
            name,
            {str(data_dir): {"bind": spec.data_root, "mode": "rw"}, str(run_dir): {"bind": RUN_DIR, "mode": "rw"}},
            published={TCP_PORT: tcp_port} if tcp_port else None,
        )
        gateway = container.attrs["NetworkSettings"].get("Gateway") or ""
        if not gateway:
            networks = container.attrs["NetworkSettings"].get("Networks") or {}
            gateway = next((n.get("Gateway") for n in networks.values() if n.get("Gateway")), "")
        if not gateway:
            raise EngineUnavailable(
                f"{container_name} has no gateway on the host's network: {container.attrs['NetworkSettings']}"
            )
        port = free_port(gateway)  # chosen now: podman reads its insecure registries once
        (run_dir / "start.sh").write_text(_start_script(spec, gateway, port))
        container.exec_run(["sh", f"{RUN_DIR}/start.sh"], detach=True)

        base_url = f"unix://{run_dir / SOCKET}"
        deadline, last = time.monotonic() + timeout, None
        while True:
            if (run_dir / EXIT).exists():
                raise EngineUnavailable(
                    f"{name}: the daemon exited (status {(run_dir / EXIT).read_text().strip()}) "
                    f"before its API answered; last lines of its log:\n{_tail(run_dir / LOG, 30)}"
                )
            if (run_dir / SOCKET).exists():
                try:
                    inner = docker.DockerClient(base_url=base_url, timeout=30)
                    inner.ping()
                    version, info = _engine_info(inner.api)
                    inner.close()
                    break
                except Exception as exc:  # not serving yet
                    last = exc
            if time.monotonic() > deadline:
                raise EngineUnavailable(
                    f"{name}: no API at {base_url} after {timeout:.0f} s ({last}); "
                    f"last lines of its log:\n{_tail(run_dir / LOG, 30)}"
                )
            time.sleep(0.5)

        driver_status = info.get("DriverStatus") or []
        snapshotter = any(k == "driver-type" and v == "io.containerd.snapshotter.v1" for k, v in driver_status)
        engine = RunningEngine(
            name=name,
            container=container_name,
            docker_host=base_url,
            gateway=gateway,
            registry_port=port,
            server_version=version.get("Version", ""),
            api_version=version.get("ApiVersion", ""),
            driver=info.get("Driver", ""),
            driver_status=driver_status,
            containerd_snapshotter=snapshotter,
            packages=packages,
            image=image,
            host_dir=host_dir,
            info=info,
            tcp_host=f"tcp://127.0.0.1:{tcp_port}" if tcp_port else "",
        )
        log(engine.describe())
        yield engine
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
        _remove_tree(client, host_dir, image, log)
