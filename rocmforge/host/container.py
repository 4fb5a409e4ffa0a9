"""A container whose lifetime the caller owns: started with the GPU devices the host has,
every exec wrapped in `timeout` (docker-py has no read timeout), always removed. And one command
run as `docker run IMAGE CMD...` runs it (run_as_users_do): the image's own entrypoint and config.
Every request goes through the engine boundary (`Engine`'s container methods), as builds do."""

from __future__ import annotations

import contextlib
import glob
import io
import os
import tarfile
import uuid
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, cast

from rocmforge.host.enginebase import EngineError, ImageMissing

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

TEST_LABEL = "io.rocmforge.test-session"
# In a command: the image's own Python, by the absolute path its PATH gives (TrackedContainer.image_python).
IMAGE_PYTHON = "image:python3"
# The environment a judged probe runs in: nothing of the caller's shell; of the image's declared Env
# (probe_env) what steers the libraries under test (LD_LIBRARY_PATH, HSA_*, HIP_*), never what puts
# code into the probe's own process (LD_PRELOAD, LD_AUDIT) or where it finds programs (PATH).
CLEAN_ENV = ("HOME=/root", "LANG=C.UTF-8")
PROBE_PATH = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
NOT_PASSED = ("PATH", "LD_PRELOAD", "LD_AUDIT")


@dataclass(frozen=True)
class GpuAccess:
    """The device nodes ROCm needs and the numeric GIDs that own them (what --group-add needs)."""

    devices: tuple[str, ...] = ()
    group_ids: tuple[int, ...] = ()

    @property
    def present(self) -> bool:
        return "/dev/kfd" in self.devices

    @property
    def wsl(self) -> bool:
        """WSL2's GPU: /dev/dxg (DirectX paravirtualisation) and no KFD."""
        return "/dev/dxg" in self.devices and not self.present

    def reason_absent(self) -> str:
        return "no /dev/kfd on this host (no AMD GPU or amdgpu driver not loaded)"


def host_gpu_access(dev_root: str = "/dev") -> GpuAccess:
    """The GPU device nodes under dev_root (KFD and DRI, else WSL2's dxg) and the groups owning them."""
    kfd = os.path.join(dev_root, "kfd")
    if not os.path.exists(kfd):
        dxg = os.path.join(dev_root, "dxg")
        return GpuAccess(devices=(dxg,)) if os.path.exists(dxg) else GpuAccess()
    nodes = [kfd] + sorted(
        glob.glob(os.path.join(dev_root, "dri", "renderD*")) + glob.glob(os.path.join(dev_root, "dri", "card*"))
    )
    gids = sorted({os.stat(n).st_gid for n in nodes if os.path.exists(n)} - {0})
    return GpuAccess(devices=tuple(nodes), group_ids=tuple(gids))


@dataclass
class ExecResult:
    rc: int
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def _device_options(gpu: GpuAccess) -> dict:
    """What `docker run` needs to reach the host's GPU: the nodes, their owning groups by number,
    and no seccomp filter (ROCm's runtime calls what the default profile refuses)."""
    if not gpu.present:
        return {}
    return {
        "devices": [f"{d}:{d}:rwm" for d in gpu.devices],
        "group_add": [str(g) for g in gpu.group_ids],
        "security_opt": ["seccomp=unconfined"],
    }


