"""Shared helpers of the weight-format tests: models with every variable random, their
values under the original names, and a random keras-hub backbone of a config."""

import numpy as np


def randomized(model, seed, stddev=0.1):
    """`model`, built, with every variable drawn from N(0, stddev^2) (zero-initialized
    biases too, so a value loaded into the wrong variable shows)."""
    model.build()
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0, stddev, variable.shape).astype(np.float32))
    return model


def original_values(model) -> dict:
    """{original name: array} of `model`'s variables."""
    from albert_tf.weights import checkpoints

    return {n: np.asarray(v) for n, v in checkpoints.original_variable_map(model).items()}


def random_keras_hub_backbone(config, seed):
    """keras-hub's AlbertBackbone of `config`'s shape, every weight from N(0, 0.2^2)."""
    import keras_hub  # here, not at collection: only the tests that call this need it

    backbone = keras_hub.models.AlbertBackbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        embedding_dim=config.embedding_size,
        hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size,
        num_groups=config.num_hidden_groups,
        num_inner_repetitions=config.inner_group_num,
        max_sequence_length=config.max_position_embeddings,
    )
    rng = np.random.default_rng(seed)
    backbone.set_weights([rng.normal(0, 0.2, w.shape) for w in backbone.get_weights()])
    return backbone
