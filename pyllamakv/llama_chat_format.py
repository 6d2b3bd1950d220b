"""llama_cpp.llama_chat_format: chat formatters and handlers (text/chat_handlers.py,
text/named_formats.py).

Every text-only named format of llama-cpp-python is here (``format_<name>``,
registered under its name). The multimodal handlers (LLaVA, Moondream, MiniCPM,
Qwen2.5-VL, Gemma 4, ...) need image encoders pyllamakv does not have: each
class exists and raises UnsupportedFeature naming itself when created.
"""
from .api.compat import UnsupportedFeature
from .text.chat_handlers import (ChatFormatterResponse, Jinja2ChatFormatter,
                                 LlamaChatCompletionHandlerNotFoundException,
                                 LlamaChatCompletionHandlerRegistry,
                                 chat_formatter_to_chat_completion_handler,
                                 get_chat_completion_handler,
                                 guess_chat_format_from_gguf_metadata,
                                 hf_tokenizer_config_to_chat_completion_handler,
                                 hf_tokenizer_config_to_chat_formatter,
                                 register_chat_completion_handler, register_chat_format)
from .text.chat import CHATML_TEMPLATE as CHATML_CHAT_TEMPLATE
from .text.named_formats import (  # noqa: F401  (llama-cpp-python's names)
    format_alpaca, format_baichuan, format_baichuan2, format_chatglm3, format_chatml,
    format_gemma, format_intel, format_llama2, format_llama3, format_mistral_instruct,
    format_mistrallite, format_oasst_llama, format_open_orca, format_openbuddy,
    format_openchat, format_phind, format_pygmalion, format_qwen, format_redpajama_incite,
    format_saiga, format_snoozy, format_vicuna, format_zephyr)

format = format_vicuna   # llama-cpp-python registers vicuna under the name "format"


def chatml_function_calling(llama, messages, **kwargs):
    """The "chatml-function-calling" handler: ChatML, with tools / functions through
    pyllamakv's own tool calling (api/tools.py)."""
    return llama.create_chat_completion(messages, chat_formatter=_CHATML, **kwargs)


_CHATML = Jinja2ChatFormatter(CHATML_CHAT_TEMPLATE, eos_token="<|im_end|>", bos_token="")
register_chat_completion_handler("chatml-function-calling")(chatml_function_calling)


def _image_handler(name: str) -> type:
    def refuse(*args, **kwargs):
        raise UnsupportedFeature(f"{name}: image input (multimodal chat handlers) is not "
                                 "supported by pyllamakv")

    class Handler:
        def __init__(self, *args, **kwargs) -> None:
            refuse()
        from_pretrained = classmethod(lambda cls, *a, **k: refuse())
    Handler.__name__ = Handler.__qualname__ = name
    return Handler


Llava15ChatHandler = _image_handler("Llava15ChatHandler")
Llava16ChatHandler = _image_handler("Llava16ChatHandler")
ObsidianChatHandler = _image_handler("ObsidianChatHandler")
MoondreamChatHandler = _image_handler("MoondreamChatHandler")
NanoLlavaChatHandler = _image_handler("NanoLlavaChatHandler")
Llama3VisionAlphaChatHandler = _image_handler("Llama3VisionAlphaChatHandler")
MiniCPMv26ChatHandler = _image_handler("MiniCPMv26ChatHandler")
Qwen25VLChatHandler = _image_handler("Qwen25VLChatHandler")
MTMDChatHandler = _image_handler("MTMDChatHandler")
Gemma4ChatHandler = _image_handler("Gemma4ChatHandler")

__all__ = [n for n in dir() if not n.startswith("_")]
