"""Claims in README.md and docs/ checked against the code, mechanically: defaults in prose and in
`--help` against the parsers, formulas against the constants and functions that apply them, the
table of which arguments take a URL against what each command does with one, module maps against the
tree, names the docs cite against the modules, example JSON against what the tools write. (The
examples themselves run in tests/test_doc_examples.py.)"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import re
import shlex
import tarfile

import pytest

from tests.fixtures.docs import DOCS, REPO, SCRIPTS, fenced_blocks

def markdown_table(doc: str, heading: str) -> list[list[str]]:
    """The rows (cells, stripped) of the first table under `heading` in `doc`."""
    text = (REPO / doc).read_text()
    text = text[text.index(heading):]
    lines = [line for line in text.split("\n\n", 3)[1:4] if line.startswith("|")][0].splitlines()
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[2:]]


URL_TABLE = markdown_table("docs/storage.md", "## Which arguments take a URL")
# Each argument of the table in a command that gets past argparse; {url} is where the URL goes. The
# other arguments name nothing that exists, so an argument refused "at once" is refused before any
# of them is looked at.
URL_PROBES = {
    ("prepare-shards", "--out"): "--train t.tar --val v.tar --devkit d.tgz --out {url}",
    ("prepare-shards", "--train"): "--train {url} --val v.tar --devkit d.tgz --out o",
    ("prepare-shards", "--val"): "--train t.tar --val {url} --devkit d.tgz --out o",
    ("prepare-shards", "--test"): "--train t.tar --val v.tar --devkit d.tgz --test {url} --splits train,val,test --out o",
    ("prepare-shards", "--devkit"): "--train t.tar --val v.tar --devkit {url} --out o",
    ("prepare-shards", "--val-labels"): "--train t.tar --val v.tar --val-labels {url} --out o",
    ("prepare-shards", "--staging"): "--train t.tar --val v.tar --devkit d.tgz --staging {url} --out memory://doc-url/o",
    ("prepare-shards", "--classes"): "--train t.tar --val v.tar --devkit d.tgz --classes {url} --out o",
    ("prepare-shards", "--train-list"): "--train t.tar --val v.tar --devkit d.tgz --train-list {url} --out o",
    ("prepare-shards finalize", "OUT"): "finalize {url}",
    ("prepare-shards adopt", "SRC"): "adopt {url} --out o",
    ("prepare-shards adopt", "--out"): "adopt src --out {url}",
    ("prepare-shards derive", "SRC"): "derive {url} --out o",
    ("prepare-shards derive", "--out"): "derive src --out {url}",
    ("audit-shards", "DATA"): "{url}",
    ("audit-shards", "--json"): "data --json {url}",
    ("inspect-shards", "DATA"): "{url} --out o.png",
    ("inspect-shards", "--out"): "data --out {url}",
    ("inspect-shards", "--extract"): "data --key k --extract {url}",
    ("bench-loader", "DATA"): "{url}",
    ("bench-loader", "--peers"): "data --compare --peers {url}",
    ("bench-loader", "--also-set"): "data --compare --also-set {url}",
    ("train-imagenet", "--data"): "--data {url} --out o",
    ("train-imagenet", "--out"): "--data data --out {url}",
    ("train-imagenet", "--cache-dir"): "--data data --out o --cache-dir {url}",
    ("train-imagenet", "--weights"): "--data data --out o --weights {url}",
    ("train-imagenet", "--resume"): "--data data --out o --resume {url}",
    ("report-run", "RUN_DIR"): "{url}",
    ("report-run", "--out"): "run --out {url}",
    ("make-synthetic-imagenet", "OUT"): "{url} --classes 1 --train-per-class 1 --val-per-class 1 --no-quirks --quiet",
}
REFUSED_AS_URL = re.compile(r"takes a local|not a URL|is read-only")


def url_table_rows() -> list[tuple[str, str, bool]]:
    """(command, argument, takes a URL) for every argument the table names (the library row aside)."""
    rows = []
    for command, arguments, answer in URL_TABLE:
        if command != "the library":
            rows += [(command.strip("`"), a.strip("` "), answer.startswith("yes")) for a in arguments.split(",")]
    return rows


def test_the_url_table_names_every_command_and_only_probed_arguments():
    rows = url_table_rows()
    assert {(c, a) for c, a, _ in rows} == set(URL_PROBES)
    assert {c.split()[0] for c, _, _ in rows} == set(SCRIPTS) - {"imagenet-shards-doctor"}  # doctor takes no path


def _run_main(command: str, argv: list[str]) -> tuple[int, str]:
    """The console script's main in this process: (exit code, stderr)."""
    module, func = SCRIPTS[command.split()[0]].split(":")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = getattr(importlib.import_module(module), func)(argv)
        except SystemExit as e:
            rc = e.code
    return rc, err.getvalue()


