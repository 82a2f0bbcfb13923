"""An independent numpy (float64) ALBERT forward pass, written from the math.

Weights are a dict keyed by the ORIGINAL checkpoint names (docs/original.md
§5.2), so this file knows nothing about the Keras implementation.
"""

import math

import numpy as np


def layer_norm(x, beta, gamma, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


ACTIVATIONS = {
    "gelu": gelu_tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "linear": lambda x: x,
}


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def block(w, prefix, x, mask, cfg, ffn_prefix=None):
    """One attention-FFN block; the FFN's weights under `ffn_prefix` (default `prefix`)."""
    ffn_prefix = ffn_prefix or prefix
    b, s, h = x.shape
    n = cfg["num_attention_heads"]
    d = h // n
    p = prefix + "/attention_1/self/"

    def heads(name):
        y = x @ w[p + name + "/kernel"] + w[p + name + "/bias"]
        return y.reshape(b, s, n, d)  # column c -> head c // d, dim c % d

    q, k, v = heads("query"), heads("key"), heads("value")
    scores = np.einsum("bsnd,btnd->bnst", q, k) * (1.0 / math.sqrt(d))
    scores = scores + (1.0 - mask[:, None, None, :]) * -10000.0
    probs = softmax(scores)
    ctx = np.einsum("bnst,btnd->bsnd", probs, v).reshape(b, s, h)
    a = (
        ctx @ w[prefix + "/attention_1/output/dense/kernel"]
        + w[prefix + "/attention_1/output/dense/bias"]
    )
    h1 = layer_norm(a + x, w[prefix + "/LayerNorm/beta"], w[prefix + "/LayerNorm/gamma"])
    act = ACTIVATIONS[cfg["hidden_act"]]
    p = ffn_prefix
    f = act(
        h1 @ w[p + "/ffn_1/intermediate/dense/kernel"] + w[p + "/ffn_1/intermediate/dense/bias"]
    )
    g = (
        f @ w[p + "/ffn_1/intermediate/output/dense/kernel"]
        + w[p + "/ffn_1/intermediate/output/dense/bias"]
    )
    return layer_norm(g + h1, w[p + "/LayerNorm_1/beta"], w[p + "/LayerNorm_1/gamma"])


def forward_features(w, config, features):
    """`forward` of an AlbertConfig and a feature dict (input_ids, input_mask, segment_ids,
    masked_lm_positions: numpy arrays or tensors)."""
    names = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
    arrays = [features[k] for k in names]
    arrays = [a.numpy() if hasattr(a, "numpy") else np.asarray(a) for a in arrays]
    return forward(w, config.to_dict(), *arrays)


def forward(w, cfg, input_ids, input_mask, segment_ids, masked_lm_positions=None):
    """Returns a dict like AlbertModel/AlbertPretrainer (numpy float64)."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    s = input_ids.shape[1]
    emb = (
        w["bert/embeddings/word_embeddings"][input_ids]
        + w["bert/embeddings/token_type_embeddings"][segment_ids]
        + w["bert/embeddings/position_embeddings"][:s][None]
    )
    emb = layer_norm(emb, w["bert/embeddings/LayerNorm/beta"], w["bert/embeddings/LayerNorm/gamma"])
    x = emb
    if cfg["embedding_size"] != cfg["hidden_size"]:
        x = (
            x @ w["bert/encoder/embedding_hidden_mapping_in/kernel"]
            + w["bert/encoder/embedding_hidden_mapping_in/bias"]
        )
    mask = input_mask.astype(np.float64)
    layers = []
    L, G = cfg["num_hidden_layers"], cfg["num_hidden_groups"]
    # Paper Table 4: "attention"/"ffn" take that part from group 0 at every layer.
    sharing = cfg.get("cross_layer_sharing", "all")
    for l in range(L):
        g = int(l / L * G)
        attention_group = 0 if sharing == "attention" else g
        ffn_group = 0 if sharing == "ffn" else g
        for i in range(cfg["inner_group_num"]):
            x = block(
                w,
                f"bert/encoder/transformer/group_{attention_group}/inner_group_{i}",
                x,
                mask,
                cfg,
                ffn_prefix=f"bert/encoder/transformer/group_{ffn_group}/inner_group_{i}",
            )
            layers.append(x)
    pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
    out = {
        "sequence_output": x,
        "pooled_output": pooled,
        "encoder_outputs": layers,
        "embedding_output": emb,
    }
    if masked_lm_positions is not None:
        gathered = np.take_along_axis(x, masked_lm_positions[:, :, None], axis=1)
        t = ACTIVATIONS[cfg["hidden_act"]](
            gathered @ w["cls/predictions/transform/dense/kernel"]
            + w["cls/predictions/transform/dense/bias"]
        )
        t = layer_norm(
            t,
            w["cls/predictions/transform/LayerNorm/beta"],
            w["cls/predictions/transform/LayerNorm/gamma"],
        )
        out["mlm_logits"] = (
            t @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
        )
        out["sop_logits"] = (
            pooled @ w["cls/seq_relationship/output_weights"].T
            + w["cls/seq_relationship/output_bias"]
        )
    return out


def attention_shapes(shapes, p, H):
    for part in ("query", "key", "value"):
        shapes[p + f"attention_1/self/{part}/kernel"] = (H, H)
        shapes[p + f"attention_1/self/{part}/bias"] = (H,)
    shapes[p + "attention_1/output/dense/kernel"] = (H, H)
    shapes[p + "attention_1/output/dense/bias"] = (H,)
    shapes[p + "LayerNorm/beta"] = (H,)
    shapes[p + "LayerNorm/gamma"] = (H,)


def ffn_shapes(shapes, p, H, F):
    shapes[p + "ffn_1/intermediate/dense/kernel"] = (H, F)
    shapes[p + "ffn_1/intermediate/dense/bias"] = (F,)
    shapes[p + "ffn_1/intermediate/output/dense/kernel"] = (F, H)
    shapes[p + "ffn_1/intermediate/output/dense/bias"] = (H,)
    shapes[p + "LayerNorm_1/beta"] = (H,)
    shapes[p + "LayerNorm_1/gamma"] = (H,)


def original_shapes(cfg, heads=True):
    """Name -> shape of every trainable variable of the original graph, in order."""
    V, E, H = cfg["vocab_size"], cfg["embedding_size"], cfg["hidden_size"]
    F, P, T = cfg["intermediate_size"], cfg["max_position_embeddings"], cfg["type_vocab_size"]
    shapes = {
        "bert/embeddings/word_embeddings": (V, E),
        "bert/embeddings/token_type_embeddings": (T, E),
        "bert/embeddings/position_embeddings": (P, E),
        "bert/embeddings/LayerNorm/beta": (E,),
        "bert/embeddings/LayerNorm/gamma": (E,),
    }
    if E != H:
        shapes["bert/encoder/embedding_hidden_mapping_in/kernel"] = (E, H)
        shapes["bert/encoder/embedding_hidden_mapping_in/bias"] = (H,)
    L, G = cfg["num_hidden_layers"], cfg["num_hidden_groups"]
    sharing = cfg.get("cross_layer_sharing", "all")
    for g in sorted({int(l / L * G) for l in range(L)}):
        for i in range(cfg["inner_group_num"]):
            p = f"bert/encoder/transformer/group_{g}/inner_group_{i}/"
            if not (g > 0 and sharing == "attention"):
                attention_shapes(shapes, p, H)
            if not (g > 0 and sharing == "ffn"):
                ffn_shapes(shapes, p, H, F)
    shapes["bert/pooler/dense/kernel"] = (H, H)
    shapes["bert/pooler/dense/bias"] = (H,)
    if heads:
        shapes["cls/predictions/transform/dense/kernel"] = (H, E)
        shapes["cls/predictions/transform/dense/bias"] = (E,)
        shapes["cls/predictions/transform/LayerNorm/beta"] = (E,)
        shapes["cls/predictions/transform/LayerNorm/gamma"] = (E,)
        shapes["cls/predictions/output_bias"] = (V,)
        shapes["cls/seq_relationship/output_weights"] = (2, H)
        shapes["cls/seq_relationship/output_bias"] = (2,)
    return shapes


def random_weights(cfg, seed, heads=True, scale=0.3):
    """Random values (not the 0.02 init: bigger values exercise every term)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in original_shapes(cfg, heads).items():
        value = rng.normal(0.0, scale, size=shape)
        if name.endswith("gamma"):
            value = 1.0 + value
        out[name] = value.astype(np.float32)
    return out
