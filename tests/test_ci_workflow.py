"""The CI workflow and the deploy configuration hold to the hardening docs/security.md describes.

Read as data (the workflow YAML, netlify.toml, .ci/): a read-only token by default, every action
pinned to a full commit SHA with its release in a comment, checkout without persisted
credentials, exact versions for what npx runs next to the deploy token, one deploy at a time in
push order, a `paths` filter that reaches every input the tests and the build read, a build cache
keyed on the dependencies and the Python, `--strict` builds, and a single deploy path.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import tomllib

import pytest
import yaml

from engine.batch import dependencies
from tests.conftest import REPO

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
SITE = REPO / ".github" / "workflows" / "site.yml"
SHA = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def _load(path):
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))        # YAML 1.1 reads the key `on` as True
    return data


def _steps(workflow):
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_there_is_a_workflow_to_check():
    assert SITE in WORKFLOWS


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_permissions_are_read_only_unless_a_job_says_why(path):
    workflow = _load(path)
    top = workflow.get("permissions")
    assert isinstance(top, dict) and top, "a top-level `permissions:` block (GitHub's default token can write)"
    assert top == {"contents": "read"}, top
    for name, job in workflow["jobs"].items():
        scopes = job.get("permissions", {})
        assert scopes not in ("write-all", "read-all") and isinstance(scopes, dict), name
        assert "write" not in scopes.values(), f"{name}: the deploy needs no GitHub write scope"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_sha_with_its_release_named(path):
    uses = [step["uses"] for step in _steps(_load(path)) if "uses" in step]
    assert uses
    for ref in uses:
        assert SHA.match(ref), f"{ref}: pin a full 40-hex commit SHA, not a tag or branch"
    for line in path.read_text().splitlines():
        if re.match(r"\s*(- )?uses:", line):
            assert re.search(r"@[0-9a-f]{40}\s+#\s*v\d+\.\d+\.\d+\s*$", line), \
                f"{line.strip()}: name the release in a comment (# vX.Y.Z)"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_checkout_keeps_no_credentials(path):
    checkouts = [s for s in _steps(_load(path)) if s.get("uses", "").startswith("actions/checkout@")]
    assert checkouts
    for step in checkouts:
        assert step.get("with", {}).get("persist-credentials") is False


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_npx_runs_exact_versions(path):
    words = [shlex.split(line) for s in _steps(_load(path)) if "run" in s for line in s["run"].splitlines()]
    for call in (w[w.index("npx"):] for w in words if "npx" in w):
        package = next(arg for arg in call[1:] if not arg.startswith("-"))
        assert re.fullmatch(r"(@[\w.-]+/)?[\w.-]+@\d+\.\d+\.\d+", package), f"{package}: pin an exact version"


def test_secrets_reach_only_the_deploy_step_and_only_on_main():
    workflow = _load(SITE)
    for name, job in workflow["jobs"].items():
        assert "secrets." not in yaml.safe_dump(job.get("env", {})), f"{name}: no secret in a job's env"
    holders = [s for s in _steps(workflow) if "secrets." in yaml.safe_dump(s)]
    assert [s["name"] for s in holders] == ["Deploy to Netlify"]
    deploy = holders[0]
    assert deploy["if"] == "github.event_name == 'push'" and workflow["on"]["push"]["branches"] == ["main"]
    assert "--no-build" in deploy["run"] and "--dir build/site" in deploy["run"]


def test_deploys_run_one_at_a_time_in_order():
    concurrency = _load(SITE)["concurrency"]
    assert "${{" in concurrency["group"] and "main" in concurrency["group"]
    # a main deploy is never cancelled half-way; a pull request's older run may be
    assert concurrency["cancel-in-progress"] in (False, "${{ github.event_name == 'pull_request' }}")


def test_paths_filters_reach_every_input():
    """A pull request that changes only dependencies, tests, CI or the workflow gets CI; so does
    every folder the build reads and every file a test or the site reads."""
    on = _load(SITE)["on"]
    needed = {"pyproject.toml", "tests/**", ".ci/**", ".github/**", "corpus/**", "gpus/**", "engine/**",
              "site_builder/**", "templates/**", "static/**", "docs/**", "README.md", "CONTRIBUTING.md",
              "netlify.toml"}
    for event in ("push", "pull_request"):
        assert needed <= set(on[event]["paths"]), (event, needed - set(on[event]["paths"]))


def test_build_cache_key_covers_dependencies_and_python():
    steps = _load(SITE)["jobs"]["build"]["steps"]
    cache = next(s for s in steps if s.get("uses", "").startswith("actions/cache@"))
    key, restore = cache["with"]["key"], cache["with"]["restore-keys"]
    hashed = re.search(r"hashFiles\(([^)]*)\)", key)[1]
    assert "'pyproject.toml'" in hashed and "'.ci/constraints.txt'" in hashed
    python = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert "${{ steps.%s.outputs.python-version }}" % python["id"] in key
    assert "python-version" in restore, "a fallback restores a build of the same Python only"


def test_ci_and_the_deploy_build_strictly_with_the_pinned_libraries():
    workflow = _load(SITE)
    build = next(s for s in _steps(workflow) if s.get("name") == "Build results and site")
    assert "archledger build --strict" in build["run"]
    assert workflow["jobs"]["build"]["env"]["PIP_CONSTRAINT"] == ".ci/constraints.txt"
    assert 'PIP_CONSTRAINT="${PIP_CONSTRAINT:-.ci/constraints.txt}"' in (REPO / ".ci" / "run").read_text()
    pins = dict(line.split("==") for line in (REPO / ".ci" / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    for name in {*dependencies.RESULTS, *dependencies.SITE}:
        assert re.fullmatch(r"\d+(\.\d+)+", pins.get(name, "")), f"{name}: pin it in .ci/constraints.txt"


def test_netlify_does_not_build_ci_is_the_one_deploy_path():
    """netlify.toml's own build would be a second deploy path racing the workflow's: Netlify's
    builds are cancelled (`ignore` exits 0) and the command refuses if one starts anyway."""
    build = tomllib.loads((REPO / "netlify.toml").read_text())["build"]
    assert build["publish"] == "build/site"
    assert subprocess.run(["bash", "-c", build["ignore"]], capture_output=True).returncode == 0
    refused = subprocess.run(["bash", "-c", build["command"]], capture_output=True, text=True, cwd=REPO)
    assert refused.returncode != 0 and ".github/workflows/site.yml" in refused.stderr
    assert "pip install" not in build["command"]                # it installs and builds nothing