@pytest.mark.parametrize("command,argument,takes_url", url_table_rows(), ids=[f"{c} {a}" for c, a, _ in url_table_rows()])
def test_the_url_table_says_what_each_command_does_with_a_url(tmp_path, monkeypatch, command, argument, takes_url):
    monkeypatch.chdir(tmp_path)
    template = URL_PROBES[(command, argument)]
    if takes_url:  # not refused as a URL (it fails later: nothing is there; a memory:// URL needs no server)
        rc, err = _run_main(command, shlex.split(template.format(url="memory://doc-url-table/x")))
        assert not REFUSED_AS_URL.search(err), err
    else:
        rc, err = _run_main(command, shlex.split(template.format(url="s3://doc-url-table/x")))
        assert rc == 2 and err.count("\n") == 1 and REFUSED_AS_URL.search(err), err
        assert argument.lstrip("-").split()[0].lower() in err.lower() or argument in ("OUT",), err
        assert list(tmp_path.iterdir()) == [], "a refused URL created something"
        rc, err = _run_main(command, shlex.split(template.format(url=f"file://{tmp_path}/x")))
        assert not REFUSED_AS_URL.search(err), err  # file:// names a local path
    if command == "prepare-shards" and argument == "--out":
        rc, err = _run_main(command, shlex.split(template.format(url="https://example.invalid/x")))
        assert rc == 2 and "read-only" in err


def all_parsers() -> dict[str, object]:
    """Every command's argparse parser, by the name a user types (subcommands included)."""
    from imagenet_shards.pipeline.prepare import cli as prepare_cli
    from imagenet_shards.pipeline.prepare.derive_cli import build_derive_parser

    out = {name: importlib.import_module(ep.split(":")[0]).build_parser() for name, ep in SCRIPTS.items()}
    out["prepare-shards finalize"] = prepare_cli.build_finalize_parser()
    out["prepare-shards adopt"] = prepare_cli.build_adopt_parser()
    out["prepare-shards derive"] = build_derive_parser()
    return out


def action_default(command: str, action):
    """What a flag defaults to: argparse's default, or for train-imagenet, whose parser holds none (a
    parse returns only the flags given), TrainConfig's (`trainer.flags.defaults`)."""
    if command == "train-imagenet":
        from imagenet_shards.train.trainer.flags import defaults

        return defaults().get(action.dest)
    return action.default


def same_value(text: str, default) -> bool:
    """Whether a default as the docs write it (`5e-5`, `longer:500`, `16`) is the parser's value."""
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        try:
            return float(text) == float(default)
        except ValueError:
            return False
    return text == str(default)


def test_help_states_each_default_as_the_parser_has_it():
    """`--help`'s "(default V)" against the value argparse really defaults to (where it has one)."""
    wrong = []
    for command, parser in all_parsers().items():
        for action in parser._actions:
            m = re.search(r"\(default ([\w.:+-]+)[);,]", action.help or "")
            default = action_default(command, action)
            if m and default is not None and not isinstance(default, bool) and not same_value(m.group(1), default):
                wrong.append(f"{command} {action.option_strings}: help says {m.group(1)}, default is {default!r}")
    assert not wrong, wrong


