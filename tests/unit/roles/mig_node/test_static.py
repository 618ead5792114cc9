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
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

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


EE = REPO / "meta" / "ee"
EE_DEFINITIONS = ("execution-environment.yml", "execution-environment-standard.yml")


def ansible_builder_create(tmp_path: Path, name: str) -> tuple[dict[str, Any], str]:
    """ansible-builder create on the definition ``name`` of meta/ee, in a copy of the tree it
    refers to (../ee-*.{txt,yml}, ../../.build/ee-collection); its definition and Containerfile."""
    ee_dir = tmp_path / "meta" / "ee"
    ee_dir.mkdir(parents=True)
    definition: dict[str, Any] = yaml.safe_load((EE / name).read_text())
    sources = [
        definition["dependencies"]["python"],
        *([definition["dependencies"]["galaxy"]] if "galaxy" in definition["dependencies"] else []),
        *(
            entry["src"]
            for entry in definition["additional_build_files"]
            if not entry["src"].startswith("../../.build/")
        ),
    ]
    for source in sources:
        shutil.copy((EE / source).resolve(), (ee_dir / source).resolve())
    shutil.copy(EE / name, ee_dir)
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
        [str(BIN / "ansible-builder"), "create", "-f", f"meta/ee/{name}", "-c", "context"],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list((tmp_path / "context" / "_build" / "hygon-dcu").glob("hygon-dcu-*.tar.gz"))
    return definition, (tmp_path / "context" / "Containerfile").read_text()


def test_execution_environment_definition_is_accepted_by_ansible_builder(
    tmp_path: Path,
) -> None:
    definition, containerfile = ansible_builder_create(tmp_path, EE_DEFINITIONS[0])
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
    requirements = yaml.safe_load(
        (tmp_path / "context" / "_build" / "hygon-ee" / "ee-collections.yml").read_text()
    )
    # The EE carries exactly the collections galaxy.yml declares, at the same floors.
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert {c["name"]: c["version"] for c in requirements["collections"]} == galaxy["dependencies"]


def test_the_standard_base_definition_takes_the_collections_from_galaxy(tmp_path: Path) -> None:
    """Not built here (no registry, no Galaxy): ansible-builder accepts it, and the Containerfile
    is on the standard base, with a Galaxy stage for exactly galaxy.yml's dependencies and
    hygon.dcu from this repository's tarball."""
    definition, containerfile = ansible_builder_create(tmp_path, EE_DEFINITIONS[1])
    base = definition["images"]["base_image"]["name"]
    assert not base.startswith("localhost/"), base
    assert f'ARG EE_BASE_IMAGE="{base}"' in containerfile
    assert "AS galaxy" in containerfile
    requirements = yaml.safe_load(
        (tmp_path / "context" / "_build" / "requirements.yml").read_text()
    )
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert {c["name"]: c["version"] for c in requirements["collections"]} == galaxy["dependencies"]
    assert "ansible-galaxy collection install --offline --no-deps" in containerfile


def test_both_execution_environments_pin_one_ansible_core_the_collection_supports() -> None:
    """One exact ansible-core in both (a rebuild gives the same control node); the EE stage
    (tests/tools/ee_test.sh) runs the playbooks on it."""
    pins = {
        name: yaml.safe_load((EE / name).read_text())["dependencies"]["ansible_core"]["package_pip"]
        for name in EE_DEFINITIONS
    }
    (pin,) = set(pins.values())
    assert pin.startswith("ansible-core=="), pins
    supported = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    assert Version(pin.split("==")[1]) in SpecifierSet(supported), (pin, supported)


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
# The role entry points whose argument specs hold each playbook's variables.
PLAYBOOK_ROLES = {
    "enable_mig": [("mig_node", "enable")],
    "disable_mig": [("mig_node", "enable")],
    "reboot_recovery": [("mig_node", "enable")],
    "converge": [("mig_node", "enable")],
    "label_nodes": [("mig_node", "enable")],
    "report": [("mig_node", "enable"), ("fleet_report", "write")],
    "deploy_device_plugin": [("device_plugin", "main")],
}
# A playbook's default group for `target` (`default('')` is none: the survey must ask).
TARGET_DEFAULT = re.compile(r"target \| default\('([^']+)'\)")


def role_options(playbook: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for role, entry in PLAYBOOK_ROLES[playbook]:
        specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
        options |= specs["argument_specs"][entry]["options"]
    return options


def test_there_is_a_survey_for_every_playbook() -> None:
    playbooks = {path.stem for path in (REPO / "playbooks").glob("*.yml")}
    assert {path.stem for path in SURVEYS} == playbooks == set(PLAYBOOK_ROLES)


@pytest.mark.parametrize("survey", SURVEYS, ids=lambda path: path.stem)
def test_a_survey_asks_only_for_inputs_with_their_documented_defaults(survey: Path) -> None:
    spec = json.loads(survey.read_text())
    playbook = (REPO / "playbooks" / f"{survey.stem}.yml").read_text()
    options = role_options(survey.stem)
    questions = {question["variable"]: question for question in spec["spec"]}
    assert set(questions) - PLAYBOOK_INPUTS <= set(options)
    # A playbook with hosts to act on asks for them; required unless it has a default group.
    if "target" in playbook:
        target_default = TARGET_DEFAULT.search(playbook)
        assert questions["target"]["required"] is (target_default is None)
        assert questions["target"]["default"] == (target_default[1] if target_default else "")
    else:
        assert "target" not in questions
    for name, question in questions.items():
        assert question["type"] in {"text", "integer", "multiplechoice"}, name
        if name in options:
            expected = options[name]["default"]
            assert str(question["default"]).lower() == str(expected).lower(), name
            if question["type"] == "multiplechoice":
                choices = options[name].get("choices") or [True, False]
                assert sorted(question["choices"]) == sorted(str(c).lower() for c in choices)


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
