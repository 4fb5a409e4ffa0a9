"""The `docker run` line ROCm containers need: the GPU device nodes, their owning groups by
numeric GID (the container user is not in the host's render group by name), shared memory for
RCCL and PyTorch data loaders, and the environment the doctor recommends.

Shared memory is ``--shm-size`` (the container's own tmpfs, sized by the doctor from the host's
GPUs and memory: rocmforge.doctor.platform_checks), not ``--ipc=host``: with the host's IPC
namespace, segments that crashed jobs leave in the host's /dev/shm outlive them and fill it until
later jobs die (issue 40); a container's own tmpfs goes away with it."""

from __future__ import annotations

import shlex

from rocmforge.host.container import GpuAccess

DEFAULT_SHM = "2g"  # without the doctor's sizing: Docker's 64 MB overflows a single data loader
# WSL2: the GPU is /dev/dxg, reached through the WSL libraries (libdxcore, the driver's store) that
# Windows mounts under /usr/lib/wsl, by AMD's WSL runtime once it is told to look for it.
WSL_LIBS = "/usr/lib/wsl"
WSL_ENV = {"HSA_ENABLE_DXG_DETECTION": "1"}


def docker_run_argv(
    image: str,
    gpu: GpuAccess,
    env: dict[str, str],
    cmd: list[str],
    *,
    interactive: bool,
    docker: str = "docker",
    cdi_devices: tuple[str, ...] = (),
    keep_groups: bool = False,
    shm_size: str | None = None,
) -> list[str]:
    """cdi_devices: CDI names (amd.com/gpu=0, ...) that replace the raw nodes, given only when the
    host's spec fits it and the engine reads it (the doctor's cdi check). keep_groups: a rootless
    podman, whose user namespace does not map the nodes' GIDs: the user's own groups are kept
    instead of --group-add GID. shm_size: the doctor's --shm-size for this host, else DEFAULT_SHM."""
    argv = [docker, "run", "--rm"]
    if interactive:
        argv.append("-it")
    if gpu.present:
        for device in cdi_devices or ("/dev/kfd", "/dev/dri"):
            argv += ["--device", device]
        for gid in ("keep-groups",) if keep_groups else gpu.group_ids:
            argv += ["--group-add", str(gid)]
        # ROCm's debugger/profiler interfaces and some HIP runtimes need syscalls the default profile blocks.
        argv += ["--security-opt", "seccomp=unconfined"]
    elif gpu.wsl:
        argv += ["--device", "/dev/dxg", "-v", f"{WSL_LIBS}:{WSL_LIBS}:ro"]
        env = {**WSL_ENV, **env}
    argv.append(f"--shm-size={shm_size or DEFAULT_SHM}")
    for key, value in sorted(env.items()):
        argv += ["-e", f"{key}={value}"]
    argv.append(image)
    return argv + list(cmd)


def shell_line(argv: list[str]) -> str:
    """The command as one line a POSIX shell runs as is, each argument quoted where it needs it."""
    return shlex.join(argv)


def dry_run_text(
    image: str,
    gpu: GpuAccess,
    env: dict[str, str],
    cmd: list[str],
    *,
    interactive: bool,
    docker_cdi: tuple[str, ...] = (),
    podman_cdi: tuple[str, ...] = (),
    shm_size: str | None = None,
) -> str:
    """`run --dry-run`: the whole command for Docker and for podman, each after a `# docker` /
    `# podman` comment line, so the output is itself a shell script and each command one line.
    podman keeps the user's groups (keep-groups) instead of numeric GIDs: a rootless podman's user
    namespace does not map the host's render GID, and for a rootful one the groups are root's."""
    docker = docker_run_argv(image, gpu, env, cmd, interactive=interactive, cdi_devices=docker_cdi, shm_size=shm_size)
    podman = docker_run_argv(
        image,
        gpu,
        env,
        cmd,
        interactive=interactive,
        docker="podman",
        cdi_devices=podman_cdi,
        keep_groups=True,
        shm_size=shm_size,
    )
    return "\n".join(["# docker", shell_line(docker), "# podman", shell_line(podman)])
