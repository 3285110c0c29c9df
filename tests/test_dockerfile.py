"""The container images are built from what the repository holds and run the real daemon.

No Docker engine runs here, so these tests check what can be checked without building:
the files the Dockerfiles copy, the command they start, the user they run as, that the
CUDA base image matches what the pinned onnxruntime-gpu wheel was built for, and that each
image installs only its hash-checked lock, at the versions of requirements.lock, with
onnxruntime pinned exactly.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "deploy" / "Dockerfile"
CPU = ROOT / "deploy" / "Dockerfile.cpu"
SERVE = ["serve", "-c", "/etc/onnxmon/onnxmon.yaml"]

# CUDA major of PyPI's onnxruntime-gpu wheels, read from their nvidia-* dependencies:
# 1.19-1.26 need nvidia-cuda-runtime-cu12 (CUDA 12.x, cuDNN 9), 1.27 and later CUDA 13.x (cuDNN 9).
ORT_CUDA_MAJOR: list[tuple[tuple[int, int], tuple[int, int], int]] = [
    ((1, 19), (1, 26), 12),
    ((1, 27), (1, 99), 13),
]

# Prints the CLI's command tree with each command's options, as JSON.
COMMAND_TREE = """
import json, typer
from monitor import cli
cli._register()
def tree(command):
    return {
        "options": [o for p in command.params for o in p.opts],
        "commands": {name: tree(sub) for name, sub in getattr(command, "commands", {}).items()},
    }
