"""What each of the role's service accounts may do, as the API server answers it, against the
table of docs/privileges.md (acceptance of "every privilege earned").

``kubectl auth can-i --list --as=system:serviceaccount:<ns>:<account> -n <namespace>`` is asked
in every namespace the table names and in the workloads' namespace (standing for "every
namespace"). What any service account may do (discovery, self reviews) is what an account the
role never made is answered, and is left out of both sides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from e2e_support import NAMESPACE, REPO, WORKLOAD_NAMESPACE, Kube

TABLE = REPO / "docs" / "privileges.md"
ACCOUNTS = (
    "hygon-dcu-device-plugin",
    "hygon-dcu-admission",
    "hygon-dcu-extender",
    "hygon-dcu-scheduler",
)
EVERY_NAMESPACE = "every namespace"
# An account the role never makes: what every service account may do.
NOBODY = "hygon-dcu-nobody"
# (resource as kubectl prints it, resource names, verb)
Grant = tuple[str, tuple[str, ...], str]
# One line of `kubectl auth can-i --list`: resources, non-resource URLs, names, verbs.
LIST_LINE = re.compile(r"^(\S*)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$")


def _cells(line: str) -> list[str]:
    return [cell.strip().strip("`").strip() for cell in line.strip().strip("|").split("|")]


def documented_rows() -> list[dict[str, str]]:
    """The table's rows, by column name."""
    lines = [line for line in TABLE.read_text().splitlines() if line.startswith("| ")]
    header, *rows = lines
    names = _cells(header)
    return [dict(zip(names, _cells(row), strict=True)) for row in rows]


def _holds(condition: str, switches: Mapping[str, Any]) -> bool:
    if condition == "always":
        return True
    for term in condition.split(","):
        name, _colon, value = (part.strip().strip("`") for part in term.partition(":"))
        if not (str(switches.get(name, "")) == value if value else bool(switches.get(name))):
            return False
    return True


def _resource(group: str, resource: str) -> str:
    return f"{resource}.{group}" if group else resource


def _rules_of(kube: Kube, kind: str, name: str, namespace: str) -> set[Grant]:
    args = ["get", kind.lower(), name] + (["-n", namespace] if kind == "Role" else [])
    role = kube.json(*args)
    grants: set[Grant] = set()
    for rule in role.get("rules", []):
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule["verbs"]:
                    names = tuple(sorted(rule.get("resourceNames", ())))
                    grants.add((_resource(group, resource), names, verb))
    return grants


def expected(kube: Kube, switches: Mapping[str, Any]) -> dict[tuple[str, str], set[Grant]]:
    """(account, namespace) -> what the table grants there with these switches."""
    namespaces = scopes()
    found: dict[tuple[str, str], set[Grant]] = {
        (account, namespace): set() for account in ACCOUNTS for namespace in namespaces
    }
    for row in documented_rows():
        if not _holds(row["when"], switches):
            continue
        kind, _space, role_name = row["resource"].partition(" ")
        if kind in ("ClusterRole", "Role"):
            where = NAMESPACE if row["where"] == EVERY_NAMESPACE else row["where"]
            grants = _rules_of(kube, kind, role_name.strip("`"), where)
        else:
            names = tuple(sorted(n.strip() for n in row["names"].split(",") if n.strip()))
            grants = {(row["resource"], names, verb.strip()) for verb in row["verbs"].split(",")}
        targets = namespaces if row["where"] == EVERY_NAMESPACE else [row["where"]]
        for namespace in targets:
            found[(row["account"], namespace)] |= grants
    return found


def scopes() -> list[str]:
    named = {row["where"] for row in documented_rows()} - {EVERY_NAMESPACE}
    return sorted(named | {WORKLOAD_NAMESPACE})


def can_i(kube: Kube, account: str, namespace: str) -> set[Grant]:
    """What the API server says the account may do in the namespace (resource rules only)."""
    done = kube.run(
        "auth",
        "can-i",
        "--list",
        f"--as=system:serviceaccount:{NAMESPACE}:{account}",
        "-n",
        namespace,
    )
    grants: set[Grant] = set()
    lines = done.stdout.splitlines()
    assert lines and lines[0].split()[0] == "Resources", done.stdout
    for line in lines[1:]:
        match = LIST_LINE.match(line)
        assert match, f"unexpected line of kubectl auth can-i --list: {line!r}"
        resource, _urls, names, verbs = match.groups()
        if not resource:
            continue  # a non-resource URL (discovery): every account's
        for verb in verbs.split():
            grants.add((resource, tuple(sorted(names.split())), verb))
    return grants


def assert_privileges_as_documented(kube: Kube, **switches: Any) -> None:
    """Every account of the role may do exactly its rows of the table, in every namespace."""
    want = expected(kube, switches)
    differences = []
    for namespace in scopes():
        everyone = can_i(kube, NOBODY, namespace)
        for account in ACCOUNTS:
            have = can_i(kube, account, namespace) - everyone
            documented = want[(account, namespace)] - everyone
            if have != documented:
                differences.append(
                    f"{account} in {namespace}: granted but not documented "
                    f"{sorted(have - documented)}, documented but not granted "
                    f"{sorted(documented - have)}"
                )
    assert not differences, f"with {switches} (docs/privileges.md):\n" + "\n".join(differences)