def test_training_md_synopsis_and_defaults_table_state_the_parsers_defaults():
    from imagenet_shards.train.trainer.config import DEFAULT_WARMUP_EPOCHS

    defaults = {a.option_strings[0]: action_default("train-imagenet", a)
                for a in all_parsers()["train-imagenet"]._actions if a.option_strings}
    defaults["--warmup-epochs"] = DEFAULT_WARMUP_EPOCHS  # resolved when the run starts (TrainConfig)
    text = (REPO / "docs" / "training.md").read_text()
    synopsis = next(body for doc, _, info, body in fenced_blocks() if doc.name == "training.md" and info == "text")
    synopsis = synopsis[:synopsis.index("\ntorchrun")]  # train-imagenet's lines
    examples = {"--end-res", "--ramp-epochs", "--resume"}  # values shown there as examples or choices, not defaults
    claims = [(flag, value.split("|")[0]) for flag, value in re.findall(r"(--[a-z][\w-]*) ([a-z0-9][\w.:|-]*)", synopsis)
              if flag not in examples]
    claims += re.findall(r"(--[a-z][\w-]*) [A-Z]+ \(default ([\w.]+)\)", synopsis)
    section = text[text.index("## Defaults and the choices behind them"):]
    section = section[:section.index("\n## ")]
    claims += re.findall(r"^\| `(--[a-z][\w-]*) ([a-z0-9][\w.:-]*)`", section, re.M)  # first column: `--flag V`
    claims += re.findall(r"`(--[a-z][\w-]*) ([a-z0-9][\w.:-]*)` \(", section)  # `--warmup-epochs 2` (a quarter
    assert len(claims) >= 15  # the synopsis and the table are really read
    wrong = [f"{flag} {value} (default {defaults.get(flag)!r})" for flag, value in claims
             if flag not in defaults or not same_value(value, defaults[flag])]
    assert not wrong, wrong


def test_prose_defaults_are_the_parsers():
    """`--flag V` (default ...) anywhere in the docs, for a flag only one command has."""
    owners: dict[str, list] = {}
    for command, parser in all_parsers().items():
        for action in parser._actions:
            for flag in action.option_strings:
                owners.setdefault(flag, []).append(action_default(command, action))
    claims = [(doc.name, flag, value) for doc in DOCS
              for flag, value in re.findall(r"`(--[a-z][\w-]*) ([\w.:-]+)`\s*\(default", doc.read_text())]
    assert claims  # e.g. prepare.md's `--resize longer:500` (default; ...)
    wrong = [c for c in claims if len(owners.get(c[1], [])) == 1 and not same_value(c[2], owners[c[1]][0])]
    assert not wrong, wrong


def test_the_dev_shm_formula_in_training_md_is_the_codes():
    from imagenet_shards.train.loader import make_loader
    from imagenet_shards.train.loader.slots import ring_size
    from imagenet_shards.train.trainer.watch.host import BATCHES_PER_WORKER

    text = " ".join((REPO / "docs" / "training.md").read_text().split())
    m = re.search(r"`/dev/shm` must hold the batches in flight on the node: local ranks × workers × (\d+) \([^)]*"
                  r"the DataLoader's prefetch of (\d+)", text)
    assert m, "training.md's /dev/shm formula moved: update this test"
    prefetch = inspect.signature(make_loader).parameters["prefetch_factor"].default
    assert int(m.group(2)) == prefetch
    assert int(m.group(1)) == BATCHES_PER_WORKER == ring_size(prefetch)


def test_shards_are_the_bytes_of_webdataset_tarwriter_with_the_arguments_format_md_names(doc_playground):
    """docs/format.md: our tar bytes are `TarWriter(f, user="", group="", mode=0o644, mtime=0)`'s, and
    TarWriter's own defaults (mode 0o444, user/group bigdata, mtime now) are not."""
    import webdataset as wds

    text = " ".join((REPO / "docs" / "format.md").read_text().split())
    assert 'TarWriter(f, user="", group="", mode=0o644, mtime=0)' in text
    assert "its defaults differ: mode 0o444, user and group `bigdata`, mtime the current time" in text
    defaults = inspect.signature(wds.TarWriter).parameters
    assert (defaults["mode"].default, defaults["user"].default, defaults["group"].default,
            defaults["mtime"].default) == (0o444, "bigdata", "bigdata", None)
    shard = sorted((doc_playground / "shards" / "train").glob("*.tar"))[0]
    ours = shard.read_bytes()
    samples: dict[str, dict] = {}
    with tarfile.open(shard) as tf:
        for m in tf.getmembers():
            key, ext = m.name.split(".", 1)
            samples.setdefault(key, {"__key__": key})[ext] = tf.extractfile(m).read()
    theirs = io.BytesIO()
    with wds.TarWriter(theirs, user="", group="", mode=0o644, mtime=0, encoder=False) as w:
        for sample in samples.values():
            w.write(sample)
    assert theirs.getvalue() == ours


