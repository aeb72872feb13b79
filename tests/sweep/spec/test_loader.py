"""Reading a spec file: size limit, the YAML the loader refuses, and one line per problem."""

import pytest
import yaml

from sweep.spec import SpecError, load_spec
from sweep.spec.loader import MAX_SPEC_BYTES
from sweep.spec.yaml_safe import MAX_DEPTH, SPEC_LOADER, loader_class, read_yaml

BASE = "name: t\ndata: builtin:python-stdlib\ntrain: {tokens: 100000}\n"
# Both PyYAML loaders: libyaml's (used where installed) and the pure-Python fallback.
LOADERS = [pytest.param(loader_class(yaml.SafeLoader), id="python")]
if hasattr(yaml, "CSafeLoader"):
    LOADERS.append(pytest.param(loader_class(yaml.CSafeLoader), id="libyaml"))


def problem(tmp_path, text: str | bytes) -> str:
    """The one problem ``load_spec`` reports for a file holding ``text``."""
    path = tmp_path / "s.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert len(info.value.problems) == 1, info.value.problems
    return info.value.problems[0]


def refused(text: str, loader) -> str:
    with pytest.raises(yaml.YAMLError) as info:
        read_yaml(text, loader)
    return info.value.problem


def test_libyaml_reads_specs_where_pyyaml_has_it():
    base = yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader
    assert issubclass(SPEC_LOADER, base)


def test_a_file_over_the_limit_is_refused_before_it_is_parsed(tmp_path):
    # Invalid YAML past the first line: were it parsed, the message would say so.
    text = BASE + "description: x\n" + "[" * (MAX_SPEC_BYTES - len(BASE))
    message = problem(tmp_path, text)
    assert f"{len(text):,} bytes" in message and f"{MAX_SPEC_BYTES:,} bytes" in message
    assert "YAML" not in message
    path = tmp_path / "limit.yaml"
    path.write_text(BASE + "description: " + "x" * (MAX_SPEC_BYTES - len(BASE) - 14) + "\n")
    assert path.stat().st_size == MAX_SPEC_BYTES
    assert load_spec(path).name == "t"


@pytest.mark.parametrize("loader", LOADERS)
def test_both_loaders_read_scientific_notation_as_floats(loader):
    assert read_yaml("a: 1e-3\nb: 2e5\nc: [1.5e+3]\nd: 1e3x\n", loader) == \
        {"a": 1e-3, "b": 2e5, "c": [1.5e3], "d": "1e3x"}


@pytest.mark.parametrize("loader", LOADERS)
def test_an_alias_bomb_is_refused_at_its_first_alias(loader):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    message = refused("\n".join(lines), loader)
    assert message.startswith("a1[0]: line 2: the alias *a0 repeats an anchored value")
    assert "aliases are not allowed" in message


@pytest.mark.parametrize("loader", LOADERS)
def test_a_reused_scalar_names_the_line_of_its_alias(loader):
    text = "train:\n  tokens: &t 100000\nmodel:\n  n_layers:\n    - 1\n    - *t\n"
    assert refused(text, loader).startswith("model.n_layers[1]: line 6: the alias *t")


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(("text", "expected"), [
    ("train:\n  lr: 0.1\n  tokens: 5\n  lr: 0.2\n",
     "train.lr: given twice, at lines 2 and 4; keep one"),
    ("model: {}\ntrain: {}\nmodel: {d_model: 64}\n", "model: given twice, at lines 1 and 3"),
    ("train: {lr: 1, lr: 2}\n", "train.lr: given twice, on line 1"),
    ("model:\n  d_model:\n    choice: [1]\n    choice: [2]\n",
     "model.d_model.choice: given twice, at lines 3 and 4"),
    ("a:\n  1: x\n  1.0: y\n", "a.1.0: given twice, at lines 2 and 3"),
])
def test_a_key_given_twice_is_refused_naming_both_lines(loader, text, expected):
    assert refused(text, loader).startswith(expected)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(("text", "expected"), [
    ("name: t\ndata: !!python/object:os.system {}\n",
     "data: line 2: the YAML tag !!python/object:os.system is not allowed"),
    ("data: !!python/object/apply:os.system [ls]\n",
     "data: line 1: the YAML tag !!python/object/apply:os.system"),
    ("name: !!binary aGVsbG8=\n", "name: line 1: the YAML tag !!binary"),
    ("model: !!set {a, b}\n", "model: line 1: the YAML tag !!set"),
    ("name: !shout t\n", "name: line 1: the YAML tag !shout"),
    ("train:\n  <<: {lr: 1}\n", "train.<<: line 2: merge keys (<<) are not allowed"),
])
def test_tags_and_merge_keys_are_refused(loader, text, expected):
    assert refused(text, loader).startswith(expected)


@pytest.mark.parametrize("loader", LOADERS)
def test_nesting_is_bounded(loader):
    ok = "a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert read_yaml(ok, loader)["a"]
    assert f"nested more than {MAX_DEPTH} levels" in refused(
        "a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), loader)


@pytest.mark.parametrize("loader", LOADERS)
def test_plain_values_and_timestamps_still_load(loader):
    text = "a: [1, 2.5, true, null, x, 2024-01-02]\nb: {c: {d: [[1]]}}\n"
    data = read_yaml(text, loader)
    assert data["a"][:5] == [1, 2.5, True, None, "x"] and data["b"] == {"c": {"d": [[1]]}}
    assert read_yaml("# only a comment\n", loader) is None


@pytest.mark.parametrize(("text", "expected"), [
    (b"name: t\ndata: builtin:python-stdlib\n\xff\xfe\n", "line 3: byte 0xff is not UTF-8"),
    ("", "the spec is empty"),
    ("# nothing but a comment\n", "the spec is empty"),
    ("- a\n- b\n", "expected a mapping of sections (name, data, model, train, ...), got a list"),
    ("just text\n", "got 'just text'"),
    ("name: [unclosed\n", "invalid YAML at line 2, column 1:"),
    ("name: t\n\tdata: x\n", "invalid YAML at line 2"),
    ("name: t\x00\n", "invalid YAML at line 1: control characters are not allowed"),
    ("train:\n  tokens: " + "9" * 5000 + "\n", "invalid YAML value: Exceeds the limit"),
])
def test_file_level_problems_are_one_line(tmp_path, text, expected):
    message = problem(tmp_path, text)
    assert expected in message and "\n" not in message


def test_unreadable_paths_are_spec_errors(tmp_path):
    with pytest.raises(SpecError, match="cannot read the file"):
        load_spec(tmp_path / "missing.yaml")
    with pytest.raises(SpecError, match="cannot read the file"):
        load_spec(tmp_path)
