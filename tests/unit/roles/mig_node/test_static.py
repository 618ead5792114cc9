"""Static checks of the mig_node role, its playbooks and the AWX execution environment:
syntax, the entry points and their inputs, and `ansible-builder create` on
meta/ee/execution-environment.yml (offline). ansible-lint's production profile runs over the
whole tree in its own stage of tests/tools/test-all.sh."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .runner import BIN, REPO, ROLE, ansible_env

PLAYBOOKS = [
    REPO / "playbooks" / f"{name}.yml"
    for name in ("enable_mig", "disable_mig", "reboot_recovery", "converge", "label_nodes")
]
ENTRY_POINTS = {"main", "enable", "disable", "recover", "label"}


def run(argv: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, env=ansible_env(), cwd=cwd, check=False
    )


def test_playbooks_pass_syntax_check() -> None:
    proc = run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,", *map(str, PLAYBOOKS)]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_entry_point_has_its_task_file_and_takes_every_input() -> None:
    # That each default and its spec agree is tests/unit/roles/test_role_inputs.py's check.
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert set(specs) == ENTRY_POINTS
    for entry, spec in specs.items():
        assert (ROLE / "tasks" / f"{entry}.yml").is_file(), entry
        assert set(spec["options"]) == set(defaults), entry


def test_execution_environment_definition_is_accepted_by_ansible_builder(
    tmp_path: Path,
) -> None:
    # The definition refers to ../ee-*.{txt,yml} and ../../.build/ee-collection: lay the same
    # tree out in tmp_path.
    ee_dir = tmp_path / "meta" / "ee"
    ee_dir.mkdir(parents=True)
    definition = yaml.safe_load((REPO / "meta" / "ee" / "execution-environment.yml").read_text())
    sources = [definition["dependencies"]["python"]] + [
        entry["src"]
        for entry in definition["additional_build_files"]
        if not entry["src"].startswith("../../.build/")
    ]
    for name in sources:
        shutil.copy((REPO / "meta" / "ee" / name).resolve(), (ee_dir / name).resolve())
    shutil.copy(REPO / "meta" / "ee" / "execution-environment.yml", ee_dir)
    built = run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "build",
            "--force",
            "--output-path",
            str(tmp_path / ".build" / "ee-collection"),
            str(REPO),
        ]
    )
    assert built.returncode == 0, built.stdout + built.stderr

    proc = run(
        [
            str(BIN / "ansible-builder"),
            "create",
            "-f",
            "meta/ee/execution-environment.yml",
            "-c",
            "context",
        ],
        cwd=tmp_path,
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    assert f'ARG EE_BASE_IMAGE="{definition["images"]["base_image"]["name"]}"' in containerfile
    # Offline: no Galaxy stage, no mirror of this or any machine in the file (a site passes
    # its PyPI index as a build arg, its Debian mirror through the base image).
    assert "galaxy" not in definition["dependencies"]
    assert "AS galaxy" not in containerfile
    assert not re.search(r"https?://", containerfile)
    assert "ARG PIP_INDEX_URL=" in containerfile
    # Debian: apt-get behind ansible-builder's package-manager interface, in the context.
    pkgmgr = definition["options"]["package_manager_path"]
    assert f'ARG PKGMGR="{pkgmgr}"' in containerfile
    assert (tmp_path / "context" / "_build" / "hygon-ee" / Path(pkgmgr).name).is_file()
    assert "ansible-galaxy collection install --offline --no-deps" in containerfile
    assert "bundled_collections.py extract" in containerfile
    assert "bundled_collections.py check" in containerfile
    assert list((tmp_path / "context" / "_build" / "hygon-dcu").glob("hygon-dcu-*.tar.gz"))
    requirements = yaml.safe_load(
        (tmp_path / "context" / "_build" / "hygon-ee" / "ee-collections.yml").read_text()
    )
    # The EE carries exactly the collections galaxy.yml declares, at the same floors.
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert {c["name"]: c["version"] for c in requirements["collections"]} == galaxy["dependencies"]


@pytest.mark.parametrize("scenario", ["default", "cluster"])
def test_molecule_scenarios_are_offline(scenario: str) -> None:
    config = yaml.safe_load((REPO / "molecule" / scenario / "molecule.yml").read_text())
    assert config["dependency"]["enabled"] is False


def awx_setup_playbook() -> str:
    text = (REPO / "docs" / "awx.md").read_text()
    blocks = text.split("```yaml\n")[1:]
    (playbook,) = [
        block.split("```")[0] for block in blocks if "name: Configure AWX for hygon.dcu" in block
    ]
    return playbook


def test_the_documented_awx_setup_is_a_valid_playbook(tmp_path: Path) -> None:
    path = tmp_path / "awx_setup.yml"
    path.write_text(awx_setup_playbook())
    proc = run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,", str(path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


SURVEYS = sorted((REPO / "awx" / "surveys").glob("*.json"))
PLAYBOOK_INPUTS = {"target", "hygon_dcu_serial"}


def test_there_is_a_survey_for_every_node_playbook() -> None:
    assert {path.stem for path in SURVEYS} == {
        "enable_mig",
        "disable_mig",
        "reboot_recovery",
        "converge",
        "label_nodes",
    }


@pytest.mark.parametrize("survey", SURVEYS, ids=lambda path: path.stem)
def test_a_survey_asks_only_for_inputs_with_their_documented_defaults(survey: Path) -> None:
    spec = json.loads(survey.read_text())
    assert (REPO / "playbooks" / f"{survey.stem}.yml").is_file()
    options = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"][
        "enable"
    ]["options"]
    questions = {question["variable"]: question for question in spec["spec"]}
    assert set(questions) - PLAYBOOK_INPUTS <= set(options)
    assert "target" in questions
    assert questions["target"]["required"] is (survey.stem != "converge")
    for name, question in questions.items():
        assert question["type"] in {"text", "integer", "multiplechoice"}, name
        if name in options:
            expected = options[name]["default"]
            assert str(question["default"]).lower() == str(expected).lower(), name


def test_the_documented_awx_setup_reads_the_shipped_surveys() -> None:
    plays = yaml.safe_load(awx_setup_playbook())
    templates = [
        task["awx.awx.job_template"] for task in plays[0]["tasks"] if "awx.awx.job_template" in task
    ]
    assert plays[0]["vars"]["surveys"].endswith("/ansible_collections/hygon/dcu/awx/surveys")
    (template,) = templates
    assert (
        "lookup('ansible.builtin.file', surveys ~ '/' ~ item ~ '.json')" in template["survey_spec"]
    )
    looped = {path.stem for path in SURVEYS}
    assert set(plays[0]["tasks"][-1]["loop"]) == looped


def test_collection_dependency_declaration_points_at_real_files() -> None:
    """ansible-builder reads meta/execution-environment.yml of an installed collection with paths
    relative to the collection root."""
    declaration = yaml.safe_load((REPO / "meta" / "execution-environment.yml").read_text())
    for kind, relative in declaration["dependencies"].items():
        assert (REPO / relative).is_file(), (kind, relative)


def test_every_collection_the_roles_and_playbooks_use_is_a_declared_dependency() -> None:
    used = set()
    for path in [*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("playbooks/**/*.yml")]:
        for match in re.finditer(r"^\s*-?\s*([a-z_]+\.[a-z_]+)\.[a-z_]+:", path.read_text(), re.M):
            used.add(match.group(1))
    used -= {"ansible.builtin", "hygon.dcu"}
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert used, "no collection found: the pattern is wrong"
    assert used <= set(galaxy["dependencies"]), used - set(galaxy["dependencies"])
