"""Where this process runs: the node and pod the Kubernetes downward API names (the Helm chart sets them).

One home for a fact five places read with five fallbacks: ``ONNXMON_NODE_NAME``, else ``NODE_NAME``
(the name other charts use), else none; ``POD_NAME`` and ``POD_NAMESPACE``. ``node_or_host`` adds the
host name for the callers that must always have a name (the per-node baseline scope, the runtime
label), so a process outside Kubernetes still says where it ran.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

NODE_VARIABLES = ("ONNXMON_NODE_NAME", "NODE_NAME")
POD_VARIABLE = "POD_NAME"
NAMESPACE_VARIABLE = "POD_NAMESPACE"


@dataclass(frozen=True)
class Identity:
    """The node, pod and namespace of this process; None outside Kubernetes (or where unset)."""

    node: str | None = None
    pod: str | None = None
    namespace: str | None = None

    def node_or_host(self) -> str:
        """The node, else this host's name: always a name."""
        return self.node or socket.gethostname()


def identity(environ: Mapping[str, str] | None = None) -> Identity:
    """The identity the environment gives (``os.environ`` unless another mapping is injected)."""
    env = os.environ if environ is None else environ
    node = next((env[name] for name in NODE_VARIABLES if env.get(name)), None)
    return Identity(node=node, pod=env.get(POD_VARIABLE) or None, namespace=env.get(NAMESPACE_VARIABLE) or None)
