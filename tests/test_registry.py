"""autotelic.registry: names -> entries of one kind (lazy built-ins, registered ones, installed packages' entry
points) and the one importer of a user's module by dotted path or file path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autotelic.registry import ModuleFileNotFoundError, Registry, import_user_module, is_missing


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path holding ``plugin_xyz.py``, not imported yet."""
    (tmp_path / "plugin_xyz.py").write_text("TABLE = {'b': 2, 'a': 1}\nclass Thing:\n    name = 'thing'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("plugin_xyz", None)


def test_built_ins_are_imported_when_first_asked_for(site):
    things = Registry("thing", {"one": "plugin_xyz:Thing", "module": "plugin_xyz"}, tables=["plugin_xyz:TABLE"])
    assert "plugin_xyz" not in sys.modules
    assert things.names() == ["one", "module", "b", "a"]  # entries, then tables, in their order
    assert things.get("one").name == "thing" and things.get("module") is sys.modules["plugin_xyz"]
    assert things.get("a") == 1 and things.items()[-2:] == [("b", 2), ("a", 1)]


def test_a_registered_entry_comes_after_the_built_ins_and_takes_no_taken_name(site):
    things = Registry("thing", {"one": "plugin_xyz:Thing"})
    things.register("two", 2)
    things.register("two", 2)  # the same entry again: nothing changes
    assert list(things) == ["one", "two"] and "two" in things and things.find("three") is None
    with pytest.raises(ValueError, match="^thing 'one' is already registered$"):
        things.register("one", 1)


def test_an_unknown_name_is_one_line_listing_the_valid_ones():
    with pytest.raises(ValueError, match="^unknown task family 'nope'; valid: a, b$"):
        Registry("task family", {"b": 2, "a": 1}).get("nope")


def test_an_installed_package_announces_entries_under_the_kinds_group(site):
    things = Registry("task family", {"local": 0})
    assert things.group == "autotelic.task_families"
    dist = site / "plugin_xyz-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-xyz\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[autotelic.task_families]\nz_thing = plugin_xyz:Thing\n"
                                           "local = plugin_xyz:TABLE\n[autotelic.rewards]\nother = plugin_xyz\n")
    assert things.names() == ["local", "z_thing"]  # a name the table holds stays the table's
    assert things.get("z_thing").name == "thing" and things.get("local") == 0 and "other" not in things


def test_a_user_module_by_dotted_path_or_file(site, tmp_path):
    assert import_user_module("plugin_xyz").TABLE == {"b": 2, "a": 1}
    (tmp_path / "helper_xyz.py").write_text("VALUE = 7\n")
    (tmp_path / "user_file.py").write_text("from helper_xyz import VALUE\n")  # its own folder importable
    module = import_user_module(str(tmp_path / "user_file.py"))
    assert module.VALUE == 7 and import_user_module(str(tmp_path / "user_file.py")) is module  # loaded once
    sys.modules.pop("helper_xyz", None)


@pytest.mark.parametrize("where, source, missing", [
    ("no_such_xyz.module", None, True),
    ("missing/file.py", None, True),
    ("imports_missing_xyz", "import no_such_dependency_xyz\n", False),
])
def test_a_missing_module_is_told_from_a_missing_import(tmp_path, monkeypatch, where, source, missing):
    if source is not None:
        (tmp_path / f"{where}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as error:
        import_user_module(where)
    assert is_missing(error.value, where) is missing
    assert isinstance(error.value, ModuleFileNotFoundError) is where.endswith(".py")
    if where.endswith(".py"):
        assert str(error.value) == f"file {where} not found" and not Path(where).exists()
