"""Generate (or check) the roles' copies of the product's Kubernetes names.

The names are the plugin's: hygon_dcu_plugin.vocabulary (resources, labels, annotations, the
second scheduler's name), read from plugin_image/src. A role reads them from
its vars/vocabulary.yml (tasks and vars/main.yml, after ansible.builtin.include_vars) and from a
vocabulary.j2 next to its templates ({% import 'vocabulary.j2' as vocabulary %}), so that
templates render the same when rendered on their own, outside the role.

    generate_role_vocabulary.py            rewrite the files
    generate_role_vocabulary.py --check    exit 1 (naming the files) if a file is not what the
                                           definitions generate; run without --check to fix
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

IMAGE_DIR = Path(__file__).resolve().parent.parent
SRC_DIR = IMAGE_DIR / "src"
DEFAULT_ROLES_DIR = IMAGE_DIR.parent / "roles"
COMMAND = ".venv/bin/python plugin_image/tools/generate_role_vocabulary.py"

# Templates put the names inside quoted Jinja, YAML and CEL strings: only characters of
# Kubernetes qualified names (and the prefixes of such names) may appear, or, for a name that
# is an object's own name (the second scheduler's), those of a DNS-1123 label.
_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[A-Za-z0-9._-]*$")
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Name:
    key: str
    value: str
    origin: str


@dataclass(frozen=True)
class Target:
    """One generated file: a role's vars file (prefix set) or a Jinja file to import."""

    path: str
    var_prefix: str | None
    read_by: str


_IMPORTED = "the templates in this directory (import 'vocabulary.j2' as vocabulary)"
# A vocabulary.j2 sits in the directory of the templates that import it: a template rendered on
# its own (the admission templates, the tests) has only its own directory on the search path.
TARGETS = (
    Target(
        "mig_node/vars/vocabulary.yml",
        "mig_node__vocabulary_",
        "tasks/validate.yml (ansible.builtin.include_vars)",
    ),
    Target("mig_node/templates/vocabulary.j2", None, _IMPORTED),
    Target(
        "device_plugin/vars/vocabulary.yml",
        "device_plugin__vocabulary_",
        "tasks/main.yml (ansible.builtin.include_vars)",
    ),
    Target("device_plugin/templates/admission/vocabulary.j2", None, _IMPORTED),
    Target("fleet_report/templates/vocabulary.j2", None, _IMPORTED),
)


