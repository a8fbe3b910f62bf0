"""Names of a model's state variables that do not depend on what else a process built
(Keras numbers auto-named layers, optimizers and seed generators per process):
`backbone/<path inside the backbone>`, `backbone/seed_generator_<k>` (k in the backbone's
layer order), a head's variables under its task name (`tnews/dense/kernel`),
`initial_loss/<task>`, `micro_batches_seen`, `loss_scale/<task>`, `finite_in_a_row/<task>`,
and `optimizer/<variable name>/<slot>` (`optimizer/iteration` for the optimizer's own).
Checkpoints key their arrays by these names; so do heads' metadata."""
import json


def layer_variable_names(layer, prefix):
    """{name: variable} of a layer's variables, named under `prefix` from inside the
    layer: the layer's own (possibly process-numbered) name is replaced by `prefix`."""
    seeds = {}
    for sublayer in layer._flatten_layers():
        for generator in sublayer._seed_generators:
            seeds.setdefault(id(generator.state), f"{prefix}/seed_generator_{len(seeds)}")
    named = {}
    for variable in layer.variables:
        name = seeds.get(id(variable)) or f"{prefix}/{variable.path.split('/', 1)[-1]}"
        _add(named, name, variable)
    return named


def optimizer_variable_names(optimizer, named):
    """{name: variable} of the optimizer's variables: a slot (Keras names it
    `<the variable's path with _ for />_<slot>`) after the named variable it belongs to."""
    owners = {v.path.replace("/", "_"): name for name, v in named.items()
              if getattr(v, "path", None)}
    result = {}
    for variable in optimizer.variables:
        name = f"optimizer/{variable.name}"
        cut = variable.name.rfind("_")
        while cut > 0:  # the longest owner the name starts with, then _<slot>
            if variable.name[:cut] in owners:
                name = f"optimizer/{owners[variable.name[:cut]]}/{variable.name[cut + 1:]}"
                break
            cut = variable.name.rfind("_", 0, cut)
        _add(result, name, variable)
    return result


def _add(named, name, variable):
    if name in named:  # a bug of ours, not the user's: two variables, one name
        raise RuntimeError(f"two state variables would be saved as {name!r}")
    named[name] = variable


def head_metadata(heads, backbone, labels=None):
    """trainer.json's "heads": per task its type (the head's family), num_labels, plain
    config, the names of its own variables (the tied MLM embedding is the backbone's) and,
    for a task with labels, "labels": their names in the order of the head's output ids
    (`labels`: {task: names}; readers check a spec against them, rundir/trained_on.py)."""
    shared = {id(v) for v in backbone.variables}
    labels = labels or {}
    return {task: {"type": head.family, "family": head.family, "num_labels": head.num_labels,
                   "config": head_config(head),
                   "variables": [name for name, v in layer_variable_names(head, task).items()
                                 if id(v) not in shared],
                   **({"labels": list(labels[task])} if task in labels else {})}
            for task, head in heads.items()}


def head_config(head):
    """A head's get_config() without the keys metadata holds apart, and without values
    JSON cannot hold (the tied embedding)."""
    config = {}
    for key, value in head.get_config().items():
        if key in ("name", "trainable", "dtype", "num_labels", "family"):  # own keys
            continue
        try:
            json.dumps(value)
        except TypeError:
            continue
        config[key] = value
    return config