@dataclass
class TrackedContainer:
    client: Engine  # the engine the container runs on
    image: str
    gpu: GpuAccess = field(default_factory=GpuAccess)
    session: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    container_id: str | None = None  # from start() until remove()
    # The suites' judge: what a command's "python3" runs as (an interpreter copied in from outside,
    # by absolute path, its environment cleared), what IMAGE_PYTHON runs as (the image's own, by
    # the absolute path its PATH gives), and the tar put into /tmp before anything runs. Unset: as
    # the image's PATH finds them.
    probe_python: tuple[str, ...] = ()
    probe_env: tuple[str, ...] = ()  # the image's declared Env (KEY=value), as the host inspected it
    image_python: str = ""
    setup_tar: bytes = b""

    def start(self) -> TrackedContainer:
        self.container_id = self.client.create_container(
            self.image,
            ["infinity"],
            entrypoint=["sleep"],
            labels={TEST_LABEL: self.session},
            **_device_options(self.gpu),
        )
        self.client.start_container(self.container_id)
        if self.setup_tar:
            self.client.put_archive(self.id, "/tmp", self.setup_tar)
        return self

    @property
    def id(self) -> str:
        # AttributeError, as reaching through a None container gave before: callers see no change
        if self.container_id is None:
            raise AttributeError("the container is not started, or was removed")
        return self.container_id

    def exec(self, cmd: list[str] | str, timeout: int = 300, env: dict | None = None) -> ExecResult:
        result = self._exec(cmd, timeout, env)
        if result.rc == 0 and not result.stdout and not result.stderr and self.client.exec_output_may_be_lost:
            return self._exec(cmd, timeout, env)  # every caller reads, or sets up what can be set twice
        return result

    def _exec(self, cmd: list[str] | str, timeout: int, env: dict | None) -> ExecResult:
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if argv and argv[0] == IMAGE_PYTHON:
            argv = [self.image_python or "python3", *argv[1:]]
        if self.probe_python and argv and argv[0] == "python3":
            extra = [f"{k}={v}" for k, v in (env or {}).items()]
            declared = [e for e in self.probe_env if e.split("=", 1)[0] not in NOT_PASSED]
            argv = ["/usr/bin/env", "-i", *CLEAN_ENV, *declared, PROBE_PATH, *extra, *self.probe_python, *argv[1:]]
            env = None
        timeout_cmd = "/usr/bin/timeout" if self.probe_python else "timeout"
        argv = [timeout_cmd, "--kill-after=5", str(timeout)] + argv
        rc, out, err = self.client.exec_in(self.id, argv, env)
        return ExecResult(
            rc=rc, stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"), timed_out=rc in (124, 137)
        )

    def put_tree(self, folder: str, files: dict[str, bytes], mode: int = 0o755) -> None:
        """files as a new folder /tmp/<folder>, through the engine's archive API: no program in the
        image (mkdir) takes part."""
        self.client.put_archive(self.id, "/tmp", tree_tar(folder, files, mode))

    def put_files(self, dest_dir: str, files: dict[str, bytes], mode: int = 0o755) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))
        self.exec(["mkdir", "-p", dest_dir])
        self.client.put_archive(self.id, dest_dir, buf.getvalue())

    def exists(self, path: str) -> bool:
        """Whether the container has anything at path, asked through the engine's archive API."""
        return self.client.get_archive(self.id, path) is not None

    def read_file(self, path: str) -> bytes | None:
        """The bytes of a regular file in the container, None when there is nothing at path; read
        through the engine's archive API, so no program in the image stands between the file and
        us. ValueError naming what is there when it is not a regular file."""
        data = self.client.get_archive(self.id, path)
        if data is None:
            return None
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                what = (
                    "nothing"
                    if member is None
                    else (
                        "a symlink to " + member.linkname
                        if member.issym()
                        else "a folder"
                        if member.isdir()
                        else "not a regular file"
                    )
                )
                raise ValueError(f"{what} where a file was expected")
            return cast(IO[bytes], tar.extractfile(member)).read()  # a regular file's member has a reader

    def remove(self) -> None:
        if self.container_id is not None:
            _kill_and_remove(self.client, self.container_id)
            self.container_id = None

    def __enter__(self) -> TrackedContainer:
        try:
            return self.start()
        except BaseException:  # Ctrl-C between create and start: the container exists, unnamed to us
            remove_session_leftovers(self.client, self.session)
            raise

    def __exit__(self, *exc: object) -> None:
        self.remove()


def tree_tar(folder: str, files: dict[str, bytes], mode: int = 0o755) -> bytes:
    """A tar of files under folder/ (the folder itself 0755, root's)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(folder)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _kill_and_remove(client: Engine, container_id: str) -> None:
    """SIGKILL first: a forced removal on podman stops the container the polite way, and `sleep`
    as PID 1 ignores SIGTERM, so each removal would wait out the 10 s stop timeout."""
    client.kill(container_id)
    with contextlib.suppress(EngineError):  # already gone
        client.remove_container(container_id)


def remove_session_leftovers(client: Engine, session: str) -> int:
    """Safety net after Ctrl-C or a crashed run: remove every container of the session."""
    n = 0
    for c in client.list_containers(label=f"{TEST_LABEL}={session}"):
        client.kill(c["Id"])
        try:
            client.remove_container(c["Id"])
        except ImageMissing:
            continue  # its own suite process removed it between the listing and here
        except EngineError as exc:
            if "already in progress" not in str(exc):
                raise
        n += 1
    return n


def run_as_users_do(
    client: Engine, image: str, argv: list[str], *, session: str, gpu: GpuAccess | None = None, timeout: int = 120
) -> ExecResult:
    """`docker run --rm IMAGE ARGV...` as a user types it: the image's own Entrypoint, Env, User
    and WorkingDir, nothing added but the GPU devices (which a user passes too, and which change
    no config). Exec into a running container skips the entrypoint, so only this shows what users
    get. A container that cannot start (its entrypoint missing) is exit 127 with the engine's
    error as stderr, as `docker run` reports it. Labelled with the session: a leftover after a
    crash is removed by remove_session_leftovers."""
    cid = client.create_container(
        image, list(argv), labels={TEST_LABEL: session}, **_device_options(gpu or GpuAccess())
    )
    try:
        try:
            client.start_container(cid)
        except EngineError as exc:
            return ExecResult(rc=127, stdout="", stderr=str(exc))
        rc = client.wait_container(cid, timeout)
        if rc is None:
            client.kill(cid)
        out, err = client.container_logs(cid)
        return ExecResult(
            rc=137 if rc is None else rc,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            timed_out=rc is None,
        )
    finally:
        _kill_and_remove(client, cid)  # still running when the wait was interrupted
