"""A registry base's own apt lists: the stack's apt_sources policy as shell, and the message that
names the list file and host of a failed source (the Debian mirror only when it failed)."""

from __future__ import annotations

from rocmforge.define.schema import AptSources
from rocmforge.host import aptsources

# apt 2.x's output for a list whose host does not resolve, then the marked source lines the
# checked update prints (the shape seen in the stand-in integration test).
DEAD_VENDOR = """\
Hit:1 http://deb.debian.org/debian sid InRelease
Err:2 http://rocm-apt.invalid/rocm/apt/6.4.3 sid InRelease
  Temporary failure resolving 'rocm-apt.invalid'
Reading package lists...
W: Failed to fetch http://rocm-apt.invalid/rocm/apt/6.4.3/dists/sid/InRelease  Temporary failure resolving 'rocm-apt.invalid'
W: Some index files failed to download. They have been ignored, or old ones used instead.
rocmforge-apt-source: /etc/apt/sources.list:deb http://deb.debian.org/debian sid main
rocmforge-apt-source: /etc/apt/sources.list.d/rocm.list:deb [arch=amd64] http://rocm-apt.invalid/rocm/apt/6.4.3 sid main
"""  # noqa: E501

DEAD_DEBIAN = """\
Err:1 http://deb.debian.org/debian trixie InRelease
  Could not connect to deb.debian.org:80 (151.101.2.132), connection timed out
E: Failed to fetch http://deb.debian.org/debian/dists/trixie/InRelease  Could not connect to deb.debian.org:80
"""

NOT_FOUND = """\
Err:3 https://repo.radeon.com/rocm/apt/5.7 focal Release
  404  Not Found [IP: 10.0.0.1 443]
E: The repository 'https://repo.radeon.com/rocm/apt/5.7 focal Release' does not have a Release file.
rocmforge-apt-source: /etc/apt/sources.list.d/rocm.list:deb [arch=amd64] https://repo.radeon.com/rocm/apt/5.7 focal main
"""


def test_a_dead_vendor_list_is_named_with_its_host_and_the_setting():
    msg = aptsources.failure_message("rocm5.7-ubuntu20.04", DEAD_VENDOR)
    assert "/etc/apt/sources.list.d/rocm.list" in msg and "host rocm-apt.invalid" in msg
    assert "Temporary failure resolving 'rocm-apt.invalid'" in msg
    assert "stacks.rocm5.7-ubuntu20.04.apt_sources" in msg and "drop: [rocm.list]" in msg
    assert "repo.radeon.com/rocm/apt/<version>" in msg
    # The Debian archive answered: neither it nor the Debian mirror setting is blamed.
    assert "deb.debian.org" not in msg and "ROCMFORGE_DEBIAN_MIRROR" not in msg


def test_the_debian_mirror_is_named_only_when_it_failed():
    msg = aptsources.failure_message("debian13-rocm5.7", DEAD_DEBIAN)
    assert "deb.debian.org" in msg and "ROCMFORGE_DEBIAN_MIRROR" in msg and "apt_sources" not in msg
    through = DEAD_DEBIAN.replace("deb.debian.org", "mirror.example.invalid")
    msg = aptsources.failure_message("debian13-rocm5.7", through, mirror="http://mirror.example.invalid/debian")
    assert "the Debian mirror http://mirror.example.invalid/debian ($ROCMFORGE_DEBIAN_MIRROR)" in msg


def test_a_404_is_a_failed_source_too():
    [failed] = aptsources.failed_sources(NOT_FOUND)
    assert (failed.host, failed.file) == ("repo.radeon.com", "/etc/apt/sources.list.d/rocm.list")
    assert failed.reason.startswith("404")
    assert aptsources.update_failed(NOT_FOUND)


def test_clean_output_is_no_failure():
    ok = "Hit:1 http://deb.debian.org/debian sid InRelease\nReading package lists...\n"
    assert not aptsources.update_failed(ok) and aptsources.failure_message("s", ok) is None


def test_policy_as_shell_and_as_recorded():
    policy = AptSources(
        drop=["amdgpu.list"], replace={"rocm.list": "deb [arch=amd64] https://repo.radeon.com/rocm/apt/5.7 focal main"}
    )
    script = aptsources.policy_script(policy)
    assert script == (
        "rm -f /etc/apt/sources.list.d/amdgpu.list && printf '%s\\n' "
        "'deb [arch=amd64] https://repo.radeon.com/rocm/apt/5.7 focal main' > /etc/apt/sources.list.d/rocm.list"
    )
    assert aptsources.record(policy) == {"drop": ["amdgpu.list"], "replace": dict(policy.replace)}
    assert aptsources.policy_script(AptSources(keep=True)) == "" and aptsources.record(AptSources(keep=True)) == {
        "keep": True
    }
    assert aptsources.checked_update(policy).startswith(script + " && { apt-get update")