def test_readme_names_every_module_where_it_lives():
    """README's "Where things are": each package folder's row names every module in it (and nothing
    that is gone); each top-level module of pipeline/ has its own row."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Where things are"):]
    rows = dict(re.findall(r"^\| `([\w/.]+)` \| (.*) \|$", section[:section.index("\n## ", 3)], re.M))
    wrong = []
    for top in ("pipeline", "train"):
        for folder in sorted(p for p in (REPO / top).iterdir() if (p / "__init__.py").exists()):
            row = rows.get(f"{top}/{folder.name}/")
            if row is None:
                wrong.append(f"no row for {top}/{folder.name}/")
                continue
            named = _named(row)
            for f in sorted(folder.rglob("*")):
                if f.suffix in (".py", ".c") and f.stem not in ("__init__", "__main__") or f.is_dir() and (f / "__init__.py").exists():
                    if f.name != "__pycache__" and f.stem not in named:
                        wrong.append(f"{f.relative_to(REPO)} is not named in README's row for {top}/{folder.name}/")
            for name in named - {f.stem for f in folder.rglob("*")} - {"make_loader"}:  # a function, named as such
                wrong.append(f"README's row for {top}/{folder.name}/ names `{name}`, which is not there")
    for f in sorted((REPO / "pipeline").glob("*.py")):
        if f.stem != "__init__" and f"pipeline/{f.name}" not in rows:
            wrong.append(f"no row for pipeline/{f.name}")
    for folder in FOLDERS_NOT_PACKAGES:  # every file and subfolder in them, named
        row = rows.get(f"{folder}/")
        if row is None:
            wrong.append(f"no row for {folder}/")
            continue
        here = {f.stem for f in (REPO / folder).iterdir() if f.name != "__pycache__" and ".so" not in f.suffixes}
        wrong += [f"{folder}/{name} is not named in README's row for {folder}/" for name in sorted(here - _named(row))]
        wrong += [f"README's row for {folder}/ names `{name}`, which is not there" for name in sorted(_named(row) - here)]
    assert not wrong, wrong


def _pipeline_imports() -> dict[str, set[str]]:
    """Module of pipeline/ -> the modules of pipeline/ it imports, anywhere in its file (a function's
    deferred import counts: it is the same arrow, only later)."""
    import ast

    files = {}
    for f in (REPO / "pipeline").rglob("*.py"):
        parts = ("imagenet_shards", "pipeline", *f.relative_to(REPO / "pipeline").with_suffix("").parts)
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    edges = {m: set() for m in files}
    for m, f in files.items():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in files or isinstance(node, ast.Import):
                names = [a.name for a in node.names]
                if isinstance(node, ast.Import):
                    targets = [n for n in names if n in files]
                else:  # `from P import sub` names the submodule, `from P import name` the module P
                    targets = [t for n in names if (t := f"{node.module}.{n}") in files] or [node.module]
                edges[m].update(t for t in targets if t != m)
    return edges


def test_no_two_pipeline_modules_import_each_other():
    """README: data flows one way. No import circle among pipeline/'s modules (prepare's finalize and
    split_checks once met through PrepareError; it has its own module, prepare/errors.py, now)."""
    edges = _pipeline_imports()
    circles, seen = [], set()

    def walk(m, path):
        for t in sorted(edges[m]):
            if t in path:
                circles.append(" -> ".join(path[path.index(t):] + [t]))
            elif t not in seen:
                walk(t, path + [t])
        seen.add(m)

    for m in sorted(edges):
        if m not in seen:
            walk(m, [m])
    assert not circles, circles


# The folders that are not Python packages but a home each: the C sources, the benchmarks, the scripts
FOLDERS_NOT_PACKAGES = ("pipeline/native", "bench", "scripts", "scripts/gpu_check")


def _named(row: str) -> set[str]:
    """The file and folder names a README row gives in backticks (`decode`, `_jpegcrop.c`, `gpu_check/`)."""
    return set(re.findall(r"`(\w+)(?:\.c|\.h|\.sh|/)?`", row))


def test_bench_loader_package_holds_only_what_bench_loader_runs():
    """train/bench/ is the installed bench-loader: each module in it is imported (through the package
    or, in a peer's environment, by path) from its CLI or is a peer script the CLI starts; every other
    benchmark lives in bench/."""
    import ast

    from imagenet_shards.train.bench.peers import PEERS
    folder = REPO / "train" / "bench"
    modules = {f.stem for f in folder.glob("*.py")} - {"__init__"}
    reached, todo = set(), ["run", *(p.script.stem for p in PEERS)]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        for node in ast.walk(ast.parse((folder / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "imagenet_shards.train.bench":
                    todo += [a.name for a in node.names if a.name in modules]
                elif node.module.startswith("imagenet_shards.train.bench."):
                    todo.append(node.module.rsplit(".", 1)[1])
                elif node.module in modules:  # a peer script's import by path
                    todo.append(node.module)
    assert reached <= modules and modules - reached == set(), sorted(modules - reached)


def test_readme_shows_the_line_doctor_prints():
    """The same fields in the same order as `imagenet-shards-doctor --brief` prints (values masked)."""
    def shape(line: str) -> str:
        line = re.sub(r"\((pillow-simd|plain Pillow)\)", "(PIL)", line)
        line = re.sub(r"libjpeg(-turbo)? [\d.]+( \(not turbo\))?", "libjpeg", line)
        line = re.sub(r"not built|built", "B", line)
        line = re.sub(r"entropy decoder (own|libjpeg|none)", "entropy decoder E", line)
        line = re.sub(r"\b(yes|no)\b", "Y", line)
        return re.sub(r"-> .*", "-> R", re.sub(r"\d[\w.+]*", "V", line))

    text = (REPO / "README.md").read_text()
    shown = next(line for line in text.splitlines() if line.startswith("PIL ") and "torchvision" in line)
    from imagenet_shards.pipeline.tools.doctor import main as doctor

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert doctor(["--brief"]) == 0
    assert shape(shown) == shape(printed.getvalue().strip()), (shown, printed.getvalue())


def test_code_the_docs_cite_by_name_exists():
    """Every `module.name` the docs cite (`decode.AUG_NAMES`, `format.keys.junk_name`,
    `imagenet_shards.pipeline.storage.fs.open_url`) is there: a module of ours whose dotted path ends
    so, holding that attribute. File names and manifest/config field paths are not code."""
    modules = []
    for top in ("pipeline", "train"):
        for f in (REPO / top).rglob("*.py"):
            parts = ("imagenet_shards", top, *f.relative_to(REPO / top).with_suffix("").parts)
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    modules.append("imagenet_shards.manifests")  # data files, a package all the same (pyproject's package-dir)
    not_code = {"manifest", "config", "loader", "train", "pipeline"}  # manifest.fixed, config.subset, loader.stats
    # libraries the docs cite whose names a module of ours shares (train/recipes/torchvision.py)
    third_party = {"torch", "torchvision", "numpy", "PIL", "webdataset", "timm", "ffcv"}
    missing = []
    for doc in DOCS:
        for ref in re.findall(r"`((?:[a-z_][a-z0-9_]*\.)+[A-Za-z_]\w*)(?:\(\))?`", doc.read_text()):
            parts = ref.split(".")
            if parts[-1] in ("py", "md", "json", "png", "c") or parts[0] in not_code or parts[0] in third_party:
                continue
            absolute = parts[0] == "imagenet_shards"
            if not absolute and not any(m.endswith("." + parts[0]) for m in modules):
                continue  # not a name of ours (meta.mat, pyproject.toml)
            found = False
            for i in range(len(parts), 0, -1):
                prefix = ".".join(parts[:i])
                for mod in (m for m in modules + ["imagenet_shards"] if m == prefix or not absolute and m.endswith("." + prefix)):
                    obj = importlib.import_module(mod)
                    found = found or all((obj := getattr(obj, a, None)) is not None for a in parts[i:])
                if found:
                    break
            if not found:
                missing.append(f"{doc.name}: `{ref}`")
    assert not missing, missing


def test_training_md_default_formulas_are_the_codes():
    """The defaults table's formulas and worked examples, computed with the code that applies them."""
    from imagenet_shards.train.trainer.config import DEFAULT_WARMUP_EPOCHS, default_warmup
    from imagenet_shards.train.trainer.watch.host import default_workers
    from imagenet_shards.train.trainer.schedule import default_ramp

    text = " ".join((REPO / "docs" / "training.md").read_text().split())
    for cores, gpus, want in re.findall(r"(\d+) cores, (\d+) GPUs?: (\d+)", text):  # `--workers` examples
        assert default_workers(int(cores), int(gpus), cuda=True) == int(want), (cores, gpus, want)
    a, b = (float(x) for x in re.search(r"Default ramp: A = ⌊([\d.]+)·epochs⌋, B = ⌊([\d.]+)·epochs⌋", text).groups())
    assert all(default_ramp(e) == (int(a * e), int(b * e)) for e in (1, 5, 16, 40, 88))
    assert f"`--warmup-epochs {DEFAULT_WARMUP_EPOCHS:g}` (a quarter of `--epochs` when that is shorter)" in text
    assert [default_warmup(e) for e in (4, 8, 16)] == [1.0, 2, 2]


def json_keys(obj) -> set[str]:
    """Every key of a JSON value, at any depth."""
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in json_keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in json_keys(v)}
    return set()


