"""One stand-in for the Kubernetes API server, shared by every test that needs one without the
cluster tier (tests/cluster): an object store served over HTTP on 127.0.0.1 that the real
`kubernetes` client, kubernetes.core and the product's own API code talk to unchanged.

The core (server.py) keeps what clients rely on from any API server: resourceVersion and uid,
discovery, get/list/create/update/merge patch/server-side apply/delete, dry run, label and field
selectors, pagination, Status bodies and a log of every request. What only some tests need (a
controller, a fault, a subresource's rules) is a Behaviour plugged in (behaviour.py and the
modules beside it), so each test names what it relies on.
"""

from .behaviour import Behaviour, Fault, Hook
from .bindings import Bindings
from .objects import pod
from .replies import Reply, failure, status_body
from .requests import Request
from .rollout import Rollout
from .server import FakeApiServer, serving
from .validation import annotation_key_problem, lease_problem

__all__ = [
    "Behaviour",
    "Bindings",
    "FakeApiServer",
    "Fault",
    "Hook",
    "Reply",
    "Request",
    "Rollout",
    "annotation_key_problem",
    "failure",
    "lease_problem",
    "pod",
    "serving",
    "status_body",
]