print(json.dumps(tree(typer.main.get_command(cli.app))))
"""


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs, continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    pairs = []
    for entry in logical:
        keyword, _, arguments = entry.strip().partition(" ")
        pairs.append((keyword.upper(), arguments.strip()))
    return pairs


def last(dockerfile: Path, keyword: str) -> str:
    found = [arguments for kw, arguments in instructions(dockerfile) if kw == keyword]
    assert found, f"{dockerfile.name} has no {keyword}"
    return found[-1]


def build_args(dockerfile: Path) -> dict[str, str]:
    """Default values of every ``ARG NAME=value``."""
    args = {}
    for keyword, arguments in instructions(dockerfile):
        name, sep, value = arguments.partition("=")
        if keyword == "ARG" and sep:
            args[name] = value.strip('"')
    return args


def cuda_major_for(ort_version: str) -> int:
    """The CUDA major version the onnxruntime-gpu wheel ``ort_version`` is built for."""
    major_minor = tuple(int(part) for part in ort_version.split(".")[:2])
    for low, high, cuda in ORT_CUDA_MAJOR:
        if low <= major_minor <= high:
            return cuda
    raise AssertionError(f"onnxruntime-gpu {ort_version} is not in ORT_CUDA_MAJOR; look up its CUDA build")


def dockerignored(path: str) -> bool:
    """Whether ``.dockerignore`` keeps ``path`` out of the build context (last match wins)."""
    ignored = False
    for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or (pattern.startswith("**/") and fnmatch.fnmatch(path, pattern[3:])):
            ignored = not negate
    return ignored


def command_tree() -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", COMMAND_TREE], capture_output=True, text=True, cwd=ROOT, check=True)
    tree: dict[str, Any] = json.loads(done.stdout)
    return tree


@pytest.mark.parametrize("dockerfile", [GPU, CPU], ids=["gpu", "cpu"])
def test_every_copied_file_exists_and_is_in_the_build_context(dockerfile: Path) -> None:
    for keyword, arguments in instructions(dockerfile):
        if keyword != "COPY" or arguments.startswith("--from"):
            continue
        *sources, _destination = arguments.split()
        for source in sources:
            assert (ROOT / source).exists(), f"{dockerfile.name} copies {source}, which is not in the repository"
            assert not dockerignored(source), f".dockerignore excludes {source}, which {dockerfile.name} copies"


@pytest.mark.parametrize("dockerfile", [GPU, CPU], ids=["gpu", "cpu"])
def test_image_starts_onnxmon_serve_on_the_mounted_config(dockerfile: Path) -> None:
    assert json.loads(last(dockerfile, "ENTRYPOINT")) == ["onnxmon"]
    assert json.loads(last(dockerfile, "CMD")) == SERVE
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["onnxmon"] == "monitor.cli:main"


@pytest.mark.process
@pytest.mark.parametrize("command", [SERVE[:1], ["db", "upgrade"]], ids=" ".join)
def test_commands_the_deployment_runs_exist_and_take_a_config_file(command: list[str]) -> None:
    node = command_tree()
    for name in command:
        if name not in node["commands"]:
            pytest.skip(f"`onnxmon {' '.join(command)}` is not registered yet")
        node = node["commands"][name]
    assert "-c" in node["options"], f"`onnxmon {' '.join(command)}` has no -c option: {node['options']}"


@pytest.mark.parametrize("dockerfile", [GPU, CPU], ids=["gpu", "cpu"])
def test_image_runs_as_a_numeric_non_root_user(dockerfile: Path) -> None:
    user = last(dockerfile, "USER")
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user!r}: Kubernetes runAsNonRoot needs a numeric uid"
    assert user.split(":") == ["10001", "10001"]


@pytest.mark.parametrize("dockerfile", [GPU, CPU], ids=["gpu", "cpu"])
def test_home_and_caches_live_where_the_chart_mounts_an_empty_dir(dockerfile: Path) -> None:
    env = " ".join(arguments for keyword, arguments in instructions(dockerfile) if keyword == "ENV")
    assert "HOME=/home/onnxmon" in env
    assert "XDG_CACHE_HOME=/home/onnxmon/.cache" in env
    assert "PYTHONDONTWRITEBYTECODE=1" in env


@pytest.mark.parametrize("dockerfile", [GPU, CPU], ids=["gpu", "cpu"])
def test_image_leaves_health_checks_to_kubernetes_and_carries_oci_labels(dockerfile: Path) -> None:
    keywords = [keyword for keyword, _ in instructions(dockerfile)]
    assert "HEALTHCHECK" not in keywords
    labels = " ".join(arguments for keyword, arguments in instructions(dockerfile) if keyword == "LABEL")
    for key in ("title", "description", "version", "revision", "licenses", "source"):
        assert f"org.opencontainers.image.{key}=" in labels


@pytest.mark.parametrize(
    ("ort_version", "cuda_major"),
    [("1.19.0", 12), ("1.22.0", 12), ("1.26.0", 12), ("1.27.0", 13), ("1.31.1", 13)],
)
def test_onnxruntime_gpu_release_maps_to_its_cuda_major(ort_version: str, cuda_major: int) -> None:
    assert cuda_major_for(ort_version) == cuda_major


def test_cuda_base_image_matches_the_pinned_onnxruntime_gpu() -> None:
    args = build_args(GPU)
    image = args["CUDA_IMAGE"]
    match = re.fullmatch(r"nvidia/cuda:(\d+)\.\d+(\.\d+)?-cudnn-runtime-ubuntu(22|24)\.04", image)
    assert match, f"CUDA_IMAGE {image!r} is not an nvidia/cuda cuDNN runtime image"
    assert int(match.group(1)) == cuda_major_for(args["ORT_VERSION"]), (
        f"onnxruntime-gpu {args['ORT_VERSION']} needs CUDA {cuda_major_for(args['ORT_VERSION'])}, base is {image}"
    )
    froms = [arguments for keyword, arguments in instructions(GPU) if keyword == "FROM"]
    assert all(f.startswith("${CUDA_IMAGE}") for f in froms), froms


LOCKS = {GPU: ROOT / "deploy" / "requirements-gpu.lock", CPU: ROOT / "deploy" / "requirements-cpu.lock"}
ORT_DISTRIBUTION = {GPU: "onnxruntime-gpu", CPU: "onnxruntime"}


def pins(lock: Path) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line of a lock."""
    found = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", lock.read_text(encoding="utf-8"), re.MULTILINE)
    return {name.lower(): version for name, version in found}


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


@pytest.mark.parametrize("dockerfile", [GPU, CPU], ids=["gpu", "cpu"])
def test_image_installs_its_hash_checked_lock_and_resolves_nothing(dockerfile: Path) -> None:
    lock = LOCKS[dockerfile].relative_to(ROOT)
    runs = [arguments for keyword, arguments in instructions(dockerfile) if keyword == "RUN"]
    installs = [part.strip() for run in runs for part in run.split("&&") if "pip install" in part]
    assert installs == [
        f"/opt/onnxmon/bin/pip install --require-hashes --no-deps -r {lock}",
        "/opt/onnxmon/bin/pip install --no-deps --no-build-isolation --no-index .",
    ], installs
    assert any("pip check" in run for run in runs)


