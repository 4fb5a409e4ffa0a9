"""A container whose lifetime the caller owns: started with the GPU devices the host has,
every exec wrapped in `timeout` (docker-py has no read timeout), always removed."""

from __future__ import annotations

import glob
import io
import os
import tarfile
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docker import DockerClient

TEST_LABEL = "io.rocmforge.test-session"


@dataclass(frozen=True)
class GpuAccess:
    """The device nodes ROCm needs and the numeric GIDs that own them (what --group-add needs)."""
    devices: tuple[str, ...] = ()
    group_ids: tuple[int, ...] = ()

    @property
    def present(self) -> bool:
        return "/dev/kfd" in self.devices

    def reason_absent(self) -> str:
        return "no /dev/kfd on this host (no AMD GPU or amdgpu driver not loaded)"


def host_gpu_access(dev_root: str = "/dev") -> GpuAccess:
    kfd = os.path.join(dev_root, "kfd")
    if not os.path.exists(kfd):
        return GpuAccess()
    nodes = [kfd] + sorted(glob.glob(os.path.join(dev_root, "dri", "renderD*")) +
                           glob.glob(os.path.join(dev_root, "dri", "card*")))
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


@dataclass
class TrackedContainer:
    client: object
    image: str
    gpu: GpuAccess = field(default_factory=GpuAccess)
    session: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    container: object = None

    def start(self) -> "TrackedContainer":
        kwargs = {}
        if self.gpu.present:
            kwargs["devices"] = [f"{d}:{d}:rwm" for d in self.gpu.devices]
            kwargs["group_add"] = [str(g) for g in self.gpu.group_ids]
        self.container = self.client.containers.run(
            self.image, ["infinity"], entrypoint=["sleep"], detach=True, labels={TEST_LABEL: self.session},
            security_opt=["seccomp=unconfined"] if self.gpu.present else None, **kwargs)
        return self

    @property
    def id(self) -> str:
        return self.container.id

    def exec(self, cmd: list[str] | str, timeout: int = 300, env: dict | None = None) -> ExecResult:
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        argv = ["timeout", "--kill-after=5", str(timeout)] + argv
        api = self.client.api
        exec_id = api.exec_create(self.container.id, argv, environment=env, stdout=True, stderr=True)["Id"]
        out, err = api.exec_start(exec_id, demux=True)
        rc = api.exec_inspect(exec_id)["ExitCode"]
        return ExecResult(rc=rc, stdout=(out or b"").decode(errors="replace"),
                          stderr=(err or b"").decode(errors="replace"), timed_out=rc in (124, 137))

    def put_files(self, dest_dir: str, files: dict[str, bytes], mode: int = 0o755) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))
        self.exec(["mkdir", "-p", dest_dir])
        self.container.put_archive(dest_dir, buf.getvalue())

    def remove(self) -> None:
        if self.container is not None:
            try:
                self.container.remove(force=True)
            except Exception:  # already gone
                pass
            self.container = None

    def __enter__(self) -> "TrackedContainer":
        try:
            return self.start()
        except BaseException:    # Ctrl-C between create and start: the container exists, unnamed to us
            remove_session_leftovers(self.client, self.session)
            raise

    def __exit__(self, *exc) -> None:
        self.remove()


def remove_session_leftovers(client: DockerClient, session: str) -> int:
    """Safety net after Ctrl-C or a crashed run: remove every container of the session."""
    n = 0
    for c in client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={session}"}):
        c.remove(force=True)
        n += 1
    return n
