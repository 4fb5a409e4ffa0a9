"""The `docker run` line ROCm containers need: the GPU device nodes, their owning groups by
numeric GID (the container user is not in the host's render group by name), shared memory for
PyTorch data loaders, and the environment the doctor recommends."""

from __future__ import annotations

import shlex

from rocmforge.host.container import GpuAccess


def docker_run_argv(image: str, gpu: GpuAccess, env: dict[str, str], cmd: list[str], *,
                    interactive: bool, docker: str = "docker") -> list[str]:
    argv = [docker, "run", "--rm"]
    if interactive:
        argv.append("-it")
    if gpu.present:
        argv += ["--device", "/dev/kfd", "--device", "/dev/dri"]
        for gid in gpu.group_ids:
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
