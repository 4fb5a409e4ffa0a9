"""The `docker run` line ROCm containers need: the GPU device nodes, their owning groups by
numeric GID (the container user is not in the host's render group by name), shared memory for
PyTorch data loaders, and the environment the doctor recommends."""

from __future__ import annotations

import shlex

from rocmforge.host.container import GpuAccess


def docker_run_argv(image: str, gpu: GpuAccess, env: dict[str, str], cmd: list[str], *,
                    interactive: bool, docker: str = "docker", cdi_devices: tuple[str, ...] = (),
                    keep_groups: bool = False) -> list[str]:
    """cdi_devices: CDI names (amd.com/gpu=0, ...) that replace the raw nodes, given only when the
    host's spec fits it and the engine reads it (the doctor's cdi check). keep_groups: a rootless
    podman, whose user namespace does not map the nodes' GIDs: the user's own groups are kept
    instead of --group-add GID."""
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
    argv.append("--ipc=host")
    for key, value in sorted(env.items()):
        argv += ["-e", f"{key}={value}"]
    argv.append(image)
    return argv + list(cmd)


def shell_line(argv: list[str]) -> str:
    return shlex.join(argv)
