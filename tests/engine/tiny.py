"""A tiny Llama model and byte-level BPE tokenizer, built from scratch in a folder, so most
engine tests run in seconds without the real model."""

from __future__ import annotations

from pathlib import Path

TEXT = """The quick brown fox jumps over the lazy dog. A stitch in time saves nine.
Hello world! {"name": "switchyard", "port": 8080, "ok": true, "tags": ["a", "b"]}
def add(a, b):\n    return a + b\nThe rain in Spain stays mainly in the plain. 0123456789
Lorem ipsum dolor sit amet, consectetur adipiscing elit. yes no maybe. red green blue.
"""

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<fim_prefix>", "<fim_suffix>", "<fim_middle>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build(folder: Path, *, fim: bool = True, context: int = 256, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    special = SPECIAL if fim else SPECIAL[:3]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT] * 20, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", bos_token=None,
                                 unk_token=None, pad_token="<|endoftext|>")
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(folder)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(hf), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context,
                      eos_token_id=hf.eos_token_id, bos_token_id=None, pad_token_id=hf.pad_token_id,
                      tie_word_embeddings=True, initializer_range=0.5)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(folder)
    return folder
