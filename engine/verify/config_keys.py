"""Config keys that are never the architecture: shared by ``archledger new`` (engine/verify/scaffold.py)
and the checkpoint guard (engine/verify/validate.py), which must not import each other both ways."""
from __future__ import annotations

#: Config keys that say how a file was written or how a runtime starts, never what the model is:
#: a change in them alone leaves the base's spec exact ("equal up to version fields").
UNSHAPING_KEYS = frozenset({
    "transformers_version", "_name_or_path", "use_cache", "bos_token_id", "eos_token_id",
    "pad_token_id", "initializer_range", "attention_dropout", "output_router_logits",
    "router_aux_loss_coef", "tokenizer_class", "torch_dtype", "dtype", "architectures", "auto_map",
    "quantization_config",   # compared on its own (the quant context)
    "ep_size",               # DeepSeek's remote code: the expert-parallel degree of a run
}) | frozenset({
    # transformers 4.x's PretrainedConfig wrote its generation and bookkeeping attributes into every
    # nested config it saved (Kimi-K2.5's text_config carries all of them): never the architecture
    "add_cross_attention", "bad_words_ids", "begin_suppress_tokens", "chunk_size_feed_forward",
    "cross_attention_hidden_size", "decoder_start_token_id", "diversity_penalty", "do_sample",
    "early_stopping", "encoder_no_repeat_ngram_size", "exponential_decay_length_penalty",
    "finetuning_task", "forced_bos_token_id", "forced_eos_token_id", "id2label", "is_decoder",
    "is_encoder_decoder", "label2id", "length_penalty", "max_length", "min_length",
    "no_repeat_ngram_size", "num_beam_groups", "num_beams", "num_return_sequences",
    "output_attentions", "output_hidden_states", "output_scores", "prefix", "problem_type",
    "pruned_heads", "remove_invalid_values", "repetition_penalty", "return_dict",
    "return_dict_in_generate", "sep_token_id", "suppress_tokens", "task_specific_params",
    "temperature", "tf_legacy_loss", "tie_encoder_decoder", "top_k", "top_p", "torchscript",
    "typical_p", "use_bfloat16",
})
