"""Who reads a tensor, found in the protobuf (``walk.consumers``) and shaped for the diff.

An initializer or ``Constant`` value is read by the nodes that list its name as an input (in its
own graph, or in a subgraph below it by ONNX's outer-scope rule); a tensor attribute is read by
the node that holds it.
"""

from __future__ import annotations

import onnx

from monitor.modeldiff.diff import ConsumersOf
from monitor.modeldiff.walk import Consumer, NodeKey, TensorKey, consumers, keyed_nodes


def consumers_of(model: onnx.ModelProto) -> ConsumersOf:
    """A lookup: tensor key -> the nodes of ``model`` that read it, in graph order."""
    readers = consumers(model.graph)
    op_types = {key: node.op_type for key, node in keyed_nodes(model.graph)}

    def of(key: TensorKey) -> tuple[Consumer, ...]:
        if key.attribute:
            node = NodeKey(key.graph, key.name)
            return (Consumer(node, op_types[node]),) if node in op_types else ()
        return tuple(readers.get((key.graph, key.name), ()))

    return of