def test_format_md_manifest_example_has_the_keys_prepare_shards_writes(doc_playground):
    text = (REPO / "docs" / "format.md").read_text()
    block = text[text.index("## manifest.json"):].split("```json\n", 1)[1].split("```", 1)[0]
    shown = set(re.findall(r'"(\w+)":', block))
    m = json.loads((doc_playground / "shards" / "manifest.json").read_text())
    m["fixed"]["counts"] = {}  # keys that are data (fix kinds, WNIDs, split names), not the schema's
    splits = m.pop("splits")
    written = json_keys(m) | {k for s in splits.values() for k in json_keys({**s, "class_counts": {}})}
    assert written - shown == set(), sorted(written - shown)  # every key it writes is shown
    data = {"train", "val", "n01440764", "cmyk_to_rgb", "converted_from_png", "resized"}  # the example's own
    assert shown - written - data == set(), sorted(shown - written - data)  # and nothing it does not write


def test_audit_md_json_report_has_the_keys_audit_shards_writes(doc_playground):
    from imagenet_shards.pipeline.audit.report import Problem
    from imagenet_shards.pipeline.audit.run import audit

    block = next(body for doc, _, info, body in fenced_blocks() if doc.name == "audit.md" and info == "json")
    shown = set(re.findall(r'"(\w+)":', block))
    report = audit(str(doc_playground / "shards"), workers=1, progress=False)
    report.problems.append(Problem("shard_missing", "x.tar", None, "listed in the manifest but not there"))  # its fields
    report = report.to_dict()

    splits = set(report["counts"]) | {"within_" + s for s in report["counts"]}
    written = json_keys(report) - splits
    assert written - shown == set(), sorted(written - shown)  # every key it writes is shown
    assert shown - written - {"train", "val", "within_train", "within_val"} == set()  # and nothing it does not


