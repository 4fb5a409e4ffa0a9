"""The mirror setting's pure parts: validation, what reaches a Dockerfile, and what the
normaliser drops from an image's history."""

from __future__ import annotations

import pytest

from rocmforge.assemble.image.config import drop_site_args
from rocmforge.host import aptmirror
from rocmforge.shared.errors import UserError
from tests.conftest import ROOT


@pytest.mark.parametrize(
    "value, want",
    [
        ("", None),
        ("  ", None),
        ("http://mirror.example/debian", "http://mirror.example/debian"),
        ("http://10.0.0.5:3142/debian/", "http://10.0.0.5:3142/debian"),
        ("https://user@mirror.example/debian", "https://user@mirror.example/debian"),
    ],
)
def test_good_settings(value, want):
    assert aptmirror.from_env({aptmirror.ENV: value}) == want
    assert aptmirror.effective({aptmirror.ENV: value}) == (want or aptmirror.CANONICAL)


@pytest.mark.parametrize(
    "value",
    [
        "deb.debian.org/debian",
        "http://a b/debian",
        "ftp://x/debian",
        'http://x/debian"; rm -rf /',
        "http://x/$(id)",
        "file:///srv/debian",
    ],
)
def test_bad_settings_name_the_variable(value):
    with pytest.raises(UserError) as exc:
        aptmirror.from_env({aptmirror.ENV: value})
    assert str(exc.value).startswith("$ROCMFORGE_DEBIAN_MIRROR: ")


@pytest.mark.parametrize(
    "created_by, want",
    [
        (
            "|2 ROCMFORGE_DEBIAN_MIRROR=http://m:1/debian SOURCE_DATE_EPOCH=5 /bin/bash -c apt-get update",
            "|1 SOURCE_DATE_EPOCH=5 /bin/bash -c apt-get update",
        ),
        ("|1 ROCMFORGE_DEBIAN_MIRROR=http://m/debian /bin/sh -c x", "/bin/sh -c x"),
        (
            "|1 SOURCE_DATE_EPOCH=5 /bin/sh -c echo ROCMFORGE_DEBIAN_MIRROR=y",
            "|1 SOURCE_DATE_EPOCH=5 /bin/sh -c echo ROCMFORGE_DEBIAN_MIRROR=y",
        ),
        ("/bin/sh -c #(nop)  ARG ROCMFORGE_DEBIAN_MIRROR", "/bin/sh -c #(nop)  ARG ROCMFORGE_DEBIAN_MIRROR"),
    ],
)
def test_the_mirror_argument_leaves_the_history(created_by, want):
    assert drop_site_args(created_by) == want


def test_debian_apt_steps_read_the_mirror_and_leave_nothing():
    checked = 0
    for dockerfile in sorted((ROOT / "images").glob("*/Dockerfile")):
        text = dockerfile.read_text()
        debian = "\n# stack:  debian" in text  # the AMD stacks' Ubuntu archives are not the Debian mirror's
        for step in text.split("\nRUN ")[1:]:
            if "apt-get install" not in step:
                continue
            has_setup = aptmirror.SETUP in step and aptmirror.UPDATE in step
            assert has_setup == debian, dockerfile
            if debian:
                assert aptmirror.SCRATCH in step.split("apt-get clean")[1], f"{dockerfile}: the apt scratch must go"
                checked += 1
    assert checked >= 5


def test_unreachable_is_told_from_a_missing_pin():
    assert aptmirror.unreachable_hint(
        "E: Failed to fetch http://127.0.0.1:9/debian/dists/trixie/InRelease  Unable to connect to 127.0.0.1:9:"
    )
    assert not aptmirror.unreachable_hint("E: Version '9.9' for 'netbase' was not found")
    assert "$ROCMFORGE_DEBIAN_MIRROR" in aptmirror.unreachable_message("http://m/debian")
    assert aptmirror.CANONICAL in aptmirror.unreachable_message(None)
