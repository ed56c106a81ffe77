"""The plugin layer: the pluggy manager (entry points) and the registry, where every name
(component, op, workload, template) is resolved. Nothing below this layer calls it."""