def names() -> list[Name]:
    """Every product name the roles use, in the order the generated files list them."""
    # This tree's plugin, not an installed copy of it.
    if str(SRC_DIR) not in sys.path:
        sys.path.insert(0, str(SRC_DIR))
    from hygon_dcu_plugin import vocabulary  # noqa: PLC0415

    found = [
        Name("whole_card", vocabulary.WHOLE_CARD, "vocabulary.WHOLE_CARD"),
        Name("sliced", vocabulary.SLICED, "vocabulary.SLICED"),
        Name("family", vocabulary.FAMILY, "vocabulary.FAMILY"),
        Name("profile_prefix", vocabulary.PROFILE_PREFIX, "vocabulary.PROFILE_PREFIX"),
        Name("annotation_prefix", vocabulary.ANNOTATION_PREFIX, "vocabulary.ANNOTATION_PREFIX"),
        Name("vendor_prefix", vocabulary.VENDOR_PREFIX, "vocabulary.VENDOR_PREFIX"),
        Name("present_label", vocabulary.PRESENT_LABEL, "vocabulary.PRESENT_LABEL"),
        Name("park_label", vocabulary.PARK_LABEL, "vocabulary.PARK_LABEL"),
        Name("evict_label", vocabulary.EVICT_LABEL, "vocabulary.EVICT_LABEL"),
        Name(
            "admission_scope_label",
            vocabulary.ADMISSION_SCOPE_LABEL,
            "vocabulary.ADMISSION_SCOPE_LABEL",
        ),
        Name(
            "config_hash_annotation",
            vocabulary.CONFIG_HASH_ANNOTATION,
            "vocabulary.CONFIG_HASH_ANNOTATION",
        ),
        # The scheduler extender (docs/dev/extender.md): requests by size, the second
        # scheduler's name, and what the extender and the plugin write.
        Name("memory_mib", vocabulary.MEMORY_MIB, "vocabulary.MEMORY_MIB"),
        Name("compute_units", vocabulary.COMPUTE_UNITS, "vocabulary.COMPUTE_UNITS"),
        Name("slice_memory_mib", vocabulary.SLICE_MEMORY_MIB, "vocabulary.SLICE_MEMORY_MIB"),
        Name(
            "slice_compute_units",
            vocabulary.SLICE_COMPUTE_UNITS,
            "vocabulary.SLICE_COMPUTE_UNITS",
        ),
        Name("scheduler_name", vocabulary.SCHEDULER_NAME, "vocabulary.SCHEDULER_NAME"),
        Name("geometry_label", vocabulary.GEOMETRY_LABEL, "vocabulary.GEOMETRY_LABEL"),
        Name(
            "reservation_annotation",
            vocabulary.RESERVATION_ANNOTATION,
            "vocabulary.RESERVATION_ANNOTATION",
        ),
        Name("reserved_label", vocabulary.RESERVED_LABEL, "vocabulary.RESERVED_LABEL"),
        Name("mig_state_label", vocabulary.MIG_STATE_LABEL, "vocabulary.MIG_STATE_LABEL"),
    ]
    for name in found:
        if not (_NAME.match(name.value) or _LABEL.match(name.value)):
            raise SystemExit(f"{name.origin} = {name.value!r} is not a Kubernetes name")
    return found


def _header(target: Target) -> list[str]:
    return [
        "Generated by plugin_image/tools/generate_role_vocabulary.py from the plugin's Python",
        f"definitions (plugin_image/src); do not edit, run: {COMMAND}",
        f"Read by {target.read_by}.",
    ]


def render(target: Target, found: list[Name]) -> str:
    header = _header(target)
    if target.var_prefix is not None:
        lines = ["---", *(f"# {line}" for line in header)]
        lines += [f"{target.var_prefix}{n.key}: {json.dumps(n.value)}  # {n.origin}" for n in found]
    else:
        lines = [f"{{#- {header[0]}", *(f"    {line}" for line in header[1:])]
        lines[-1] += " -#}"
        lines += [
            f"{{%- set {n.key} = {json.dumps(n.value)} -%}}{{#- {n.origin} -#}}" for n in found
        ]
    return "\n".join(lines) + "\n"


def generate() -> dict[str, str]:
    """Generated file (path under roles/) -> content."""
    found = names()
    return {target.path: render(target, found) for target in TARGETS}


def differences(wanted: dict[str, str], roles_dir: Path) -> list[str]:
    problems = []
    for relative, content in wanted.items():
        path = roles_dir / relative
        if not path.is_file():
            problems.append(f"missing: {path}")
        elif path.read_text() != content:
            problems.append(f"out of date: {path}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify instead of writing")
    parser.add_argument("--roles-dir", type=Path, default=DEFAULT_ROLES_DIR)
    args = parser.parse_args(argv)

    wanted = generate()
    problems = differences(wanted, args.roles_dir)
    if args.check:
        if problems:
            for problem in problems:
                print(problem, file=sys.stderr)
            print(
                "the roles' vocabulary differs from the plugin's definitions: "
                "run plugin_image/tools/generate_role_vocabulary.py",
                file=sys.stderr,
            )
            return 1
        print(f"vocabulary files in {args.roles_dir} match the plugin's definitions")
        return 0
    for relative, content in wanted.items():
        path = args.roles_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    print(f"wrote {len(wanted)} files under {args.roles_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
