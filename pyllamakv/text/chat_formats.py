"""Named chat formats, for GGUFs without a template (llama-cpp-python's ``chat_format``).

Each is a Jinja2 template over the same variables as a GGUF's own template
(chat.py renders it in the same sandbox) and the texts that end a turn. The
layouts are the model families' published prompt formats; a system message
goes where the family puts it (llama-2: inside the first [INST] block;
mistral-instruct and gemma, which have no system role: before the first
user text).
"""
from __future__ import annotations

from .chat import CHATML_TEMPLATE

# a system message as the first message, folded into the first user turn
_FOLD_SYSTEM = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set sys = messages[0]['content'] %}{% set msgs = messages[1:] %}"
    "{% else %}{% set sys = '' %}{% set msgs = messages %}{% endif %}"
)

LLAMA2 = _FOLD_SYSTEM + (
    "{% for m in msgs %}"
    "{% if m['role'] == 'user' %}"
    "{{ bos_token }}[INST] "
    "{% if loop.first and sys %}<<SYS>>\n{{ sys }}\n<</SYS>>\n\n{% endif %}"
    "{{ m['content'] }} [/INST]"
    "{% else %} {{ m['content'] }} {{ eos_token }}{% endif %}"
    "{% endfor %}"
)

LLAMA3 = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

MISTRAL_INSTRUCT = _FOLD_SYSTEM + (
    "{{ bos_token }}"
    "{% for m in msgs %}"
    "{% if m['role'] == 'user' %}"
    "[INST] {% if loop.first and sys %}{{ sys }}\n\n{% endif %}{{ m['content'] }} [/INST]"
    "{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}"
    "{% endfor %}"
)

ZEPHYR = (
    "{% for m in messages %}"
    "<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

GEMMA = _FOLD_SYSTEM + (
    "{{ bos_token }}"
    "{% for m in msgs %}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
    "{% if loop.first and sys %}{{ sys }}\n\n{% endif %}{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

# name -> (template, stop texts beyond the model's EOS)
CHAT_FORMATS: dict[str, tuple[str, tuple[str, ...]]] = {
    "chatml": (CHATML_TEMPLATE, ("<|im_end|>",)),
    "llama-2": (LLAMA2, ()),
    "llama-3": (LLAMA3, ("<|eot_id|>",)),
    "mistral-instruct": (MISTRAL_INSTRUCT, ()),
    "zephyr": (ZEPHYR, ()),
    "gemma": (GEMMA, ("<end_of_turn>",)),
}


def chat_format_template(name: str) -> tuple[str, tuple[str, ...]]:
    """(template, extra stops) of a named format; ValueError names the known ones."""
    try:
        return CHAT_FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(f"chat_format {name!r} is not known; use None (the model's own "
                         f"template) or one of {sorted(CHAT_FORMATS)}") from None