@pytest.mark.parametrize("dockerfile", [GPU, CPU], ids=["gpu", "cpu"])
def test_image_lock_has_the_versions_the_tests_ran_on_each_with_hashes(dockerfile: Path) -> None:
    lock = LOCKS[dockerfile]
    tested = pins(ROOT / "requirements.lock")
    image = pins(lock)
    differ = {
        name: (version, tested[name]) for name, version in image.items() if name in tested and tested[name] != version
    }
    assert differ == {}, f"{lock.name} differs from requirements.lock (run scripts/lock): {differ}"
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock.read_text(encoding="utf-8").strip())
    unhashed = [entry.split()[0] for entry in entries if "--hash=sha256:" not in entry]
    assert unhashed == [], f"{lock.name}: no hash for {unhashed}"
    # only what the image needs to build onnxmon may be missing from the tested lock
    assert set(image) - set(tested) <= {"setuptools", "onnxruntime-gpu", "nvidia-ml-py"}


@pytest.mark.parametrize(
    ("dockerfile", "extras"), [(GPU, ["gpu", "postgres"]), (CPU, ["cpu", "postgres"])], ids=["gpu", "cpu"]
)
def test_image_lock_covers_every_runtime_dependency(dockerfile: Path, extras: list[str]) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = requirement_names(project["dependencies"])
    for extra in extras:
        wanted |= requirement_names(project["optional-dependencies"][extra])
    wanted |= {"psycopg-binary", "setuptools"}  # psycopg[binary], and the build backend
    assert sorted(wanted - set(pins(LOCKS[dockerfile]))) == []


@pytest.mark.parametrize("dockerfile", [GPU, CPU], ids=["gpu", "cpu"])
def test_onnxruntime_is_pinned_exactly_in_each_image(dockerfile: Path) -> None:
    ort = build_args(dockerfile)["ORT_VERSION"]
    image = pins(LOCKS[dockerfile])
    assert image[ORT_DISTRIBUTION[dockerfile]] == ort, f"{dockerfile.name} ORT_VERSION {ort} is not its lock's"
    # one onnxruntime wheel per image: both install the same package directory
    other = "onnxruntime" if dockerfile == GPU else "onnxruntime-gpu"
    assert other not in image
    labels = " ".join(arguments for keyword, arguments in instructions(dockerfile) if keyword == "LABEL")
    assert '.version="${ORT_VERSION}"' in labels
    runs = " ".join(arguments for keyword, arguments in instructions(dockerfile) if keyword == "RUN")
    assert f"m.version('{ORT_DISTRIBUTION[dockerfile]}')" in runs and "${ORT_VERSION}" in runs, "checked at build"


def test_the_cpu_image_runs_the_onnxruntime_the_tests_ran_on() -> None:
    assert build_args(CPU)["ORT_VERSION"] == pins(ROOT / "requirements.lock")["onnxruntime"]


def test_the_gpu_pin_is_written_once_and_the_dockerfile_agrees() -> None:
    pin = (ROOT / "deploy" / "onnxruntime-gpu.in").read_text(encoding="utf-8")
    (declared,) = re.findall(r"^onnxruntime-gpu==(\S+)$", pin, re.MULTILINE)
    assert declared == build_args(GPU)["ORT_VERSION"] == pins(LOCKS[GPU])["onnxruntime-gpu"]


def test_cpu_image_is_python_slim() -> None:
    assert build_args(CPU)["PYTHON_IMAGE"] == "python:3.12-slim"


@pytest.mark.process
def test_build_script_tags_both_images_as_the_chart_expects_with_their_locked_onnxruntime() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-images"), "--dry-run"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    builds = [line.split() for line in done.stdout.splitlines() if line.startswith("docker build")]
    chart = yaml.safe_load((ROOT / "helm" / "onnxmon" / "Chart.yaml").read_text(encoding="utf-8"))
    values = yaml.safe_load((ROOT / "helm" / "onnxmon" / "values.yaml").read_text(encoding="utf-8"))
    cpu_values = yaml.safe_load((ROOT / "helm" / "onnxmon" / "values-cpu.yaml").read_text(encoding="utf-8"))
    repository = values["image"]["repository"]
    expected = {
        "deploy/Dockerfile": f"{repository}:{chart['appVersion']}",
        "deploy/Dockerfile.cpu": f"{repository}:{cpu_values['image']['tag']}",
    }
    assert {b[b.index("-f") + 1]: b[b.index("-t") + 1] for b in builds} == expected
    for build in builds:
        dockerfile = ROOT / build[build.index("-f") + 1]
        args = dict(build[i + 1].split("=", 1) for i, word in enumerate(build) if word == "--build-arg")
        assert args["ORT_VERSION"] == build_args(dockerfile)["ORT_VERSION"]
        assert args["VERSION"] == chart["appVersion"] and re.fullmatch(r"[0-9a-f]{40}|unknown", args["REVISION"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", args["CREATED"])