def test_recipes_md_names_every_show_key_and_only_those():
    """docs/recipes.md's `--show` key list and `scaling` paragraph against what `describe` writes, for
    a recipe with every optional part (tv-rn50-v2: EMA, so `scaling` has the EMA keys too)."""
    from imagenet_shards.train.trainer.cli import config_from_argv
    from imagenet_shards.train.trainer.recipe import describe

    text = (REPO / "docs" / "recipes.md").read_text()
    keys_part = text[text.index("The keys, under stable names"):text.index("`scaling` holds")]
    scaling_part = text[text.index("`scaling` holds"):].split("\n\n", 1)[0]  # its one paragraph
    config, world, _ = config_from_argv(["--recipe", "tv-rn50-v2", "--show", "--world-size", "2"])
    d = describe(config, world_size=world)
    listed = set(re.findall(r"`(\w+)`", keys_part))
    assert set(d) == listed, (sorted(set(d) - listed), sorted(listed - set(d)))
    retimed, _, _ = config_from_argv(["--recipe", "ffcv-rn18-16", "--show", "--epochs", "8"])  # the ramp's keys
    written = json_keys(d["scaling"]) | json_keys(describe(retimed, world_size=1)["scaling"])
    in_scaling = set(re.findall(r"`(\w+)`", scaling_part)) - {"linear", "sqrt", "scaling"}
    assert written == in_scaling, (sorted(written - in_scaling), sorted(in_scaling - written))


@pytest.mark.timeout(300)
def test_the_loader_docs_first_example_runs_without_a_warning_on_this_machine(tiny_shards):
    """docs/loader.md's opening example, run as written on the tiny shard set (its path, rank and
    epochs filled in): no warning, pin_memory's "no accelerator" one included (issue 29 row 12)."""
    import warnings
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "loader.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    code = code.replace('"/data/imagenet-shards"', repr(str(tiny_shards))).replace("workers=8", "workers=0")
    code = code.replace("        ...", "        break")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec(compile(code, "docs/loader.md", "exec"), {"rank": 0, "world": 1, "epochs": 1, "res_for": lambda e: 32})
