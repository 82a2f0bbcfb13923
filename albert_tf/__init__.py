"""albert_tf: a faithful TensorFlow 2 / Keras 3 reproduction of ALBERT.

The package's rooms, each importing only the ones below it:

    export/     SavedModels, TFLite and the `python -m albert_tf.export` command
    research/   the paper's studies at small scale
    tasks/      pretraining, GLUE, SQuAD and RACE
    run/        the driver, the checks before work, training, devices, the output folder
    weights/    original checkpoints, release folders, TF-Hub, Hugging Face, keras-hub
    data/       tokenizers, pretraining data, task features, input pipelines
    cpu/        the CPU speed paths and their switch
    model/      the plain ALBERT model
    (root)      errors, fileio, options, interrupts, cli, output_paths: what every room uses

The names below import from here; importing the package itself loads no TensorFlow
(each name loads its module when first used).
"""

import importlib

# public name -> the module defining it (a module itself where the name is a module).
_PUBLIC = {
    "AlbertConfig": "albert_tf.model.config",
    "preset": "albert_tf.model.config",
    "AlbertModel": "albert_tf.model.modeling",
    "AlbertPretrainer": "albert_tf.model.modeling",
    "load_original_checkpoint": "albert_tf.weights.checkpoints",
    "save_original_checkpoint": "albert_tf.weights.checkpoints",
    "load_release": "albert_tf.weights.release",
    "AlbertClassifier": "albert_tf.tasks.classifier",
    "FullTokenizer": "albert_tf.data.tokenization",
    "speed_paths": "albert_tf.cpu.speed_paths",
    "hub": "albert_tf.weights.hub",
}


def __getattr__(name):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'albert_tf' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if module.rsplit(".", 1)[1] == name else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *_PUBLIC])


__all__ = sorted(_PUBLIC)
__version__ = "0.1.0"
