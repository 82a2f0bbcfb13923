"""The model an export traces its serving functions from: the trained model in inference
form, with the same weights and no dropout.

Why a dropout-free copy rather than calling with training=False: a Keras 3 Dropout layer
of rate > 0 owns a SeedGenerator whose state variable no tf.Module attribute reaches, so
a saved function that traces it fails (`KeyError: ... captures ... seed_generator_state
... not reachable from root`). training=False keeps it out only as long as every layer
and every traced signature honours the flag (the encoder's `__call__` is also traced
with training=True, for hub.KerasLayer). A model built from the config with both dropout
probabilities and every head dropout at 0 holds no Dropout layer of rate > 0 and so no
seed generator at all, whatever a function is traced with; dropout is the identity at
inference, so its outputs are those of the trained model. A copy holds no optimizer
either. The config files an export writes keep the release's dropout values: they
describe how to fine-tune the model, not what the serving graph computes.
"""

from __future__ import annotations

# The dropout probabilities of an AlbertConfig (albert_tf/model/config.py).
CONFIG_DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob")
# Task heads' own dropout rates in a model's get_config() (AlbertClassifier, AlbertRace,
# the SQuAD v2 head).
HEAD_DROPOUTS = ("classifier_dropout", "dropout_prob")


def inference_config(config):
    """`config` (an AlbertConfig) with both dropout probabilities 0."""
    return config.replace(**{name: 0.0 for name in CONFIG_DROPOUTS})


def _has_dropout(settings) -> bool:
    config = settings.get("config", {})
    return any(config.get(n, 0) for n in CONFIG_DROPOUTS) or any(
        settings.get(n, 0) for n in HEAD_DROPOUTS
    )


def serving_model(model):
    """`model` (a built Keras model of this project, whose get_config() holds its
    AlbertConfig as "config") if it has no dropout; else a new model of its class from
    the same settings with every dropout 0, holding copies of its weights."""
    settings = model.get_config()
    if not _has_dropout(settings):
        return model
    settings = {
        **settings,
        "config": {**settings["config"], **{n: 0.0 for n in CONFIG_DROPOUTS}},
        **{n: 0.0 for n in HEAD_DROPOUTS if n in settings},
    }
    copy = type(model).from_config(settings)
    copy.build()
    if [(w.path, w.shape) for w in copy.weights] != [(w.path, w.shape) for w in model.weights]:
        raise ValueError(f"the dropout-free copy of {model.name} has other weights")
    for target, source in zip(copy.weights, model.weights):
        target.assign(source)
    return copy
