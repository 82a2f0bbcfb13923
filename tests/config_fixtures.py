"""The one tiny ALBERT config of the suite: every test's model is built from
`tiny_config`, with the overrides its subject needs (a vocabulary, a depth, a sequence
length) named where it is used."""


def tiny_config(**overrides):
    """An AlbertConfig of about 10k parameters (E 8, H 16, 3 layers, 4 heads) in one
    shared group, updated with `overrides` (AlbertConfig's field names)."""
    from albert_tf import AlbertConfig  # lazily: the worker scripts import this first

    values = dict(
        vocab_size=61,
        embedding_size=8,
        hidden_size=16,
        num_hidden_layers=3,
        num_hidden_groups=1,
        num_attention_heads=4,
        intermediate_size=24,
        inner_group_num=1,
        hidden_act="gelu",
        max_position_embeddings=20,
        type_vocab_size=2,
    )
    values.update(overrides)
    return AlbertConfig(**values)
