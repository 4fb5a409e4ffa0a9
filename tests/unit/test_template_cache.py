"""Compiled templates kept in the user's cache: used when the source is unchanged, never when it changed."""

from __future__ import annotations

import jinja2

from rocmforge.render import templatecache


def env(folder):
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), bytecode_cache=templatecache.TemplateCache())


def test_a_changed_template_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "t").mkdir()
    tpl = tmp_path / "t" / "a.j2"
    tpl.write_text("one {{ x }}")
    assert env(tmp_path / "t").get_template("a.j2").render(x=1) == "one 1"
    entries = list((tmp_path / "cache" / "rocmforge" / "templates").glob("*.jinja"))
    assert len(entries) == 1
    tpl.write_text("two {{ x }}")
    assert env(tmp_path / "t").get_template("a.j2").render(x=2) == "two 2"
    # the entry is what a fresh environment loads: a compile would have to go through Jinja's compiler
    monkeypatch.setattr(jinja2.Environment, "compile", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    assert env(tmp_path / "t").get_template("a.j2").render(x=3) == "two 3"


def test_an_unusable_cache_only_means_compiling(tmp_path, monkeypatch):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.j2").write_text("ok")
    assert env(tmp_path / "t").get_template("a.j2").render() == "ok"
    # a truncated entry is compiled over
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c2"))
    env(tmp_path / "t").get_template("a.j2")
    (entry,) = (tmp_path / "c2" / "rocmforge" / "templates").glob("*.jinja")
    entry.write_bytes(entry.read_bytes()[:20])
    assert env(tmp_path / "t").get_template("a.j2").render() == "ok"


def test_only_the_most_recent_entries_are_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(templatecache, "KEEP", 2)
    (tmp_path / "t").mkdir()
    for i in range(4):
        (tmp_path / "t" / f"{i}.j2").write_text(str(i))
        env(tmp_path / "t").get_template(f"{i}.j2")
    assert len(list((tmp_path / "cache" / "rocmforge" / "templates").glob("*.jinja"))) == 2
