"""A torch version the lock cannot hold with a pip constraint is refused at lock time, with the
value; the versions AMD's and Debian's images report are held."""

from rocmforge.resolve.pylock import torch_version_problem


def test_versions_amd_and_debian_report_are_held():
    for v in ("2.1.2+git53da8f8", "2.1.0a0+git1234abc", "1.13.1+rocm5.7", "2.14.1+debian", "2.3.0"):
        assert torch_version_problem(v, v) is None, v


def test_an_unparseable_version_is_named():
    assert (
        torch_version_problem("unknown", "2.1.2")
        == "torch.__version__ is 'unknown', not a version pip can hold (PEP 440)"
    )
    assert "the torch distribution's version is '2.1.2 git'" in torch_version_problem("2.1.2", "2.1.2 git")
