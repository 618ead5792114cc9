"""One request as the fake received it: what the request log keeps and what behaviours match."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Route:
    """A resource path: /api/v1[/namespaces/NS]/PLURAL[/NAME[/SUBRESOURCE]] or the /apis/G/V
    equivalent."""

    group_version: str
    namespace: str
    plural: str
    name: str
    subresource: str

    @classmethod
    def parse(cls, parts: list[str]) -> Route | None:
        if parts[:1] == ["api"] and len(parts) >= 3:
            group_version, rest = parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group_version, rest = "/".join(parts[1:3]), parts[3:]
        else:
            return None
        namespace = ""
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        return cls(group_version, namespace, rest[0], *[*rest[1:], "", ""][:2])


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str = ""
    body: Any = None
    # filled in once answered
    status: int = 0
    route: Route | None = field(default=None, compare=False)

    @property
    def watching(self) -> bool:
        return self.query.get("watch", "") in ("true", "1")

    @property
    def access(self) -> tuple[str, str, str]:
        """(apiGroup, resource[/subresource], verb) in RBAC terms."""
        route = self.route
        if route is None:
            return ("", self.path, self.method.lower())
        resource = f"{route.plural}/{route.subresource}" if route.subresource else route.plural
        group = route.group_version.rpartition("/")[0]
        if self.method == "GET":
            verb = "get" if route.name else ("watch" if self.watching else "list")
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
                self.method, self.method.lower()
            )
        return (group, resource, verb)

    def is_for(self, plural: str, *, method: str | None = None, named: bool | None = None) -> bool:
        """Whether this request is for ``plural`` (with that method; for one named object or
        for the collection)."""
        route = self.route
        return (
            route is not None
            and route.plural == plural
            and (method is None or self.method == method)
            and (named is None or bool(route.name) == named)
        )
