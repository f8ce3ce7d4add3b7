"""The compiled catalog (`catalog/compiled.json`): the catalog's YAML parsed ahead of time, so that a command need
not import PyYAML (issue 12, start-up). It must say what the YAML says, and an edited file must be read from its
YAML, never from a stale entry."""

import json
import zlib

import pytest

from chalk.specs import catalog as C


def test_the_compiled_catalog_matches_the_yaml():
    shipped = json.loads(C.package_path("catalog", C.COMPILED_FILE).read_text())
    fresh = C.compile_catalog()
    stale = sorted(set(shipped["files"]) ^ set(fresh["files"])) + sorted(
        k for k in set(shipped["files"]) & set(fresh["files"]) if shipped["files"][k] != fresh["files"][k])
    assert stale == [], f"catalog/compiled.json is out of date for {stale}: run python scripts/compile_catalog.py"
    assert len(fresh["files"]) == len(list(C._catalog_dir().rglob("*.yaml")))  # every file compiles (an .inf too)


def test_every_catalog_file_reads_the_same_as_its_yaml():
    for f in sorted(C._catalog_dir().rglob("*.yaml")):
        assert C.read_yaml(f) == C._parse_yaml(f.read_bytes(), str(f)), f


def test_a_matching_entry_is_read_and_a_stale_one_is_not(monkeypatch):
    f = C.package_path("catalog", "chips", "h100-sxm.yaml")
    raw = f.read_bytes()
    key = "chips/h100-sxm.yaml"
    marked = {**C._parse_yaml(raw, key), "name": "from the compiled entry"}
    entry = [zlib.crc32(raw), len(raw), json.dumps(marked)]
    monkeypatch.setattr(C, "_compiled", lambda: {key: entry})
    assert C.read_yaml(f)["name"] == "from the compiled entry"  # the entry is what a matching file reads
    first = C.read_yaml(f)
    first["name"] = "changed by a caller"
    assert C.read_yaml(f)["name"] == "from the compiled entry"  # each read is a new object
    monkeypatch.setattr(C, "_compiled", lambda: {key: [entry[0] ^ 1, *entry[1:]]})  # the file changed since
    assert C.read_yaml(f)["name"] == C._parse_yaml(raw, key)["name"] != "from the compiled entry"
    monkeypatch.setattr(C, "_compiled", lambda: {key: [entry[0], entry[1] + 1, entry[2]]})
    assert C.read_yaml(f)["name"] != "from the compiled entry"


def test_a_file_outside_the_catalog_is_always_parsed(tmp_path, monkeypatch):
    src = C.package_path("catalog", "chips", "h100-sxm.yaml")
    mine = tmp_path / "h100-sxm.yaml"
    mine.write_bytes(src.read_bytes().replace(b"name:", b"name: Mine #", 1))
    assert C._catalog_key(mine) is None
    assert C.read_yaml(mine)["name"].startswith("Mine")


def test_a_missing_or_broken_compiled_catalog_falls_back_to_yaml(tmp_path, monkeypatch):
    (tmp_path / "catalog").mkdir()
    (tmp_path / "catalog" / C.COMPILED_FILE).write_text("{not json")
    monkeypatch.setattr(C, "PACKAGE_DIR", tmp_path)
    C._compiled.cache_clear()
    try:
        assert C._compiled() == {}
        f = tmp_path / "catalog" / "x.yaml"
        f.write_text("a: 1\n")
        assert C.read_yaml(f) == {"a": 1}
    finally:
        C._compiled.cache_clear()


def test_compile_leaves_out_what_json_cannot_carry(tmp_path):
    (tmp_path / "ok.yaml").write_text("a: .inf\nb: [1, x]\n")
    (tmp_path / "date.yaml").write_text("when: 2026-11-24\n")
    (tmp_path / "intkey.yaml").write_text("8: eight\n")
    (tmp_path / "nan.yaml").write_text("a: .nan\n")
    files = C.compile_catalog(tmp_path)["files"]
    assert sorted(files) == ["ok.yaml"]
    assert json.loads(files["ok.yaml"][2]) == {"a": float("inf"), "b": [1, "x"]}


def test_malformed_yaml_is_one_line_still(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("a: [1, 2\n")
    with pytest.raises(C.SpecError, match="malformed YAML at line"):
        C.read_yaml(f)
