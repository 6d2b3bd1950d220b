"""llama-server's command line, run as `pyllamakv serve` on the default model.

llama.cpp's server tests (tests/test_llama_server_suite.py) start the
executable named by LLAMA_SERVER_BIN_PATH with llama-server's options; this
module maps them onto `pyllamakv serve`'s (the test writes a small
executable that runs it with the test's Python). The model options
(--hf-repo, --hf-file, -m, ...) are dropped: the server runs the default
model. llama-server's --ctx-size is the whole context, split between the
slots; `serve`'s --ctx is each slot's.
"""
import sys

# llama-server options passed on (same meaning), and those taking a value that are dropped
PASS = {"--port": 1, "--host": 1, "--temp": 1, "--seed": 1, "--api-key": 1, "--alias": 1,
        "-ctk": 1, "-ctv": 1, "-fa": 1, "--n-predict": 1, "--pooling": 1, "--chat-template": 1,
        "--chat-template-file": 1, "--cors-origins": 1, "--n-gpu-layers": 1,
        "--embedding": 0, "--metrics": 0, "--slots": 0, "--no-slots": 0, "--jinja": 0,
        "--no-jinja": 0, "--tags": 1, "--no-ui": 0}
DROP = {"--model", "-m", "--hf-repo", "--hf-file", "--model-url", "--model-draft",
        "--batch-size", "--ubatch-size", "--threads", "--models-dir", "--models-max",
        "--models-preset", "--slot-save-path", "--grp-attn-n", "--grp-attn-w",
        "--lora", "--spec-type", "--spec-draft-n-max", "--spec-draft-n-min",
        "--spec-synth-len", "--spec-synth-rates", "--reasoning-format", "--reasoning",
        "--mmproj-url", "--media-path", "--sleep-idle-seconds", "--cache-ram", "--tools",
        "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json"}


def translate(argv: list[str]) -> list[str]:
    out, ctx, slots, i = [], None, 1, 0
    while i < len(argv):
        a = argv[i]
        if a in ("--ctx-size", "-c"):
            ctx = int(argv[i + 1])
            i += 2
        elif a in ("--parallel", "-np"):
            slots = int(argv[i + 1])
            i += 2
        elif a in PASS:
            out += argv[i:i + 1 + PASS[a]]
            i += 1 + PASS[a]
        elif a in DROP:
            i += 2
        else:       # flags without a value (--offline, --cont-batching, --no-ui, ...)
            i += 1
    out += ["--parallel", str(slots), "--threads", "1", "--queue-size", "64"]
    if ctx is not None:
        out += ["--ctx", str(ctx // slots)]
    return out


def main() -> None:
    from pyllamakv.commands.cli import main as cli
    sys.argv = ["pyllamakv", "serve", *translate(sys.argv[1:])]
    print("llama_server_shim:", " ".join(sys.argv), file=sys.stderr, flush=True)
    cli()


if __name__ == "__main__":
    main()
